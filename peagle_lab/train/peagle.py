"""P-EAGLE training: every depth of every sampled chain in one parallel drafter pass.

For a sequence ``x`` with target taps ``h``, the elements (``cod.py``) become drafter slots::

    depth 0, anchor a:  token x[a+1],          hidden fc(h[a]),          position a
    depth d, anchor a:  token mask_token_id,   hidden shared_hidden,     position a + d
    label of (a, d):    the target's distribution for token a + d + 2   (logits row a + d + 1)

which is the inference layout (``drafting.draft_parallel``): the bonus slot is a depth-0
slot, the mask slots are depths 1..K-1. Attention follows the chain rule of ``mask.py``,
and the loss is the mean soft cross-entropy over all loss-bearing elements of all depths
(``loss.py``); the mask embedding and ``mask_hidden`` get gradients through the deep slots.

With ``num_segments`` S > 1 each sequence is run in S segments (``partition.py``), each
backpropagated as soon as it is computed, so only one segment's activations are alive at a
time; the accumulated gradients equal the single-pass ones.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, ContextManager

import torch
from torch.nn.utils.rnn import pad_sequence

from ..config import check_int
from .cod import CODConfig, Elements, sample_elements
from .loss import DepthStats, StepResult, score_rows
from .mask import chain_mask
from .partition import Segment, partition
from .targets import TargetBatch


@dataclass(frozen=True)
class PEagleTrainConfig:
    """P-EAGLE's training knobs: the depths and COD ratios, and how many segments."""

    cod: CODConfig = field(default_factory=CODConfig)
    num_segments: int = 1  # S: segments per sequence (gradient accumulation inside one sequence)

    def __post_init__(self) -> None:
        check_int("num_segments", self.num_segments, 1, 64)


@dataclass(frozen=True)
class SlotBatch:
    """One segment of every sequence of a batch, as padded drafter inputs."""

    input_ids: torch.Tensor  # [B, M]
    hidden: torch.Tensor  # [B, M, H] fc(taps) at depth 0, shared_hidden deeper
    positions: torch.Tensor  # [B, M] anchor + depth
    attn_mask: torch.Tensor  # [B, 1, M, M]
    anchor: torch.Tensor  # [B, M]
    depth: torch.Tensor  # [B, M]
    valid: torch.Tensor  # [B, M] False on padding
    has_loss: torch.Tensor  # [B, M]


def sample_batch_elements(tb: TargetBatch, cod: CODConfig, generator: torch.Generator | None = None) -> list[Elements]:
    """COD-sample the elements of every sequence in ``tb`` (on the CPU)."""
    lengths = tb.tokens.lengths.tolist()
    mask = tb.tokens.loss_mask.cpu()
    return [sample_elements(n, mask[b], cod, generator) for b, n in enumerate(lengths)]


def build_slots(drafter, tb: TargetBatch, elements: list[Elements], segments: list[Segment | None]) -> SlotBatch:
    """Lay out one segment per sequence (None: that sequence has no such segment).

    Args:
        drafter: a P-EAGLE ``Drafter`` (``fc``, ``shared_hidden`` and ``mask_token_id``).
        tb: the batch with the target's taps.
        elements: each sequence's COD elements; ``segments``: which of them to run.
    """
    dev = tb.taps.device
    empty = torch.zeros(0, dtype=torch.long)
    idx = [s.index if s is not None else empty for s in segments]
    anchor = pad_sequence([e.anchor[i] for e, i in zip(elements, idx)], batch_first=True).to(dev)  # [B, M]
    depth = pad_sequence([e.depth[i] for e, i in zip(elements, idx)], batch_first=True).to(dev)
    has_loss = pad_sequence([s.has_loss if s is not None else empty.bool() for s in segments],
                            batch_first=True).to(dev)
    valid = pad_sequence([torch.ones(len(i), dtype=torch.bool) for i in idx], batch_first=True).to(dev)
    B, M = anchor.shape
    T = tb.tokens.input_ids.shape[1]
    rows = torch.arange(B, device=dev)[:, None].expand(B, M)
    is_ctx = valid & (depth == 0)
    next_tok = tb.tokens.input_ids[rows, (anchor + 1).clamp(max=T - 1)]
    input_ids = torch.where(depth == 0, next_tok, torch.full_like(next_tok, drafter.config.mask_token_id))
    shared = drafter.shared_hidden()  # [H]
    hidden = shared.expand(B, M, shared.shape[-1]).clone()  # [B, M, H]
    hidden[is_ctx] = drafter.fc(tb.taps[rows[is_ctx], anchor[is_ctx]].to(drafter.dtype)).to(hidden.dtype)
    mask = chain_mask(anchor, depth, anchor, depth, valid)
    return SlotBatch(input_ids, hidden, anchor + depth, mask, anchor, depth, valid, has_loss & valid)


