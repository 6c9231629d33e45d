"""EAGLE-3 training with training-time test (TTT): unroll the drafter on its own outputs.

At inference EAGLE-3 drafts K tokens in K passes, each fed the previous pass's pre-norm
hidden state instead of the target's taps. Training only on target taps would never show
the drafter its own, drifting inputs; TTT unrolls the drafter ``ttt_steps`` times over the
whole sequence, as inference does, and trains every step::

    step 0, anchor a:  token x[a+1],   hidden fc(h[a]),                 position a
    step j, anchor a:  token x[a+j+1], hidden = step j-1's output at a,  position a + j
    label of (a, j):   the target's distribution for token a + j + 2

Step ``j`` is depth ``j`` of the chain rule in ``mask.py``: its query sees the step-0 keys
of anchors ≤ a (the context) and the keys that steps 1..j wrote for its own anchor, which
is exactly what the drafter's KV cache holds at inference. The earlier steps' keys and
values are kept, with their autograd history, in ``ChainKV``, which the drafter's attention
layers write to and read from like a KV cache. Gradients flow through the fed-back hidden
states, so early steps learn to produce states that later steps can continue from.

Step j's input token is the data token ``x[a+j+1]``, not the drafter's own guess: a draft is
only ever extended past position j if the tokens before it were accepted, i.e. equal to
what the target produced.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, ContextManager

import torch

from ..config import check_int
from .loss import DepthStats, StepResult, score_rows
from .mask import chain_mask
from .targets import TargetBatch


@dataclass(frozen=True)
class Eagle3TrainConfig:
    """EAGLE-3's training knob: how many drafting steps the training-time test unrolls."""

    ttt_steps: int = 7  # unrolled passes; step j trains draft position j + 1 (K up to ttt_steps)

    def __post_init__(self) -> None:
        check_int("ttt_steps", self.ttt_steps, 1, 32)


