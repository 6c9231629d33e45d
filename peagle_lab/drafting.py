"""Drafting K tokens: EAGLE-3's K passes and P-EAGLE's single pass, from one verified batch.

Both start from what the target just processed (the verify or prefill batch): its tokens,
positions and taps, how many tokens were accepted and the new (recovered/bonus) token.
``prepare_draft_inputs`` lays out the drafter batch in vLLM's padded layout (see
``peagle_lab.kernels.prepare_draft_inputs`` for the sketch and ``prepare_draft_inputs_ref``
for the PyTorch specification); ``fill_draft_hidden`` places the fc-projected taps and the
shared mask hidden state into it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .drafter import Drafter
from .kernels.fill_draft_hidden import fill_draft_hidden
from .kernels.prepare_draft_inputs import DraftInputs, prepare_draft_inputs, prepare_draft_inputs_ref
from .models.kv_cache import KVCache

__all__ = ["DraftResult", "draft_parallel", "draft_autoregressive", "prepare_draft_inputs_ref",
           "sample_from_logits", "build_draft_batch"]


@dataclass(frozen=True)
class DraftResult:
    tokens: torch.Tensor  # [c, K] int64 target-vocabulary ids
    draft_probs: torch.Tensor | None  # [c, K, V] float32 over the target vocab (temperature > 0)
    num_forwards: int  # drafter passes this step took: 1 for P-EAGLE, K for EAGLE-3
    inputs: DraftInputs  # the first pass's batch (for tracing and the notebooks)


def sample_from_logits(drafter: Drafter, logits: torch.Tensor, temperature: float,
                       generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Draft tokens (target ids) from drafter ``logits`` [c, m, Vd]; probs over the target vocab.

    Greedy at temperature 0 (no probs); otherwise samples from softmax(logits / T) and
    returns that distribution scattered onto the target vocabulary [c, m, V].
    """
    if temperature == 0:
        return drafter.to_target_ids(logits.argmax(-1)), None
    probs = torch.softmax(logits.float() / temperature, -1)
    c, m, vd = probs.shape
    draft_ids = torch.multinomial(probs.view(-1, vd), 1, generator=generator).view(c, m)
    full = probs.new_zeros(c, m, drafter.config.vocab_size)
    targets = drafter.to_target_ids(torch.arange(vd, device=probs.device))
    full.index_copy_(2, targets, probs)
    return drafter.to_target_ids(draft_ids), full


def build_draft_batch(drafter: Drafter, taps: torch.Tensor, token_ids: torch.Tensor, positions: torch.Tensor,
                      num_accepted: torch.Tensor, bonus_tokens: torch.Tensor, k: int, max_len: int,
                      backend: str = "auto") -> tuple[DraftInputs, torch.Tensor]:
    """Lay out one drafter batch: returns the slot metadata and slot hidden states [c*R, H].

    Args:
        taps: target taps of the processed batch.  # [c, T, 3H]
        token_ids / positions: that batch's tokens and positions.  # [c, T]
        num_accepted: tokens kept after the first of each row.  # [c]
        bonus_tokens: the new token of each request.  # [c]
        k: draft slots to sample (P-EAGLE: K; EAGLE-3's first pass: 1).
    """
    c, T, _ = taps.shape
    mask_id = drafter.config.mask_token_id if drafter.config.mask_token_id is not None else 0
    inputs = prepare_draft_inputs(token_ids, positions, num_accepted, bonus_tokens,
                                  num_speculative_tokens=k, mask_token_id=mask_id, max_len=max_len,
                                  backend=backend)
    projected = drafter.fc(taps.to(drafter.dtype)).reshape(c * T, -1)  # [c*T, H]
    shared = drafter.shared_hidden() if drafter.mask_hidden is not None else projected.new_zeros(projected.shape[-1])
    hidden = fill_draft_hidden(projected, inputs.hidden_mapping, inputs.is_masked, shared, backend=backend)
    return inputs, hidden


def run_drafter(drafter: Drafter, cache: KVCache, ids, hidden, positions, slots, rows=None, layer_fn=None,
                fresh: bool = False):
    """One drafter pass with the KV cache: logits at ``rows`` [c, m] (all rows when None).

    The engine swaps this for a CUDA-graphed twin with the same signature; ``layer_fn`` runs
    each drafter layer (the engine passes a compiled one); ``fresh``: see ``Drafter.forward``.
    """
    return drafter(ids, hidden, positions, cache=cache, slot_mapping=slots, logits_rows=rows, layer_fn=layer_fn,
                   fresh=fresh)


