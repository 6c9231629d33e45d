"""One training step on packed rows, for either method: inputs built outside, the loss inside a module.

```
rows [B, T] ─► target (no grad, doc-causal mask) ─► taps, target_probs, argmax, in_vocab
           ─► elements  P-EAGLE: COD anchors/depths [B, M]      EAGLE-3: every anchor × TTT step [B, K·T]
           ─► labels    row a+d+1 predicts token a+d+2; weight = has label · label in draft vocab · decay**d
           ─► masks     mask.chain_mod / mask.ttt_mod (block-sparse on a GPU)
           ─► DraftObjective(...)  ─► Σ weight·ce, per-depth sums          (DDP wraps it, compile fuses it)
```
Everything has a fixed shape and stays on the device: the only host synchronisations of a
run are its log lines. The loss is ``Σ weight·ce / normaliser`` with the normaliser counted
over all ranks, so DDP's gradient average equals one process's gradient on the whole batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .cod import CODConfig, packed_quotas, sample_packed
from .eagle3 import packed_unroll
from .loss import packed_scores, packed_stats
from .mask import build_mask, chain_mod, doc_causal_mod, ttt_masks, ttt_mod
from .pack import PackedRows
from .peagle import packed_forward
from .targets import PackedTargets


@dataclass(frozen=True)
class StepInputs:
    """What the objective module needs besides the rows and the target's view of them."""

    anchor: torch.Tensor  # [B, N] element anchors (EAGLE-3: step-major, N = K·T)
    depth: torch.Tensor  # [B, N] depth / TTT step of each element
    label_row: torch.Tensor  # [B, N] the target row whose distribution the element learns
    valid: torch.Tensor  # [B, N] bool: the element has a label (an assistant token of its sequence)
    weight: torch.Tensor  # [B, N] float: its weight in the loss (0: no label, or one the draft vocab lacks)
    mask: object  # the drafter's attention mask (dense bool or BlockMask; EAGLE-3: a tuple, one a step)


class DraftObjective(nn.Module):
    """``forward`` returns ``(Σ weight·ce, per-depth sums [4, K])`` for one batch of packed rows.

    With ``top1_weight`` λ > 0 each element's ``ce`` in the objective is ``soft + λ · top-1``: the soft
    cross-entropy plus the hard one of the target's most likely draft token, which is the token a greedy
    draft must hit. The per-depth sums (the logged loss) stay the soft cross-entropy alone, so runs with
    and without the term compare on the same scale.
    """

    def __init__(self, drafter, num_depths: int, top1_weight: float = 0.0) -> None:
        super().__init__()
        self.drafter = drafter
        self.num_depths = num_depths
        self.top1_weight = float(top1_weight)

    def forward(self, input_ids, positions, doc, loss_mask, taps, target_probs, target_argmax, anchor, depth,
                label_row, valid, weight, mask):
        rows = PackedRows(input_ids, positions, doc, loss_mask)
        if self.drafter.config.method == "peagle":
            hidden = packed_forward(self.drafter, rows, taps, anchor, depth, mask)  # [B, M, H]
        else:
            hidden = torch.cat(packed_unroll(self.drafter, rows, taps, self.num_depths, mask), 1)  # [B, K·T, H]
        ce, correct, top1 = packed_scores(self.drafter, hidden, target_probs, target_argmax, label_row,
                                          top1=self.top1_weight > 0)
        objective = ce if top1 is None else ce + self.top1_weight * top1
        return (weight * objective).sum(), packed_stats(depth, self.num_depths, valid, correct, weight, ce)


