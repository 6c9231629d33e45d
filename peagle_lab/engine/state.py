"""What the decode loop carries from one step to the next, on the device, and how the host reads it.

```
State     next token [c], pending drafts [c, K], start positions [c], active [c]
  ─► verify_batch: [c, K+1] ids, positions, KV slots (an idle row at positions 0..K, writing nothing)
  ─► the verify part ─► Verified: accepted counts [c], next tokens [c], new starts [c],
                        packed [c, K+2] (new tokens, -1 padded, then the count)
  ─► Readback(packed): copied to pinned host memory while the drafter runs; wait() reads it
```
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from .. import step
from ..drafting import DraftResult

__all__ = ["State", "Verified", "verify_batch", "verified", "Readback", "device_flags"]


@dataclass(frozen=True)
class State:
    """What the decode loop carries from one step to the next, on the device."""

    nxt: torch.Tensor  # [c] each request's newest token (the bonus), not yet seen by the target
    draft: DraftResult | None  # the pending drafts, tokens [c, K]; None for plain decoding
    start: torch.Tensor  # [c] the position of ``nxt``
    active: torch.Tensor  # [c] bool, requests still decoding (finished ones write no KV)

    @classmethod
    def idle(cls, c: int, k: int, device: torch.device) -> "State":
        """``c`` rows with no request: token 0 at position 0, zero drafts (K = ``k``; none for 0), none active."""
        zeros = torch.zeros(c, dtype=torch.long, device=device)
        draft = DraftResult(torch.zeros(c, k, dtype=torch.long, device=device), None, 0, None) if k else None
        return cls(zeros, draft, zeros.clone(), torch.zeros(c, dtype=torch.bool, device=device))


class Verified(NamedTuple):
    """One verify part's outputs (on CUDA at temperature 0, the static outputs of its graph)."""

    ids: torch.Tensor  # [c, K+1] the verified batch
    positions: torch.Tensor  # [c, K+1]
    taps: torch.Tensor | None  # [c, K+1, 3H]
    num_accepted: torch.Tensor  # [c]
    next_tokens: torch.Tensor  # [c] the bonus token of the next step
    start: torch.Tensor  # [c] its position
    packed: torch.Tensor  # [c, K+2] the new tokens (-1 padded), then num_accepted: one host read


def verify_batch(nxt: torch.Tensor, drafts: torch.Tensor | None, start: torch.Tensor, max_len: int,
                 active: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The verify batch (``step.verify_inputs``) with each idle row's tokens at positions 0..K of its block.

    An idle row (``active`` False: a finished request's, or a free one) writes no KV and nobody reads
    its outputs, yet the step runs it. At its last request's positions its queries would walk that
    request's whole context (``models.llama.cached_context``: ``kv_len`` is a row's largest position
    + 1, and a c = 64 step takes as long as its longest row); at 0..K they attend to K + 1 keys of
    the row's own block. A row is idle only once the host has flagged it (``State.active``), so a
    row the device still runs as live (queued ahead of the host's read) keeps its positions. The
    drafter reads these positions too: its writes for an idle row land in that row's block, which
    no live request reads (an admission's copy and a new request's own steps write a reused block
    before its queries read it).

    Args:
        nxt: ``[c]`` each row's bonus token.
        drafts: ``[c, K]`` draft tokens, or None (plain decoding).
        start: ``[c]`` the bonus token's position.
        active: ``[c]`` bool, the rows still decoding.

    Returns:
        ``ids``, ``positions`` and KV ``slots``, each ``[c, K+1]``.

    >>> ids, pos, slots = verify_batch(torch.tensor([9, 8]), torch.tensor([[1, 2], [3, 4]]), torch.tensor([5, 40]),
    ...                                max_len=64, active=torch.tensor([True, False]))
    >>> pos.tolist(), slots.tolist()
    ([[5, 6, 7], [0, 1, 2]], [[5, 6, 7], [-1, -1, -1]])
    """
    return step.verify_inputs(nxt, drafts, torch.where(active, start, torch.zeros_like(start)), max_len, active)


def verified(logits, taps, ids, positions, pending: DraftResult | None, start, active, temperature: float, gen,
             backend: str) -> Verified:
    """Verify (or, without drafts, sample) and advance each active request's position."""
    if pending is None:
        nxt = step.sample(logits[:, 0], temperature, gen)
        n, tokens = torch.zeros_like(nxt), nxt[:, None]
    else:
        res = step.verify(logits, pending, temperature, gen, backend)
        nxt, n, tokens = res.next_tokens, res.num_accepted, res.output_tokens
    start = torch.where(active, start + n + 1, start)
    return Verified(ids, positions, taps, n, nxt, start, torch.cat([tokens, n[:, None]], 1))


class Readback:
    """A small device tensor on its way to the host: the copy starts now, ``wait`` returns its values.

    On CUDA the copy goes to pinned memory behind an event, so the host waits for this copy
    only, not for the work queued after it (the drafter's passes).
    """

    def __init__(self, t: torch.Tensor) -> None:
        self.event = None
        if t.device.type == "cuda":
            self.host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            self.host.copy_(t, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = t

    def wait(self) -> list:
        if self.event is not None:
            self.event.synchronize()
        return self.host.tolist()


def device_flags(flags: list[bool], device: torch.device) -> torch.Tensor:
    """``flags`` as a bool tensor on ``device``, copied without a host synchronisation."""
    t = torch.tensor(flags, dtype=torch.bool)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)
