"""Acceptance on a given text: our engine, with the target's greedy choices forced to fixed outputs.

Two engines' acceptance lengths can only be compared token for token when they decode the
same text. In bf16 two implementations of one model part ways at near-ties (the top two
logits a few hundredths apart), and from there on each measures its drafter on a different
continuation, so a cell of 8 prompts can differ by several per cent for that reason alone.

``acceptance_on_text`` removes that: it runs the real engine (target, drafter, verification,
KV caches) on each prompt, but replaces the target's logits at every position by a one-hot row
that picks the next token of the given output. Greedy verification then accepts a draft
exactly when it matches that text, and the drafter sees the target's own hidden states
along it, so the counters are the drafter's acceptance on that text, in this engine's
precision. The output equals the forced text token for token (checked).

```
prompt + given output   ─► table[row, p] = the text's token at position p + 1 (the one after p)
target(ids, positions)  ─► real taps (for the drafter) + logits one-hot on table[row, position]
SpecDecoder.generate    ─► counters: AL of our drafter on the given text
```

The last step may draft past the text's end; those drafts are judged by the target's real
logits, and counted before the output is cut to length, as vLLM counts its own last step.
"""
from __future__ import annotations

import contextlib
from dataclasses import replace

import torch

from ..acceptance import acceptance_length
from ..config import SpecConfig
from ..engine import SpecDecoder
from ..models.llama import LlamaModel, TargetOutput
from ..step import PREFILL_CHUNK_TOKENS


@contextlib.contextmanager
def forced_target(target: LlamaModel, sequences: list[list[int]]):
    """Within the block, ``target``'s logits pick the next token of ``sequences[row]`` at each position.

    ``sequences[b]`` is request ``b``'s prompt followed by its output (the rows of an engine
    batch are its requests, in order). Positions past a sequence's end keep the real logits.
    The taps and hidden states are the target's own. The engine must run with
    ``cuda_graphs=False``: a replayed graph would bypass the patched forward (compiled layers
    run inside it and are fine).

    >>> import torch
    >>> from peagle_lab.testing import tiny_target
    >>> t = tiny_target()
    >>> with forced_target(t, [[1, 2, 3, 4]]):
    ...     t(torch.tensor([[1, 2]]), torch.tensor([[0, 1]]), return_taps=False).logits.argmax(-1).tolist()
    [[2, 3]]
    """
    if "forward" in vars(target):
        raise RuntimeError("forced_target: the target's forward is already patched (nested forced_target?)")
    longest = max(len(s) for s in sequences)
    table = torch.full((len(sequences), longest + 1), -1, dtype=torch.long, device=target.device)
    for b, s in enumerate(sequences):
        bad = [t for t in s if not 0 <= t < target.config.vocab_size]
        if bad:
            raise ValueError(f"sequence {b} has ids outside the vocabulary [0, {target.config.vocab_size}): {bad[:5]}")
        table[b, :len(s) - 1] = torch.tensor(s[1:], dtype=torch.long)
    original = target.forward

    def forward(input_ids, positions, *args, logits_rows=None, **kwargs) -> TargetOutput:
        out = original(input_ids, positions, *args, logits_rows=logits_rows, **kwargs)
        if out.logits is None:
            return out
        if input_ids.shape[0] > table.shape[0]:
            raise ValueError(f"forced_target: a batch of {input_ids.shape[0]} rows, but {table.shape[0]} sequences")
        pos = positions if logits_rows is None else torch.gather(positions, 1, logits_rows)
        nxt = torch.gather(table[:pos.shape[0]], 1, pos.clamp(0, table.shape[1] - 1))
        forced = torch.full_like(out.logits, -1e4).scatter_(-1, nxt.clamp_min(0)[..., None], 0.0)
        logits = torch.where((nxt >= 0)[..., None], forced, out.logits)
        return TargetOutput(logits, out.taps, out.hidden)

    target.forward = forward
    try:
        yield target
    finally:
        del target.forward


def acceptance_on_text(target: LlamaModel, drafter, spec: SpecConfig, prompts: list[list[int]],
                       outputs: list[list[int]], *, batch: int = 1) -> dict:
    """Our drafter's acceptance along given outputs (one per prompt), counted as vLLM counts it.

    Runs ``SpecDecoder.generate`` over the prompts in batches of ``batch`` with the target
    forced to each output (:func:`forced_target`), EOS ignored, for ``len(output)`` new tokens,
    CUDA graphs off, every row kept to the end (``compact_rows=False``: the forced text is looked
    up by batch row), the rest of ``spec`` as given.

    Returns:
        ``acceptance_length`` (1 + accepted / drafts over all requests), ``num_drafts``,
        ``num_accepted_tokens``, ``per_request_al`` (for ``batch == 1``) and ``requests``.

    Raises:
        ValueError: mismatched lists, prompts too wide for one prefill pass of ``batch``
            requests (the chunked prefill computes its logits outside the forced forward), or
            an output that the forced engine did not reproduce (so the counters would not
            describe that text).
    """
    if len(prompts) != len(outputs):
        raise ValueError(f"{len(prompts)} prompts but {len(outputs)} outputs: one output per prompt expected")
    if spec.method == "baseline":
        raise ValueError("acceptance_on_text needs a speculative method (eagle3 or peagle), got 'baseline'")
    spec = replace(spec, temperature=0.0, cuda_graphs=False, compact_rows=False)  # the forced table is by row
    width = max((len(p) for p in prompts), default=0)
    if width > PREFILL_CHUNK_TOKENS // batch:
        raise ValueError(f"batch={batch}: prompts up to {width} tokens exceed one prefill pass "
                         f"({PREFILL_CHUNK_TOKENS} // {batch} = {PREFILL_CHUNK_TOKENS // batch} tokens a prompt); "
                         "use a smaller batch")
    drafts = accepted = 0
    per_request = []
    engine = SpecDecoder(target, drafter, spec)  # one engine: its KV caches serve every batch
    for a in range(0, len(prompts), batch):
        ps, outs = prompts[a:a + batch], outputs[a:a + batch]
        lengths = {len(o) for o in outs}
        if min(lengths) == 0 or len(lengths) > 1:
            raise ValueError(f"requests {a}..{a + len(ps) - 1}: output lengths {sorted(lengths)}; a batch needs "
                             "one length > 0 (past a shorter output's end nothing would be forced)")
        with forced_target(target, [p + o for p, o in zip(ps, outs)]):
            res = engine.generate(ps, max_new_tokens=lengths.pop(), eos_token_ids=())
        for i, (got, want) in enumerate(zip(res.tokens, outs)):
            if got != want:
                raise ValueError(f"request {a + i}: the forced engine's output left the given text")
        m = res.metrics
        drafts, accepted = drafts + m.num_drafts, accepted + m.num_accepted_tokens
        if batch == 1:
            per_request.append(m.acceptance_length)
    return {"acceptance_length": acceptance_length(accepted, drafts), "num_drafts": drafts,
            "num_accepted_tokens": accepted, "per_request_al": per_request, "requests": len(prompts)}