def peagle_step(drafter, tb: TargetBatch, cfg: PEagleTrainConfig, generator: torch.Generator | None = None,
                backward: bool = True, amp: Callable[[], ContextManager] | None = None) -> StepResult:
    """Loss (and, with ``backward``, gradients) of one batch; segments accumulate gradients.

    Args:
        drafter: a P-EAGLE ``Drafter`` in training mode.
        tb: the batch and the target's taps/logits (``targets.compute_targets``).
        cfg: depths, COD ratios and the number of segments.
        generator: the CPU generator COD draws from.
        backward: call ``backward()`` on every segment's loss (False: evaluation only).
        amp: a context-manager factory for the forward passes (autocast); backward runs outside.

    Returns:
        ``StepResult``; ``loss`` is the mean over loss-bearing elements of the whole batch.

    Raises:
        ValueError: a drafter that is not a P-EAGLE one.
    """
    if drafter.config.method != "peagle":
        raise ValueError(f"peagle_step needs a P-EAGLE drafter, got method={drafter.config.method!r}")
    elements = sample_batch_elements(tb, cfg.cod, generator)
    parts = [partition(e, cfg.num_segments) for e in elements]
    normalizer = max(sum(int(e.has_loss.sum()) for e in elements), 1)
    stats = DepthStats(cfg.cod.num_depths, tb.taps.device)
    total = torch.zeros((), device=tb.taps.device)
    computed = 0
    for s in range(max((len(p) for p in parts), default=0)):
        segs = [p[s] if s < len(p) else None for p in parts]
        with (amp or nullcontext)():
            sb = build_slots(drafter, tb, elements, segs)
            out = drafter(sb.input_ids, sb.hidden, sb.positions, attn_mask=sb.attn_mask, return_logits=False)
            rows = sb.has_loss.nonzero(as_tuple=True)
            anchor, depth = sb.anchor[rows], sb.depth[rows]
            label_rows = (rows[0], anchor + depth + 1)
            loss = score_rows(drafter, out.hidden[rows], tb.logits[label_rows], tb.argmax[label_rows], depth,
                              normalizer, stats)
        if backward and loss.requires_grad:
            loss.backward()
        total += loss.detach()
        computed += int(sb.valid.sum())
    return stats.result(float(total), computed)


# ------------------------------------------------------------------ packed rows
def packed_forward(drafter, rows, taps: torch.Tensor, anchor: torch.Tensor, depth: torch.Tensor,
                   attn_mask) -> torch.Tensor:
    """The parallel pass over the COD elements of packed rows (``cod.sample_packed``).

    The depth-0 block is every token of the row in order, so its hidden states are
    ``fc(taps)`` as they stand; every deeper element is a mask slot with ``shared_hidden``.

    Args:
        drafter: a P-EAGLE ``Drafter``.
        rows: the batch's ``pack.PackedRows``.
        taps: the target's taps.  # [B, T, 3H]
        anchor / depth: the elements, depth-major.  # [B, M]
        attn_mask: ``mask.chain_mod`` built for these elements.

    Returns:
        The drafter's pre-norm output per element.  # [B, M, H]
    """
    B, T = rows.input_ids.shape
    M = anchor.shape[1]
    tokens = torch.where(depth == 0, rows.token_ahead(anchor, 1),
                         torch.full_like(anchor, drafter.config.mask_token_id))
    context = drafter.fc(taps.to(drafter.dtype))  # [B, T, H]
    shared = drafter.shared_hidden().to(context.dtype)
    hidden = torch.cat([context, shared.expand(B, M - T, shared.shape[-1])], 1)  # [B, M, H]
    positions = rows.positions.gather(1, anchor) + depth
    return drafter(tokens, hidden, positions, attn_mask=attn_mask, return_logits=False).hidden