def _first_pass(forward, cache, inputs: DraftInputs, hidden, c: int, k: int, fresh: bool = False):
    R = inputs.rows_per_request
    rows = inputs.sample_indices.view(c, k) - torch.arange(c, device=hidden.device)[:, None] * R
    return forward(cache, inputs.input_ids.view(c, R), hidden.view(c, R, -1), inputs.positions.view(c, R),
                   inputs.slot_mapping.view(c, R), rows, fresh=fresh), rows


def draft_parallel(drafter: Drafter, cache: KVCache, taps, token_ids, positions, num_accepted, bonus_tokens, *,
                   k: int, max_len: int, temperature: float = 0.0, generator: torch.Generator | None = None,
                   backend: str = "auto", batch: tuple[DraftInputs, torch.Tensor] | None = None,
                   forward=None, fresh: bool = False) -> DraftResult:
    """P-EAGLE: all K drafts in ONE drafter pass (bonus slot + K−1 mask slots).

    ``batch`` is a ready ``build_draft_batch(..., k)`` result (the engine times it apart);
    ``forward`` replaces ``run_drafter`` (the engine passes a CUDA-graphed one); ``fresh``: the
    batch follows a prefill into empty cache blocks (see ``Drafter.forward``).
    """
    forward = forward or (lambda *a, **kw: run_drafter(drafter, *a, **kw))
    c = taps.shape[0]
    inputs, hidden = batch or build_draft_batch(drafter, taps, token_ids, positions, num_accepted,
                                                bonus_tokens, k, max_len, backend)
    out, _ = _first_pass(forward, cache, inputs, hidden, c, k, fresh)
    tokens, probs = sample_from_logits(drafter, out.logits, temperature, generator)
    return DraftResult(tokens, probs, 1, inputs)


def draft_autoregressive(drafter: Drafter, cache: KVCache, taps, token_ids, positions, num_accepted,
                         bonus_tokens, *, k: int, max_len: int, temperature: float = 0.0,
                         generator: torch.Generator | None = None, backend: str = "auto",
                         batch: tuple[DraftInputs, torch.Tensor] | None = None,
                         forward=None, fresh: bool = False) -> DraftResult:
    """EAGLE-3: K drafter passes, each feeding back its own pre-norm hidden state and token.

    ``batch`` is a ready ``build_draft_batch(..., 1)`` result (the engine times it apart);
    ``forward`` replaces ``run_drafter`` (the engine passes a CUDA-graphed one); ``fresh``: the
    first pass follows a prefill into empty cache blocks (see ``Drafter.forward``; the later
    passes read the cache).
    """
    forward = forward or (lambda *a, **kw: run_drafter(drafter, *a, **kw))
    c = taps.shape[0]
    inputs, hidden = batch or build_draft_batch(drafter, taps, token_ids, positions, num_accepted,
                                                bonus_tokens, 1, max_len, backend)
    out, rows = _first_pass(forward, cache, inputs, hidden, c, 1, fresh)
    tok, probs = sample_from_logits(drafter, out.logits, temperature, generator)
    tokens, all_probs = [tok], [probs]
    h = torch.gather(out.hidden, 1, rows[..., None].expand(-1, -1, out.hidden.shape[-1]))  # [c, 1, H]
    pos = torch.gather(inputs.positions.view(c, -1), 1, rows)  # [c, 1], the bonus slot's position
    base = torch.arange(c, device=pos.device)[:, None] * max_len
    for _ in range(1, k):
        pos = pos + 1
        slots = torch.where(pos < max_len, base + pos, torch.full_like(pos, -1))
        out = forward(cache, tok, h, pos, slots, None)
        tok, probs = sample_from_logits(drafter, out.logits, temperature, generator)
        tokens.append(tok)
        all_probs.append(probs)
        h = out.hidden
    draft_probs = None if temperature == 0 else torch.cat(all_probs, 1)
    return DraftResult(torch.cat(tokens, 1), draft_probs, k, inputs)
