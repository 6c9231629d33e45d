"""Does a real vLLM compute what our engine computes with the same heads? The CI parity check.

For each method and K, on the same prompts, greedily in float32:

```
(a) lossless     vLLM's speculative outputs == vLLM's plain outputs, token for token
(b) path         P-EAGLE: parallel_drafting on and ONE drafter pass per step (EAGLE-3: K);
                 with trained heads, accepted tokens > 0
(c) acceptance   vLLM's AL within ±10 % of our engine's
(d) drafts       vLLM's draft blocks == ours, keyed by the context they were drafted from
```

(d) is the sharp one: it compares every draft token, so it holds random heads to the same
standard as trained ones (random heads accept nothing, which makes (c) vacuous). A block
is keyed by ``pos``, the number of output tokens that existed when it was drafted: the
first block is drafted after prefill (``pos = 1``); a block accepting ``n`` drafts moves
the next to ``pos + n + 1``. Both runs produce the same greedy outputs, so the keys of
the two runs line up even where a near-tie flips one draft.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from ..acceptance import acceptance_length

AL_TOLERANCE = 0.10  # relative, (c)
DRAFT_AGREEMENT_MIN = 0.99  # share of equal draft tokens, (d)


def draft_positions(blocks: list[list[int]], output: list[int]) -> dict[int, tuple[int, ...]]:
    """Key each greedy draft block by the output length it was drafted at (see module docstring).

    >>> draft_positions([[7, 9, 9], [8, 1, 1], [5, 5, 5]], [3, 7, 9, 4, 8, 2])
    {1: (7, 9, 9), 4: (8, 1, 1)}
    """
    keyed, pos = {}, 1
    for block in blocks:
        if pos >= len(output):
            break
        keyed[pos] = tuple(block)
        n = 0
        while n < len(block) and pos + n < len(output) and block[n] == output[pos + n]:
            n += 1
        pos += n + 1
    return keyed


@dataclass
class DraftAgreement:
    blocks: int = 0  # blocks drafted at the same pos by both runs
    equal_tokens: int = 0
    tokens: int = 0
    skipped_prompts: int = 0  # prompts whose greedy outputs differ, so their keys do not line up
    first_mismatch: tuple | None = None  # (prompt, pos, ours, vllm)

    @property
    def rate(self) -> float:
        return self.equal_tokens / self.tokens if self.tokens else 0.0


def draft_agreement(ours: list[list[list[int]]], theirs: list[list[list[int]]],
                    ours_outputs: list[list[int]], their_outputs: list[list[int]]) -> DraftAgreement:
    """Compare two runs' draft blocks prompt by prompt, at the positions both drafted from.

    >>> out = [3, 7, 9, 4, 8, 2]  # one prompt; the third draft of the first block differs
    >>> a = draft_agreement([[[7, 9, 9], [8, 1, 1]]], [[[7, 9, 1], [8, 1, 1]]], [out], [out])
    >>> (a.equal_tokens, a.tokens, a.blocks)
    (5, 6, 2)
    """
    agg = DraftAgreement()
    for i, (a, b, out_a, out_b) in enumerate(zip(ours, theirs, ours_outputs, their_outputs)):
        if out_a != out_b:
            agg.skipped_prompts += 1
            continue
        ka, kb = draft_positions(a, out_a), draft_positions(b, out_b)
        for pos in sorted(set(ka) & set(kb)):
            agg.blocks += 1
            same = sum(x == y for x, y in zip(ka[pos], kb[pos]))
            agg.equal_tokens += same
            agg.tokens += len(ka[pos])
            if same < len(ka[pos]) and agg.first_mismatch is None:
                agg.first_mismatch = (i, pos, ka[pos], kb[pos])
    return agg


def probe_drafter(target, method: str, num_hidden_layers: int = 1, seed: int = 0):
    """An untrained head whose drafts depend on every input path, for (d) with no trained head.

    A plain random head drafts from its tap path alone: ``fc`` outputs dwarf the attention
    branch, so its mask slots draft the same token whatever their embedding, and an export
    that lost the learned mask row would still pass. Shrinking ``fc`` ×0.1 and giving the
    mask token a random row of unit scale makes embeddings, attention and the mask row
    all move the argmax.
    """
    import torch

    from ..drafter import random_drafter

    d = random_drafter(target, method, num_hidden_layers=num_hidden_layers, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        d.fc.weight.mul_(0.1)
        if d.mask_embedding is not None:
            d.mask_embedding.copy_(torch.randn(d.mask_embedding.shape, generator=g).to(d.mask_embedding))
    return d


@contextmanager
def recording_drafts(engine):
    """Log every draft block ``engine`` (a ``SpecDecoder``) proposes: a list of [c, K] lists per call."""
    calls: list[list[list[int]]] = []
    previous = engine.on_draft
    engine.on_draft = lambda res: calls.append(res.tokens.tolist())
    try:
        yield calls
    finally:
        engine.on_draft = previous


def run_ours(target, drafter, method: str, k: int, prompts: list[list[int]], max_new_tokens: int,
             eos_token_ids: tuple[int, ...]) -> dict:
    """Our engine on ``prompts`` as one batch: outputs, metrics and per-request draft blocks."""
    from ..config import SpecConfig
    from ..engine import SpecDecoder

    # compact_rows=False: each recorded [c, K] block is read by row, so rows keep their request
    cfg = SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=max_new_tokens, temperature=0.0,
                     compact_rows=False)
    engine = SpecDecoder(target, drafter, cfg)
    with recording_drafts(engine) as calls:
        res = engine.generate(prompts, eos_token_ids=eos_token_ids)
    blocks = [[call[b] for call in calls] for b in range(len(prompts))]
    return {"outputs": res.tokens, "metrics": res.metrics.as_dict(), "drafts": blocks}


@dataclass
class Verdict:
    name: str  # e.g. "peagle K=3"
    checks: dict = field(default_factory=dict)  # "(a) lossless" -> (ok: bool | None, detail); None = not judged
    numbers: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(ok is not False for ok, _ in self.checks.values())


def judge(method: str, k: int, vllm_run: dict, vllm_plain: list[list[int]], ours: dict, trained: bool) -> Verdict:
    """Apply checks (a)–(d) to one method × K; see the module docstring."""
    v = Verdict(f"{method} K={k}")
    wave = vllm_run["waves"][0]
    outs = wave["outputs"]
    same = sum(a == b for a, b in zip(outs, vllm_plain))
    v.checks["(a) lossless"] = (same == len(vllm_plain), f"{same}/{len(vllm_plain)} outputs equal vLLM's plain ones")
    passes = wave.get("drafter_passes") or []
    want = 1 if method == "peagle" else k
    flag_ok = vllm_run["parallel_drafting"] == (method == "peagle")
    passes_ok = bool(passes) and all(p == want for p in passes)
    detail = (f"parallel_drafting={vllm_run['parallel_drafting']}, drafter passes per step "
              f"{sorted(set(passes)) if passes else 'not recorded'} (want {want})")
    c = wave["counters"]
    if trained:
        passes_ok = passes_ok and c["num_accepted_tokens"] > 0
        detail += f", accepted {c['num_accepted_tokens']}"
    v.checks["(b) path"] = (flag_ok and passes_ok, detail)
    al_v = acceptance_length(c["num_accepted_tokens"], c["num_drafts"])
    al_o = ours["metrics"]["acceptance_length"]
    within = abs(al_v - al_o) <= AL_TOLERANCE * al_o
    v.checks["(c) acceptance"] = (within if trained else None,
                                  f"AL vLLM {al_v:.3f} vs ours {al_o:.3f}"
                                  + ("" if trained else " (random heads accept ~nothing: needs trained heads)"))
    if "drafts" in wave:
        agree = draft_agreement(ours["drafts"], wave["drafts"], ours["outputs"], outs)
        v.checks["(d) drafts"] = (agree.rate >= DRAFT_AGREEMENT_MIN and agree.blocks > 0,
                                  f"{agree.equal_tokens}/{agree.tokens} draft tokens equal over {agree.blocks} "
                                  f"blocks" + (f", {agree.skipped_prompts} prompts skipped (outputs differ)"
                                               if agree.skipped_prompts else "")
                                  + (f"; first mismatch {agree.first_mismatch}" if agree.first_mismatch else ""))
        v.numbers["draft_agreement"] = agree.rate
    else:
        v.checks["(d) drafts"] = (None, "not recorded (needs the in-process vLLM engine)")
    ours_same = sum(a == b for a, b in zip(ours["outputs"], vllm_plain))
    v.numbers.update({"al_vllm": al_v, "al_ours": al_o, "ours_equal_vllm_plain": ours_same,
                      "num_drafts_vllm": c["num_drafts"], "num_drafts_ours": ours["metrics"]["num_drafts"]})
    return v
