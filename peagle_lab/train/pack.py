"""Packed rows: training sequences laid end to end in rows of a fixed length ``T``.

A batch of padded sequences changes shape with every batch (so compiled kernels recompile,
or pad to the longest) and wastes the padding. Packing fills rows of exactly ``T`` tokens
with whole sequences, first fit over the last few open rows; what is left at a row's end is
padding. Inside a row every token carries:

```
input_ids   5 6 7 8 9 | 4 4 2 | 7 1 1 1 0 0      (0 = padding)
positions   0 1 2 3 4 | 0 1 2 | 0 1 2 3 0 0      (restart with each sequence: RoPE sees its own)
doc         0 0 0 0 0 | 1 1 1 | 2 2 2 2 -1 -1    (which sequence; -1 = padding)
loss_mask   0 0 1 1 1 | 0 1 1 | 0 0 1 1 0 0      (assistant tokens: the ones worth predicting)
```

Attention never crosses a ``doc`` boundary (``mask.doc_causal_mod``), so a packed row
computes what its sequences would compute alone. A sequence longer than ``T`` is cut.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch


@dataclass(frozen=True)
class PackedRows:
    """``R`` rows of ``T`` tokens (any device); slicing rows gives a batch."""

    input_ids: torch.Tensor  # [R, T] int64, 0 on padding
    positions: torch.Tensor  # [R, T] int64 position inside the token's own sequence
    doc: torch.Tensor  # [R, T] int32 sequence index inside the row, -1 on padding
    loss_mask: torch.Tensor  # [R, T] bool

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def row_len(self) -> int:
        return int(self.input_ids.shape[1])

    def rows(self, start: int, stop: int) -> "PackedRows":
        """Rows ``start..stop-1`` (views)."""
        return PackedRows(self.input_ids[start:stop], self.positions[start:stop], self.doc[start:stop],
                          self.loss_mask[start:stop])

    def to(self, device: torch.device | str) -> "PackedRows":
        return PackedRows(*(t.to(device, non_blocking=True) for t in
                            (self.input_ids, self.positions, self.doc, self.loss_mask)))

    @property
    def num_tokens(self) -> int:
        """Real (non-padding) tokens; a host sync, for reports, not for the step."""
        return int((self.doc >= 0).sum())

    def same_doc(self, anchor: torch.Tensor, offset: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Whether token ``anchor + offset`` exists in the anchor's own sequence, and its (clamped) index.

        Args:
            anchor: token indices inside each row.  # [B, n]
            offset: how far ahead (an int, or per element).  # [B, n]

        Returns:
            ``(ok [B, n] bool, index [B, n])``; ``index`` is clamped into the row.
        """
        T = self.row_len
        t = anchor + offset
        idx = t.clamp(max=T - 1)
        own = self.doc.gather(1, anchor)
        return (t < T) & (self.doc.gather(1, idx) == own) & (own >= 0), idx

    def token_ahead(self, anchor: torch.Tensor, offset: int | torch.Tensor) -> torch.Tensor:
        """Token ``x[anchor + offset]`` where it is in the anchor's sequence, else 0.  # [B, n]"""
        ok, idx = self.same_doc(anchor, offset)
        return torch.where(ok, self.input_ids.gather(1, idx), torch.zeros_like(idx))

    def label_valid(self, anchor: torch.Tensor, offset: int | torch.Tensor) -> torch.Tensor:
        """True where token ``anchor + offset`` is an assistant token of the anchor's sequence.  # [B, n]"""
        ok, idx = self.same_doc(anchor, offset)
        return ok & self.loss_mask.gather(1, idx)


def pack_examples(examples: Sequence, row_len: int, order: Sequence[int] | None = None,
                  window: int = 16) -> PackedRows:
    """Pack ``examples`` (``input_ids``, ``assistant_start``) into rows of ``row_len`` tokens.

    Args:
        examples: the sequences.
        row_len: ``T``, tokens per row (≥ 4).
        order: the order to place them in (default: as given).
        window: first fit looks at the last ``window`` open rows (more packs denser, slower).

    Returns:
        ``PackedRows`` on the CPU, rows in the order they were opened.

    >>> from types import SimpleNamespace as E
    >>> p = pack_examples([E(input_ids=[5, 6, 7], assistant_start=1), E(input_ids=[8, 9], assistant_start=1),
    ...                    E(input_ids=[3, 3, 3, 3], assistant_start=2)], row_len=6)
    >>> p.input_ids.tolist(), p.doc.tolist()
    ([[5, 6, 7, 8, 9, 0], [3, 3, 3, 3, 0, 0]], [[0, 0, 0, 1, 1, -1], [0, 0, 0, 0, -1, -1]])
    """
    if isinstance(row_len, bool) or not isinstance(row_len, int) or row_len < 4:
        raise ValueError(f"row_len={row_len!r} is out of range; expected an integer >= 4")
    order = range(len(examples)) if order is None else order
    free: list[int] = []  # free tokens of each open row
    placed: list[list[int]] = []  # example indices per row
    open_rows: list[int] = []  # the rows first fit looks at
    for i in order:
        n = min(len(examples[i].input_ids), row_len)
        if n == 0:
            continue
        row = next((r for r in open_rows if free[r] >= n), None)
        if row is None:
            row = len(free)
            free.append(row_len)
            placed.append([])
            open_rows.append(row)
            if len(open_rows) > window:
                open_rows.pop(0)
        placed[row].append(i)
        free[row] -= n
    R = len(placed)
    ids = np.zeros((R, row_len), dtype=np.int64)
    pos = np.zeros((R, row_len), dtype=np.int64)
    doc = np.full((R, row_len), -1, dtype=np.int32)
    loss = np.zeros((R, row_len), dtype=bool)
    for r, members in enumerate(placed):
        at = 0
        for d, i in enumerate(members):
            e = examples[i]
            n = min(len(e.input_ids), row_len)
            ids[r, at:at + n] = e.input_ids[:n]
            pos[r, at:at + n] = np.arange(n)
            doc[r, at:at + n] = d
            loss[r, at + min(e.assistant_start, n):at + n] = True
            at += n
    return PackedRows(torch.from_numpy(ids), torch.from_numpy(pos), torch.from_numpy(doc), torch.from_numpy(loss))


def epoch_rows(examples: Sequence, row_len: int, seed: int, epoch: int) -> PackedRows:
    """The rows of one epoch: a seeded shuffle of ``examples``, packed, then the rows shuffled.

    The same ``(seed, epoch)`` always gives the same rows, on every rank and after a resume.
    """
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(range(len(examples)))
    rng.shuffle(order)
    packed = pack_examples(examples, row_len, order)
    perm = list(range(len(packed)))
    rng.shuffle(perm)
    idx = torch.tensor(perm, dtype=torch.long)
    return PackedRows(packed.input_ids[idx], packed.positions[idx], packed.doc[idx], packed.loss_mask[idx])


def loss_fraction(rows: PackedRows) -> float:
    """Share of row tokens that carry a loss (sizes COD's fixed per-depth quotas)."""
    return float(rows.loss_mask.float().mean()) if len(rows) else 0.0
