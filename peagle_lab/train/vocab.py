"""The draft vocabulary: the ``Vd`` most frequent target tokens, and the ``d2t``/``t2d`` maps.

A drafter's ``lm_head`` dominates its cost (49152 × 576 for SmolLM2, more than a decoder
layer), yet most of those rows are tokens the assistant never writes. EAGLE-3 therefore
predicts over a draft vocabulary of the ``Vd`` tokens that are most frequent *as
predictions* (in the assistant part of the training data) and maps them back::

    draft id i  ─►  target id  draft_to_target[i] = i + d2t[i]      (ascending ids, so d2t ≥ 0)
    target id t ─►  t2d[t] = True if t is in the draft vocabulary

The target's distribution for the loss is restricted to the same ids (``targets.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch


@dataclass(frozen=True)
class DraftVocab:
    """A draft vocabulary and how much of the counted tokens it covers."""

    draft_to_target: torch.Tensor  # [Vd] int64 target ids, ascending
    vocab_size: int  # the target's vocabulary
    coverage: float  # share of counted token occurrences inside the draft vocabulary

    @property
    def d2t(self) -> torch.Tensor:
        """Offsets ``[Vd]``: target_id = draft_id + d2t[draft_id] (speculators' convention)."""
        return self.draft_to_target - torch.arange(self.draft_to_target.numel())

    @property
    def t2d(self) -> torch.Tensor:
        """``[V]`` bool: which target ids the draft vocabulary contains."""
        m = torch.zeros(self.vocab_size, dtype=torch.bool)
        m[self.draft_to_target] = True
        return m


def count_tokens(examples: Iterable, vocab_size: int, assistant_only: bool = True) -> torch.Tensor:
    """Occurrences of every target id ``[V]`` in ``examples`` (``input_ids``, ``assistant_start``)."""
    ids = [t for e in examples for t in (e.input_ids[e.assistant_start:] if assistant_only else e.input_ids)]
    return torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=vocab_size)


def build_draft_vocab(counts: torch.Tensor, draft_vocab_size: int, always: Sequence[int] = ()) -> DraftVocab:
    """The ``draft_vocab_size`` most frequent ids (ties: lower id first), plus ``always``.

    Args:
        counts: occurrences per target id.  # [V]
        draft_vocab_size: ``Vd``, at most ``V``.
        always: ids to include whatever their count (EOS, so drafts can end a turn).

    Raises:
        ValueError: ``draft_vocab_size`` outside [len(always), V] or an ``always`` id outside [0, V).

    >>> v = build_draft_vocab(torch.tensor([5, 0, 3, 9, 1]), 3)
    >>> v.draft_to_target.tolist(), v.d2t.tolist(), v.t2d.int().tolist(), round(v.coverage, 3)
    ([0, 2, 3], [0, 1, 1], [1, 0, 1, 1, 0], 0.944)
    """
    V = counts.numel()
    always = sorted(set(int(a) for a in always))
    if any(not 0 <= a < V for a in always):
        raise ValueError(f"always ids {always} must lie in [0, {V})")
    if not max(len(always), 1) <= draft_vocab_size <= V:
        raise ValueError(f"draft_vocab_size={draft_vocab_size} is out of range; expected [{max(len(always), 1)}, {V}]")
    # Sort by count descending, id ascending: a stable sort of ids by -count does both.
    score = counts.clone().long()
    if always:
        score[always] = score.max() + 1
    order = torch.sort(-score, stable=True).indices
    chosen = order[:draft_vocab_size].sort().values
    total = int(counts.sum())
    coverage = float(counts[chosen].sum()) / total if total else 1.0
    return DraftVocab(chosen, V, coverage)


def apply_draft_vocab(drafter, vocab: DraftVocab) -> None:
    """Write ``vocab`` into the drafter's ``d2t``/``t2d`` buffers.

    Raises:
        ValueError: the drafter's ``draft_vocab_size`` or vocabulary differs.
    """
    cfg = drafter.config
    if vocab.draft_to_target.numel() != cfg.draft_vocab_size or vocab.vocab_size != cfg.vocab_size:
        raise ValueError(f"vocabulary of {vocab.draft_to_target.numel()} ids over {vocab.vocab_size} does not fit a "
                         f"drafter with draft_vocab_size={cfg.draft_vocab_size}, vocab_size={cfg.vocab_size}")
    with torch.no_grad():
        drafter.d2t.copy_(vocab.d2t.to(drafter.d2t.device))
        drafter.t2d.copy_(vocab.t2d.to(drafter.t2d.device))


def draft_to_target_ids(drafter) -> torch.Tensor:
    """The target ids ``[Vd]`` of a drafter's draft vocabulary (``arange + d2t``)."""
    return drafter.to_target_ids(torch.arange(drafter.config.draft_vocab_size, device=drafter.d2t.device))


def token_coverage(t2d: torch.Tensor, sequences: Iterable[Sequence[int]]) -> tuple[float, int]:
    """Share of the tokens in ``sequences`` that a draft vocabulary holds, and how many were counted.

    A draft outside the vocabulary is never proposed, so this share caps the first draft
    position's acceptance on those tokens (and every later position's with it).

    Args:
        t2d: ``[V]`` bool, which target ids the draft vocabulary contains (a drafter's ``t2d``).
        sequences: token ids, e.g. the target's greedy outputs on a workload.

    Raises:
        ValueError: an id outside ``[0, V)``.

    >>> token_coverage(torch.tensor([True, False, True]), [[0, 1], [2, 2]])
    (0.75, 4)
    """
    ids = torch.tensor([t for s in sequences for t in s], dtype=torch.long)
    if ids.numel() == 0:
        return 1.0, 0
    V = t2d.numel()
    if int(ids.min()) < 0 or int(ids.max()) >= V:
        raise ValueError(f"token ids must lie in [0, {V}); got {int(ids.min())}..{int(ids.max())}")
    return float(t2d.bool().cpu()[ids].float().mean()), int(ids.numel())
