"""Sequence partitioning: train one long sequence in S segments with gradient accumulation.

The P-EAGLE pass over a COD-sampled sequence has N ≈ n · (1 + Σ max(r^d, r_min)) elements
and an N × N attention mask; for long sequences that, not the weights, fills the GPU.
Partitioning cuts the anchors into S consecutive ranges. Segment s computes:

    loss-bearing:  every element whose anchor lies in [lo_s, hi_s)       (all depths)
    context:       the depth-0 elements with anchor < lo_s               (no loss)

Why this is exact: a query with anchor a sees only depth-0 keys with anchor ≤ a and its own
chain (``mask.py``), and a depth-0 element sees only depth-0 elements before it. So every
value a loss-bearing element depends on is recomputed inside its segment, through the same
operations on the same inputs; the segment losses sum to the single-pass loss (both
divide by the same global element count) and their gradients accumulate to its gradient.
The price is the recomputed context, ``hi_s`` depth-0 rows per segment; peak memory goes
from ~N² attention scores to ~(n + N/S)².
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cod import Elements


@dataclass(frozen=True)
class Segment:
    """One segment of a sequence: which elements it runs and which of them carry the loss."""

    index: torch.Tensor  # [M] indices into the sequence's Elements
    has_loss: torch.Tensor  # [M] bool
    lo: int  # anchors [lo, hi) are this segment's own
    hi: int


def segment_bounds(elements: Elements, num_segments: int) -> list[tuple[int, int]]:
    """Split the anchor range into ``num_segments`` runs with about equal loss-bearing counts.

    Returns:
        ``[(lo, hi), ...]`` covering ``0..max_anchor`` without gaps; empty runs are dropped.

    >>> from peagle_lab.train.cod import CODConfig, sample_elements
    >>> e = sample_elements(10, torch.ones(10, dtype=torch.bool), CODConfig(num_depths=1))
    >>> segment_bounds(e, 2), segment_bounds(e, 3)
    ([(0, 4), (4, 8)], [(0, 3), (3, 6), (6, 8)])
    """
    if num_segments < 1:
        raise ValueError(f"num_segments={num_segments} is out of range; expected >= 1")
    if len(elements) == 0:
        return []
    num_anchors = int(elements.anchor.max()) + 1
    weight = torch.bincount(elements.anchor[elements.has_loss], minlength=num_anchors)
    if int(weight.sum()) == 0:  # nothing to learn here: any split is as good, use equal anchors
        weight = torch.ones(num_anchors, dtype=torch.long)
    cum = weight.cumsum(0)
    total = int(cum[-1])
    cuts = [0]
    for s in range(1, num_segments):
        # The first anchor by which s/S of the loss-bearing elements have been covered.
        cuts.append(int(torch.searchsorted(cum, s * total / num_segments, side="left")) + 1)
    cuts.append(num_anchors)
    return [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]


def partition(elements: Elements, num_segments: int) -> list[Segment]:
    """The segments of one sequence (see the module docstring for what each one holds).

    Every loss-bearing element is loss-bearing in exactly one segment.

    >>> from peagle_lab.train.cod import CODConfig, sample_elements
    >>> e = sample_elements(6, torch.ones(6, dtype=torch.bool), CODConfig(num_depths=2, ratio=1.0))
    >>> for s in partition(e, 2):  # (anchor, depth, has_loss) of each member
    ...     print(s.lo, s.hi, list(zip(e.anchor[s.index].tolist(), e.depth[s.index].tolist(),
    ...                                s.has_loss.int().tolist())))
    0 2 [(0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)]
    2 4 [(0, 0, 0), (1, 0, 0), (2, 0, 1), (3, 0, 1), (2, 1, 1)]

    The second segment recomputes anchors 0 and 1 at depth 0 as loss-free context.
    """
    segments = []
    for lo, hi in segment_bounds(elements, num_segments):
        own = (elements.anchor >= lo) & (elements.anchor < hi)
        member = own | ((elements.depth == 0) & (elements.anchor < lo))
        index = member.nonzero()[:, 0]
        segments.append(Segment(index, (own & elements.has_loss)[index], lo, hi))
    return segments
