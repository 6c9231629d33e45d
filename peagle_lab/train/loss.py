"""The drafter's loss: soft cross-entropy against the target, over the draft vocabulary.

Labels are the target's whole next-token distribution restricted to the draft vocabulary
(and renormalised there), not the token that happens to follow in the data:

* the data's responses are partly *sampled*, so the next data token is often not what the
  target would pick; the distribution always says what the target prefers, and its argmax
  is exactly what greedy verification accepts;
* the full distribution carries far more signal per position than one label, which matters
  with a few minutes of training, and it is what rejection sampling checks drafts against.

Minimising it is minimising KL(target ‖ drafter) on the draft vocabulary (the two differ by
the target's entropy, a constant). Metrics are kept per depth: the loss and the top-1
agreement with the target's argmax over the *full* vocabulary (the acceptance proxy).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def soft_cross_entropy(draft_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """Per-row ``-Σ_v softmax(target)_v · log_softmax(draft)_v``.

    Args:
        draft_logits: the drafter's logits over the draft vocabulary.  # [N, Vd]
        target_logits: the target's logits at the same rows, same vocabulary.  # [N, Vd]

    Returns:
        float32 ``[N]``.

    >>> t = torch.tensor([[0.0, 0.0]])  # a fair coin
    >>> round(soft_cross_entropy(torch.tensor([[0.0, 0.0]]), t).item(), 4)  # = log 2, the minimum
    0.6931
    >>> soft_cross_entropy(torch.tensor([[5.0, 0.0]]), t).item() > 0.6931
    True
    """
    target_probs = torch.softmax(target_logits.float(), -1)
    return -(target_probs * torch.log_softmax(draft_logits.float(), -1)).sum(-1)


class DepthStats:
    """Running per-depth sums of loss, top-1 agreement and counts (kept on the device)."""

    def __init__(self, num_depths: int, device: torch.device | str = "cpu") -> None:
        self.loss = torch.zeros(num_depths, dtype=torch.float64, device=device)
        self.correct = torch.zeros(num_depths, dtype=torch.float64, device=device)
        self.count = torch.zeros(num_depths, dtype=torch.float64, device=device)

    def add(self, depth: torch.Tensor, ce: torch.Tensor, correct: torch.Tensor) -> None:
        """Accumulate rows: their depths, losses and whether the drafter's argmax was right.  # [N]"""
        d = depth.to(self.loss.device)
        self.loss.index_add_(0, d, ce.detach().double())
        self.correct.index_add_(0, d, correct.double())
        self.count.index_add_(0, d, torch.ones_like(ce, dtype=torch.float64))

    def result(self, loss: float, num_elements: int) -> "StepResult":
        """Means per depth as a ``StepResult`` (one host sync)."""
        count = self.count.cpu()
        per = lambda x: tuple((x.cpu() / count.clamp(min=1)).tolist())  # noqa: E731
        return StepResult(loss, per(self.loss), per(self.correct), tuple(int(c) for c in count.tolist()),
                          num_elements, int(count.sum()))


@dataclass(frozen=True)
class StepResult:
    """What one training (or evaluation) pass over a batch measured."""

    loss: float  # the objective: mean soft cross-entropy over loss-bearing elements
    depth_loss: tuple[float, ...]  # mean loss per depth (EAGLE-3: per TTT step)
    depth_acc: tuple[float, ...]  # drafter top-1 == target top-1, per depth
    depth_count: tuple[int, ...]  # loss-bearing elements per depth
    num_elements: int  # drafter rows computed, recomputed context included
    num_loss: int  # loss-bearing elements

    def as_dict(self) -> dict:
        return {"loss": self.loss, "depth_loss": list(self.depth_loss), "depth_acc": list(self.depth_acc),
                "depth_count": list(self.depth_count), "num_elements": self.num_elements,
                "num_loss": self.num_loss}