class ChainKV:
    """The keys/values of all unrolled steps so far, per layer, with autograd intact.

    It stands in for ``KVCache`` in the drafter's attention layers: ``write`` appends this
    step's keys/values, ``read`` returns every step's, concatenated along the key axis in
    step order (step 0's ``n`` keys, then step 1's, ...). Nothing is written in place, so
    backpropagation through earlier steps stays valid.
    """

    def __init__(self, num_layers: int) -> None:
        self.k: list[list[torch.Tensor]] = [[] for _ in range(num_layers)]
        self.v: list[list[torch.Tensor]] = [[] for _ in range(num_layers)]

    def write(self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append this step's ``k``/``v`` [c·n, n_kv, hd]; ``slot_mapping`` is unused."""
        self.k[layer].append(k)
        self.v[layer].append(v)

    def read(self, layer: int, c: int) -> tuple[torch.Tensor, torch.Tensor]:
        """All steps' keys/values as ``[c, n_kv, steps·n, hd]``."""
        k = torch.cat([t.view(c, -1, *t.shape[1:]) for t in self.k[layer]], 1)  # [c, steps·n, n_kv, hd]
        v = torch.cat([t.view(c, -1, *t.shape[1:]) for t in self.v[layer]], 1)
        return k.transpose(1, 2), v.transpose(1, 2)


def ttt_unroll(drafter, tb: TargetBatch, ttt_steps: int) -> list[tuple[torch.Tensor, ...]]:
    """Run the unroll; per step ``(hidden, valid, has_loss, label_row)``.

    Args:
        drafter: the ``Drafter`` (EAGLE-3 path: token embeddings and fed-back hidden states).
        tb: the batch and the target's taps.
        ttt_steps: passes to unroll (stops early once no anchor has a label left).

    Returns:
        One tuple per step ``j``: the drafter's pre-norm output ``[B, n, H]`` for anchors
        ``0..n-1`` (n = T - 2), which anchors have a label ``[B, n]``, which carry the loss
        ``[B, n]``, and the target-logits row of each anchor's label ``[n]``.
    """
    ids, lengths, loss_mask = tb.tokens.input_ids, tb.tokens.lengths, tb.tokens.loss_mask
    B, T = ids.shape
    dev = ids.device
    n = max(T - 2, 0)  # anchors 0..T-3 have a token two ahead
    if n == 0:
        return []
    a = torch.arange(n, device=dev)
    anchor = a.expand(B, n)
    cache = ChainKV(drafter.config.num_hidden_layers)
    slots = torch.zeros(B, n, dtype=torch.long, device=dev)  # ChainKV ignores slots; the API wants them
    hidden = drafter.fc(tb.taps[:, :n].to(drafter.dtype))  # [B, n, H]
    key_depth, key_valid, out = [], [], []
    for j in range(ttt_steps):
        label_idx = (a + j + 2).clamp(max=T - 1)
        valid = (a + j + 2)[None] < lengths[:, None]  # [B, n] the label token exists
        if not valid.any():
            break
        has_loss = valid & loss_mask.gather(1, label_idx.expand(B, n))
        inp = ids.gather(1, (a + j + 1).clamp(max=T - 1).expand(B, n))  # the data token x[a+j+1]
        key_depth.append(torch.full((B, n), j, device=dev))
        key_valid.append(valid)
        mask = chain_mask(anchor, key_depth[-1], anchor.repeat(1, j + 1), torch.cat(key_depth, 1),
                          torch.cat(key_valid, 1))  # [B, 1, n, (j+1)·n]
        hidden = drafter(inp, hidden, anchor + j, cache=cache, slot_mapping=slots, attn_mask=mask,
                         return_logits=False).hidden
        out.append((hidden, valid, has_loss, label_idx - 1))
    return out


def eagle3_step(drafter, tb: TargetBatch, cfg: Eagle3TrainConfig, generator: torch.Generator | None = None,
                backward: bool = True, amp: Callable[[], ContextManager] | None = None) -> StepResult:
    """Loss (and, with ``backward``, gradients) of one batch under the TTT unroll.

    Args:
        drafter: an EAGLE-3 (or P-EAGLE) ``Drafter``; only its EAGLE-3 path is used.
        tb: the batch and the target's taps/logits (``targets.compute_targets``).
        cfg: the number of unrolled steps.
        generator: unused (EAGLE-3 samples nothing); kept so both methods share a signature.
        backward: call ``backward()`` on the loss (False: evaluation only).
        amp: a context-manager factory for the forward passes (autocast); backward runs outside.

    Returns:
        ``StepResult`` with per-step ("depth") loss and top-1 agreement; the loss is the mean
        over all loss-bearing (anchor, step) pairs.
    """
    dev = tb.taps.device
    stats = DepthStats(cfg.ttt_steps, dev)
    total = torch.zeros((), device=dev)
    computed = 0
    with (amp or nullcontext)():
        steps = ttt_unroll(drafter, tb, cfg.ttt_steps)
        normalizer = max(sum(int(s[2].sum()) for s in steps), 1)
        for j, (hidden, valid, has_loss, label_row) in enumerate(steps):
            rows = has_loss.nonzero(as_tuple=True)
            label = (rows[0], label_row[rows[1]])
            total = total + score_rows(drafter, hidden[rows], tb.logits[label], tb.argmax[label],
                                       torch.full_like(rows[0], j), normalizer, stats)
            computed += int(valid.sum())
    if backward and total.requires_grad:
        total.backward()
    return stats.result(float(total.detach()), computed)


# ------------------------------------------------------------------ packed rows
def packed_unroll(drafter, rows, taps: torch.Tensor, ttt_steps: int, attn_masks) -> list[torch.Tensor]:
    """The TTT unroll over packed rows: every token is an anchor, every step has a fixed shape.

    Step ``j`` of anchor ``a`` reads token ``x[a+j+1]`` (0 past the end of its sequence) at
    position ``pos[a] + j`` and predicts token ``a + j + 2``; its attention is
    ``mask.ttt_mod`` over the first ``(j+1)·T`` keys, so a query touches the context blocks
    and its own chain's diagonal blocks, never the other anchors' drafts.

    Args:
        drafter: the ``Drafter``.
        rows: the batch's ``pack.PackedRows``.
        taps: the target's taps.  # [B, T, 3H]
        attn_masks: ``mask.ttt_masks``: step ``j``'s mask over the first ``(j+1)·T`` keys.

    Returns:
        One pre-norm output ``[B, T, H]`` per step.
    """
    B, T = rows.input_ids.shape
    anchor = torch.arange(T, device=rows.input_ids.device).expand(B, T)
    cache = ChainKV(drafter.config.num_hidden_layers)
    slots = torch.zeros(B, T, dtype=torch.long, device=anchor.device)  # ChainKV ignores them
    hidden = drafter.fc(taps.to(drafter.dtype))
    out = []
    for j in range(ttt_steps):
        hidden = drafter(rows.token_ahead(anchor, j + 1), hidden, rows.positions + j, cache=cache,
                         slot_mapping=slots, attn_mask=attn_masks[j],
                         return_logits=False).hidden
        out.append(hidden)
    return out
