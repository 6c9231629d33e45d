"""The outside reference: transformers' static-cache ``generate`` of the same weights.

``cache_implementation="static"`` preallocates the KV cache, which on CUDA lets
``generate`` compile its decode step (``torch.compile``, CUDA graphs); on the CPU it runs
eagerly. To keep every call on one compiled shape, all prompts are left-padded (with an
attention mask) to the longest one, so the static cache and the compiled step are reused.
The first call per concurrency is an untimed warm-up that pays for compilation.

A streamer time-stamps every emitted token; ``generate`` hands tokens to it on the host,
after the step's device work, so the stamps bracket real steps. TPOT is the median gap
between consecutive tokens' stamps, aggregated like our cells (prefill included in TPS).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from .schema import BenchRow
from .workloads import Prompt


class _TokenClock:
    """A ``generate`` streamer that only records when each step's tokens arrive."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def put(self, value) -> None:  # first call: the prompt; then one call per new token
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


def _padded(batch: list[Prompt], length: int, pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(batch):
        ids[i, length - p.num_tokens:] = torch.tensor(p.token_ids)
        mask[i, length - p.num_tokens:] = 1
    return ids.to(device), mask.to(device)


def load_reference_model(folder: Path | str, device, dtype):
    """transformers' ``AutoModelForCausalLM`` from our HF folder, offline."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, local_files_only=True)
    return model.to(device).eval()


def _row(workload: str, c: int, num_prompts: int, timed: list, cfg) -> BenchRow:
    """A ``source="transformers"`` row from timed calls: (new tokens, start time, token stamps) each."""
    n_out = sum(len(t) for out, _, _ in timed for t in out)
    wall = sum(stamps[-1] - start for _, start, stamps in timed)
    gaps = [b - a for _, _, s in timed for a, b in zip(s[1:], s[2:])]  # s[0] is the prompt
    decode = sum(s[-1] - s[1] for _, _, s in timed)
    per_request = sum(len(out[0]) - 1 for out, _, _ in timed)
    return BenchRow(
        method="baseline", k=0, concurrency=c, workload=workload, temperature=float(cfg.temperature),
        tps=n_out / wall if wall > 0 else 0.0, tpot_ms=1000.0 * decode / per_request if per_request > 0 else 0.0,
        acceptance_length=1.0, per_position_acceptance=[], num_drafts=0, num_accepted_tokens=0,
        verify_ms=1000.0 * statistics.median(gaps) if gaps else None, prep_ms=None, draft_ms=None,
        output_tokens=n_out, source="transformers", num_prompts=num_prompts, max_new_tokens=cfg.max_new_tokens,
        num_steps=len(gaps), step_ms=1000.0 * decode / len(gaps) if gaps else None,
        prefill_ms=1000.0 * statistics.mean(s[1] - start for _, start, s in timed))


def measure_reference(folder: Path | str, prompts: dict[str, list[Prompt]], cfg, *, device,
                      dtype) -> tuple[list[BenchRow], dict[tuple, list[list[int]]]]:
    """Time static-cache ``generate`` at each of ``cfg.reference_concurrency`` on ``prompts``.

    Args:
        folder: HF folder with the target's weights (``zoo.convert_default()`` for SmolLM2).
        prompts: per workload, the prompts our cells use (the first ``cfg.num_prompts(c)``).
        cfg: the ``SweepConfig`` (max new tokens, temperature, EOS handling, seed).

    Returns:
        (rows with ``source="transformers"``, new tokens per (workload, concurrency)).
    """
    model = load_reference_model(folder, device, dtype)
    try:
        return _time_generate(model, prompts, cfg, device)
    finally:
        del model
        if torch.device(device).type == "cuda":
            torch._dynamo.reset()  # drop compiled code and its CUDA-graph pools before our cells
            torch.cuda.empty_cache()


def _time_generate(model, prompts: dict[str, list[Prompt]], cfg, device):
    pad_id = model.config.pad_token_id
    if pad_id is None:
        eos = model.config.eos_token_id
        pad_id = (eos[0] if isinstance(eos, list) else eos) or 0
    used = {(w, c): ps[: cfg.num_prompts(c)] for w, ps in prompts.items() for c in cfg.reference_concurrency}
    length = max(p.num_tokens for ps in used.values() for p in ps)
    kwargs = dict(max_new_tokens=cfg.max_new_tokens, cache_implementation="static", pad_token_id=pad_id)
    if cfg.ignore_eos:
        kwargs["eos_token_id"] = None
    if cfg.temperature > 0:
        kwargs.update(do_sample=True, temperature=float(cfg.temperature), top_k=0, top_p=1.0)
    else:
        kwargs.update(do_sample=False)

    def run(batch: list[Prompt]):
        ids, mask = _padded(batch, length, pad_id, device)
        clock = _TokenClock()
        start = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, streamer=clock, **kwargs)
        return out[:, length:].tolist(), start, clock.stamps

    rows, tokens, warmed = [], {}, set()
    for (w, c), ps in used.items():
        batches = [ps[i: i + c] for i in range(0, len(ps), c)]
        if c not in warmed:  # compilation and CUDA-graph recording, untimed
            run(batches[0])
            warmed.add(c)
        torch.manual_seed(cfg.seed)
        timed = [run(b) for b in batches]
        rows.append(_row(w, c, len(ps), timed, cfg))
        tokens[(w, c)] = [t for out, _, _ in timed for t in out]
    return rows, tokens