class StepBuilder:
    """Builds every step's masks and elements for one method and one batch shape.

    The mask functions close over buffers that live as long as the builder and are
    refreshed in place, so a compiled step sees the same functions every time and never
    recompiles for a new batch.

    Args:
        method: "eagle3" or "peagle".
        batch / row_len: rows per rank and tokens per row.
        cod: P-EAGLE's depths and COD ratios (EAGLE-3: ``num_depths`` = TTT steps).
        depth_decay: depth ``d`` weighs ``depth_decay ** d`` in the loss.
        loss_fraction: share of row tokens with a loss (sizes the COD quotas).
        block: block-sparse flex masks (GPU) instead of dense boolean ones.
    """

    def __init__(self, method: str, batch: int, row_len: int, cod: CODConfig, depth_decay: float,
                 loss_fraction: float, device: torch.device, block: bool) -> None:
        self.method, self.B, self.T, self.K = method, batch, row_len, cod.num_depths
        self.device, self.block = torch.device(device), block
        self.depth_weight = torch.tensor([depth_decay ** d for d in range(self.K)], device=device)
        self.doc = torch.full((batch, row_len), -1, dtype=torch.int32, device=device)
        self.target_mod = doc_causal_mod(self.doc)
        if method == "peagle":
            self.quotas = packed_quotas(row_len, cod, max(loss_fraction, 1e-3))
            M = sum(self.quotas)
            self.anchor = torch.zeros(batch, M, dtype=torch.long, device=device)
            self.depth = torch.zeros(batch, M, dtype=torch.long, device=device)
            self.elem_doc = torch.zeros(batch, M, dtype=torch.int32, device=device)
            self.draft_mod = chain_mod(self.anchor, self.depth, self.elem_doc)
        else:
            self.quotas = [row_len] * self.K
            self.draft_mod = ttt_mod(self.doc)

    @property
    def num_elements(self) -> int:
        """How many drafter rows one batch row computes, Σ quotas for P-EAGLE and K·T for EAGLE-3."""
        return sum(self.quotas)

    def target_mask(self, rows: PackedRows):
        """The target's doc-causal mask for ``rows`` (refreshes the shared ``doc`` buffer)."""
        self._check(rows)
        self.doc.copy_(rows.doc)
        return build_mask(self.target_mod, self.B, self.T, self.T, self.device, self.block)

    def inputs(self, rows: PackedRows, targets: PackedTargets, generator: torch.Generator | None,
               rank: int = 0, world_size: int = 1) -> StepInputs:
        """Elements, labels, weights and the drafter's mask (call :meth:`target_mask` first).

        COD's draws are made for all ``world_size`` ranks' rows and sliced to this rank's, so a
        global batch trains the same elements on any number of ranks (``generator`` is seeded
        the same on every rank).
        """
        B, T = self.B, self.T
        if self.method == "peagle":
            anchor, depth = sample_packed(lambda a, d: rows.label_valid(a, d + 2), B, self.quotas, generator,
                                          self.device, rows=(rank * B, world_size * B))
        else:
            anchor = torch.arange(T, device=self.device).repeat(self.K).expand(B, -1)
            depth = torch.arange(self.K, device=self.device).repeat_interleave(T).expand(B, -1)
        valid = rows.label_valid(anchor, depth + 2)
        label_row = (anchor + depth + 1).clamp(max=T - 1)
        weight = (valid & targets.in_vocab.gather(1, label_row)).float() * self.depth_weight[depth]
        if self.method == "peagle":
            self.anchor.copy_(anchor)
            self.depth.copy_(depth)
            self.elem_doc.copy_(rows.doc.gather(1, anchor))
            mask = build_mask(self.draft_mod, B, anchor.shape[1], anchor.shape[1], self.device, self.block)
        else:
            mask = ttt_masks(self.doc, self.draft_mod, self.K, self.device, self.block)
        return StepInputs(anchor, depth, label_row, valid, weight, mask)

    def _check(self, rows: PackedRows) -> None:
        if tuple(rows.input_ids.shape) != (self.B, self.T):
            raise ValueError(f"rows of shape {tuple(rows.input_ids.shape)}; this step is built for "
                             f"({self.B}, {self.T}) (batch rows per rank, row length)")