def score_rows(drafter, hidden: torch.Tensor, target_logits: torch.Tensor, target_argmax: torch.Tensor,
               depth: torch.Tensor, normalizer: float, stats: DepthStats) -> torch.Tensor:
    """The summed loss of some rows divided by ``normalizer``; also updates ``stats``.

    Args:
        drafter: the ``Drafter`` (its final norm and lm_head turn hidden states into logits).
        hidden: the drafter's pre-norm output at the loss-bearing rows.  # [N, H]
        target_logits: the target's logits there, over the draft vocabulary.  # [N, Vd]
        target_argmax: the target's argmax over the full vocabulary (target ids).  # [N]
        depth: each row's depth.  # [N]
        normalizer: the global number of loss-bearing elements, so parts sum to the mean.
    """
    logits = drafter.lm_head(drafter.norm(hidden)).float()  # [N, Vd]
    ce = soft_cross_entropy(logits, target_logits)
    with torch.no_grad():
        stats.add(depth, ce, drafter.to_target_ids(logits.argmax(-1)) == target_argmax)
    return ce.sum() / normalizer


# ------------------------------------------------------------------ packed rows
# Fixed shapes: every element is scored, and the weights (0 where an element has no label,
# or its label lies outside the draft vocabulary) decide what counts. No boolean indexing,
# so nothing waits for the host to learn how many rows survived.

def packed_scores(drafter, hidden: torch.Tensor, target_probs: torch.Tensor, target_argmax: torch.Tensor,
                  label_row: torch.Tensor, top1: bool = False
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Soft cross-entropy and top-1 agreement of every element of packed rows.

    Args:
        drafter: the ``Drafter`` (final norm, lm_head, d2t).
        hidden: the drafter's pre-norm outputs.  # [B, n, H]
        target_probs: the target's distribution on the draft vocabulary per row token.  # [B, T, Vd]
        target_argmax: the target's argmax over the full vocabulary (target ids).  # [B, T]
        label_row: which token's distribution each element learns.  # [B, n], in [0, T)
        top1: also the hard cross-entropy of the target's most likely draft token, ``-log q(argmax p)``.

    Returns:
        ``(ce [B, n] float32, correct [B, n] bool, top1_ce [B, n] float32 or None)``; meaningless where an
        element has no label.
    """
    B, n, _ = hidden.shape
    T = target_probs.shape[1]
    flat = (label_row + T * torch.arange(B, device=label_row.device)[:, None]).reshape(-1)
    probs = target_probs.reshape(B * T, -1).index_select(0, flat)  # [B·n, Vd]
    logits = drafter.lm_head(drafter.norm(hidden)).float().reshape(B * n, -1)  # [B·n, Vd]
    logp = torch.log_softmax(logits, -1)
    ce = -(probs * logp).sum(-1).view(B, n)
    top1_ce = -logp.gather(1, probs.argmax(-1, keepdim=True)).view(B, n) if top1 else None
    with torch.no_grad():
        correct = drafter.to_target_ids(logits.argmax(-1)).view(B, n) == target_argmax.gather(1, label_row)
    return ce, correct, top1_ce


def packed_stats(depth: torch.Tensor, num_depths: int, valid: torch.Tensor, correct: torch.Tensor,
                 weight: torch.Tensor, ce: torch.Tensor) -> torch.Tensor:
    """Per-depth sums ``[4, K]``: labelled elements, correct ones, Σ weight·ce, Σ weight.

    Agreement counts every labelled element (also those whose label the draft vocabulary
    lacks: a drafter cannot get those right, and at inference they are rejected too).
    """
    with torch.no_grad():
        vals = torch.stack([valid.float(), (valid & correct).float(), weight * ce.detach(), weight])  # [4, B, n]
        out = torch.zeros(4, num_depths, device=ce.device, dtype=torch.float32)
        return out.index_add_(1, depth.reshape(-1), vals.reshape(4, -1))


def stats_result(stats: torch.Tensor, num_elements: int) -> StepResult:
    """A ``StepResult`` from summed :func:`packed_stats` (one host sync)."""
    s = stats.double().cpu()
    count, correct, wce, w = s
    loss = float(wce.sum() / w.sum().clamp(min=1e-12))
    per = lambda x, d: tuple((x / d.clamp(min=1e-12)).tolist())  # noqa: E731
    return StepResult(loss, per(wce, w), per(correct, count), tuple(int(c) for c in count.tolist()),
                      num_elements, int(count.sum()))
