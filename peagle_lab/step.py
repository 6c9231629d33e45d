"""One speculative decoding step as plain functions: prefill, draft, verify, accept.

``SpecDecoder.generate`` is a loop over these; it adds only what a serving loop needs around
them (KV caches reused across calls, CUDA graphs, timing, counters). The notebooks'
walkthrough calls the same functions, so the step it takes apart is the engine's. Data flows
one way: these functions receive tensors, caches and (for the drafter) a forward to run, and
return results; nothing here calls back into the engine.

```
pad_prompts(prompts)                         ─► ids, positions [c, T], lengths [c]
prefill(target, ids, positions, lengths, …)  ─► logits at each prompt's last token, taps, KV written
sample(logits, temperature)                  ─► the first new token of each request (the bonus)
prepare_draft(drafter, taps, …)              ─► the drafter's batch: slot metadata + hidden states
draft(drafter, cache, taps, …, batch=…)      ─► K draft tokens (EAGLE-3: K passes; P-EAGLE: one)
verify_inputs(bonus, drafts, start, …)       ─► [c, K+1] ids, positions, KV slots for the target
verify(logits, drafts, temperature, …)       ─► accepted counts, next bonus tokens (lossless)
accept(outputs, done, …)                     ─► each request's new tokens appended, EOS checked
```
Request b owns KV slots ``[b*max_len, (b+1)*max_len)``; slot −1 writes nothing.
"""
from __future__ import annotations

import torch

from .drafter import Drafter
from .drafting import DraftResult, build_draft_batch, draft_autoregressive, draft_parallel
from .kernels.prepare_draft_inputs import DraftInputs
from .kernels.verify import verify_greedy, verify_rejection
from .models.kv_cache import KVCache
from .models.llama import LlamaModel, TargetOutput
from .verify import VerifyResult, sample_verify_noise, target_probs_from_logits

__all__ = ["pad_prompts", "kv_slots", "prefill", "sample", "prepare_draft", "draft", "verify_inputs",
           "target_step", "verify", "accept", "finished", "trim"]


def pad_prompts(prompts: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad token-id prompts with 0: ``ids`` and ``positions`` [c, T], ``lengths`` [c].

    >>> ids, pos, lens = pad_prompts([[5, 6, 7], [8]], torch.device("cpu"))
    >>> ids.tolist(), lens.tolist()
    ([[5, 6, 7], [8, 0, 0]], [3, 1])
    """
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    c, T = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(c, T, dtype=torch.long, device=device)
    for b, p in enumerate(prompts):
        ids[b, : len(p)] = torch.tensor(p, dtype=torch.long)
    return ids, torch.arange(T, device=device).expand(c, T).contiguous(), lengths


def kv_slots(positions: torch.Tensor, valid: torch.Tensor, max_len: int) -> torch.Tensor:
    """KV-cache slot of each position: ``b*max_len + position`` where ``valid``, else −1.

    >>> kv_slots(torch.tensor([[0, 1], [0, 1]]), torch.tensor([[True, True], [True, False]]), 4).tolist()
    [[0, 1], [4, -1]]
    """
    rows = torch.arange(positions.shape[0], device=positions.device)[:, None]
    return torch.where(valid & (positions < max_len), rows * max_len + positions, torch.full_like(positions, -1))


# Prefill runs in chunks of about this many tokens over all requests (c·width): the KV cache
# holds the earlier chunks, so every chunk attends to the whole prompt so far, and activation
# memory stays bounded at any c and prompt length.
PREFILL_CHUNK_TOKENS = 32768


def prefill(target: LlamaModel, ids: torch.Tensor, positions: torch.Tensor, lengths: torch.Tensor,
            cache: KVCache, max_len: int, *, taps: bool = True,
            chunk_tokens: int = PREFILL_CHUNK_TOKENS, layer_fn=None) -> TargetOutput:
    """The target over the padded prompts, writing their KV; logits at each prompt's last token.

    The prompts start at position 0 (``positions`` as :func:`pad_prompts` makes them) in cache
    blocks that hold nothing before them, so the first chunk attends causally over its own keys
    (one fused kernel, ``LlamaModel.forward(fresh=True)``) rather than over each whole cache block
    through a mask. Prompts wider than ``chunk_tokens // c`` run in chunks of that width, one after
    another through the KV cache (as a serving engine's chunked prefill does); the later chunks
    read the earlier ones' keys from the cache. ``layer_fn`` runs each decoder layer (as in
    :func:`target_step`; the engine passes its compiled one).

    Returns:
        ``TargetOutput`` with ``logits`` [c, 1, V] and, when ``taps``, the taps [c, T, 3H].
    """
    slots = kv_slots(positions, positions < lengths[:, None], max_len)
    c, T = ids.shape
    width = max(1, chunk_tokens // c)
    if T <= width:
        return target(ids, positions, cache=cache, slot_mapping=slots, return_taps=taps,
                      logits_rows=(lengths - 1)[:, None], fresh=True, layer_fn=layer_fn)
    hidden, tap_parts = [], []
    for a in range(0, T, width):
        part = slice(a, a + width)
        out = target(ids[:, part], positions[:, part], cache=cache, slot_mapping=slots[:, part],
                     return_logits=False, return_taps=taps, fresh=a == 0, layer_fn=layer_fn)
        hidden.append(out.hidden)
        tap_parts.append(out.taps)
    x = torch.cat(hidden, 1)
    last = torch.gather(x, 1, (lengths - 1)[:, None, None].expand(-1, -1, x.shape[-1]))
    return TargetOutput(target.lm_head(last).float(), torch.cat(tap_parts, 1) if taps else None, x)


def target_step(target: LlamaModel, cache: KVCache, ids: torch.Tensor, positions: torch.Tensor,
                slots: torch.Tensor, *, taps: bool = True, layer_fn=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The target over a decode batch ``[c, T]`` (its KV written): float32 logits and, if ``taps``, the taps.

    ``layer_fn`` runs each decoder layer; the engine passes a compiled one (``SpecConfig.compile``).
    """
    out = target(ids, positions, cache=cache, slot_mapping=slots, return_taps=taps, layer_fn=layer_fn)
    return out.logits, out.taps


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """The next token from ``logits`` [c, V]: argmax at temperature 0, else a sample."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = target_probs_from_logits(logits, temperature)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def prepare_draft(drafter: Drafter, taps: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor,
                  num_accepted: torch.Tensor, bonus: torch.Tensor, k: int, max_len: int,
                  backend: str = "auto") -> tuple[DraftInputs, torch.Tensor]:
    """The drafter's first batch: P-EAGLE lays out all K slots, EAGLE-3 one (its first pass)."""
    k_first = k if drafter.config.method == "peagle" else 1
    return build_draft_batch(drafter, taps, ids, positions, num_accepted, bonus, k_first, max_len, backend)


def draft(drafter: Drafter, cache: KVCache, taps: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor,
          num_accepted: torch.Tensor, bonus: torch.Tensor, *, k: int, max_len: int, temperature: float = 0.0,
          generator: torch.Generator | None = None, backend: str = "auto",
          batch: tuple[DraftInputs, torch.Tensor] | None = None, forward=None, fresh: bool = False) -> DraftResult:
    """K draft tokens after the processed batch: P-EAGLE in one pass, EAGLE-3 in K.

    ``batch`` is :func:`prepare_draft`'s result when the caller built (and timed) it apart;
    ``forward(cache, ids, hidden, positions, slots, rows, fresh=False)`` runs one drafter pass in
    place of the drafter's plain forward (the engine passes a
    :class:`~peagle_lab.engine.graphs.DrafterPass` it built once: compiled layers, CUDA graphs);
    ``fresh``: a first draft after :func:`prefill`, into cache blocks that hold nothing older
    (its first pass then attends causally over its own keys; ``Drafter.forward``).
    """
    fn = draft_parallel if drafter.config.method == "peagle" else draft_autoregressive
    return fn(drafter, cache, taps, ids, positions, num_accepted, bonus, k=k, max_len=max_len,
              temperature=temperature, generator=generator, backend=backend, batch=batch, forward=forward,
              fresh=fresh)


def verify_inputs(bonus: torch.Tensor, drafts: torch.Tensor | None, start: torch.Tensor, max_len: int,
                  active: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The target's verify batch: the bonus token then the K drafts of each request.

    Args:
        bonus: ``[c]`` each request's newest token (not yet in the KV cache).
        drafts: ``[c, K]`` draft tokens, or None for plain decoding (K = 0).
        start: ``[c]`` the bonus token's position.
        active: ``[c]`` requests still decoding (finished ones write no KV); all when None.

    Returns:
        ``ids``, ``positions`` and KV ``slots``, each ``[c, K+1]``.

    >>> ids, pos, slots = verify_inputs(torch.tensor([9, 8]), torch.tensor([[1, 2], [3, 4]]),
    ...                                 torch.tensor([5, 2]), max_len=7, active=torch.tensor([True, False]))
    >>> ids.tolist(), pos.tolist(), slots.tolist()
    ([[9, 1, 2], [8, 3, 4]], [[5, 6, 7], [2, 3, 4]], [[5, 6, -1], [-1, -1, -1]])
    """
    ids = bonus[:, None] if drafts is None else torch.cat([bonus[:, None], drafts], 1)
    positions = start[:, None] + torch.arange(ids.shape[1], device=ids.device)
    valid = torch.ones_like(positions, dtype=torch.bool) if active is None else active[:, None].expand_as(positions)
    return ids, positions, kv_slots(positions, valid, max_len)


def verify(logits: torch.Tensor, drafts: DraftResult, temperature: float, generator: torch.Generator | None = None,
           backend: str = "auto") -> VerifyResult:
    """Greedy verification at temperature 0, else rejection sampling: the target's distribution exactly."""
    if temperature == 0:
        return verify_greedy(logits, drafts.tokens, backend=backend)
    c, k1, V = logits.shape
    target_probs = target_probs_from_logits(logits, temperature)
    uniform, noise = sample_verify_noise(c, k1 - 1, V, generator, logits.device)
    return verify_rejection(target_probs, drafts.draft_probs, drafts.tokens, uniform, noise, backend=backend)


def accept(outputs: list[list[int]], done: list[bool], new_tokens: list[list[int]], num_accepted: list[int],
           eos: set[int], max_new: int) -> list[int]:
    """Append each unfinished request's accepted drafts and next token; mark EOS / length stops.

    Returns:
        The accepted-draft counts of the requests that were still decoding, in order.

    >>> outs, done = [[1], [2]], [False, True]
    >>> accept(outs, done, [[5, 6, 7], [0, 0, 0]], [1, 0], eos={7}, max_new=8), outs, done
    ([1], [[1, 5, 6], [2]], [False, True])
    """
    accepted = []
    for b, (n, new) in enumerate(zip(num_accepted, new_tokens)):
        if done[b]:
            continue
        kept = new[: n + 1]
        outputs[b].extend(kept)
        accepted.append(n)
        # Only the new tokens can hold a first EOS (an earlier one would have finished the request):
        # rescanning every output each step made this loop quadratic in the response length.
        done[b] = len(outputs[b]) >= max_new or any(t in eos for t in kept)
    return accepted


def finished(tokens: list[int], eos: set[int], max_new: int) -> bool:
    """Whether a request is done: ``max_new`` tokens, or an EOS among them."""
    return len(tokens) >= max_new or any(t in eos for t in tokens)


def trim(tokens: list[int], eos: set[int], max_new: int) -> list[int]:
    """Cut at the first EOS (kept) and at ``max_new`` tokens.

    >>> trim([4, 5, 2, 6], eos={2}, max_new=8), trim([4, 5, 6], eos=set(), max_new=2)
    ([4, 5, 2], [4, 5])
    """
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: min(i + 1, max_new)]
    return tokens[:max_new]
