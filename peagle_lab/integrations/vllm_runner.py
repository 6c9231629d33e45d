"""Run vLLM on a JSON spec and write what it did as JSON (runs inside vLLM's own environment).

This file imports only the standard library and vLLM, so any interpreter with vLLM
installed can run it by path, without peagle_lab installed:

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python vllm_runner.py spec.json result.json

spec.json::

    {"target": DIR, "dtype": "float32", "max_model_len": 1024, "seed": 0,
     "prompts": [[token ids], ...], "max_tokens": 64, "temperature": 0.0,
     "stop_token_ids": [2],
     # optional (GPU runs): CUDA graphs, fixed-length output, our sweep's prompt rule
     "enforce_eager": true, "enable_prefix_caching": null, "gpu_memory_utilization": null,
     "ignore_eos": false, "detokenize": true,
     "min_prompts": null,        # a wave set at c uses the first c·⌈min_prompts/c⌉ prompts
     "warmup": "one",            # "one": a 4-token request; "waves": every wave, 8 tokens
     "runs": [{"name": "peagle-k3", "method": "peagle", "k": 3,
               "speculative_config": {...} | null,       # null: plain decoding
               "concurrency": [1, 8],                     # waves of c requests
               "record_drafts": true}]}                   # log draft blocks, see below

result.json: per run, per concurrency, the wall time, output tokens and vLLM's own
spec-decode counters (deltas of ``llm.get_metrics()``), plus the engine's resolved
``parallel_drafting`` flag. With ``record_drafts`` the proposer is wrapped (in-process
engine only) to log every draft block it proposes, per request, and how many drafter
forward passes each step took: one for parallel drafting, K for autoregressive EAGLE-3.

The prompts of one wave are submitted together, so ``c`` requests decode concurrently
until the wave finishes, like ``SpecDecoder.generate`` on a batch of ``c``. Each wave set
also records vLLM's engine steps (the count of ``vllm:iteration_tokens_total``), so a step's
wall time can be set beside ours.
"""
from __future__ import annotations

import copy
import gc
import json
import os
import platform
import sys
import time

# Run by path, Python puts this folder first on sys.path, where our vllm.py would shadow vLLM.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

COUNTERS = {
    "num_drafts": "vllm:spec_decode_num_drafts",
    "num_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
ITERATIONS = "vllm:iteration_tokens_total"  # a histogram observed once per engine step


class DraftRecorder:
    """Wraps vLLM's proposer and model runner so every draft block is logged (in-process engine only).

    Rows of a ``propose`` result follow the runner's input batch, so the runner's request
    ids are captured just before each call; the engine's ids are ``<LLM id>-<8 hex>``.
    """

    def __init__(self) -> None:
        self.active = False
        self.calls: list[tuple[list[str], list[list[int]]]] = []  # (request ids, [rows, K] target ids)
        self.passes: list[int] = []  # drafter forward passes per propose call
        self._req_ids: list[str] = []
        self._forwards = 0
        self._hooked: set[int] = set()

    def install(self) -> bool:
        try:
            from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
            from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        except ImportError:  # another vLLM layout: recording is skipped, counters still work
            return False
        if not hasattr(GPUModelRunner, "propose_draft_token_ids"):
            return False
        recorder = self
        propose, runner_propose = SpecDecodeBaseProposer.propose, GPUModelRunner.propose_draft_token_ids

        def recorded_runner_propose(runner, *args, **kwargs):
            recorder._req_ids = list(runner.input_batch.req_ids)
            return runner_propose(runner, *args, **kwargs)

        def recorded_propose(proposer, *args, **kwargs):
            recorder._hook(proposer.model)
            before = recorder._forwards
            drafts = propose(proposer, *args, **kwargs)
            if recorder.active:
                rows = drafts.tolist()
                recorder.calls.append((recorder._req_ids[:len(rows)], rows))
                recorder.passes.append(recorder._forwards - before)
            return drafts

        GPUModelRunner.propose_draft_token_ids = recorded_runner_propose
        SpecDecodeBaseProposer.propose = recorded_propose
        return True

    def _hook(self, model) -> None:
        if id(model) not in self._hooked and hasattr(model, "register_forward_pre_hook"):
            model.register_forward_pre_hook(self._count)
            self._hooked.add(id(model))

    def _count(self, module, args) -> None:
        self._forwards += 1

    def take(self, request_ids: list[str]) -> tuple[list[list[list[int]]], list[int]]:
        """Draft blocks per request (in ``request_ids`` order) and passes per call; then reset."""
        index = {r: i for i, r in enumerate(request_ids)}
        blocks: list[list[list[int]]] = [[] for _ in request_ids]
        for ids, rows in self.calls:
            for rid, row in zip(ids, rows):
                i = index.get(rid, index.get(rid.rsplit("-", 1)[0]))
                if i is not None:
                    blocks[i].append(row)
        passes = self.passes
        self.calls, self.passes = [], []
        return blocks, passes


def read_counters(llm) -> dict:
    """vLLM's cumulative spec-decode counters (zeros when the engine has none)."""
    values = {k: 0 for k in COUNTERS}
    per_pos: dict[int, int] = {}
    for m in llm.get_metrics():
        for key, name in COUNTERS.items():
            if m.name == name:
                values[key] += int(m.value)
        if m.name == PER_POSITION:
            if hasattr(m, "values"):
                for i, v in enumerate(m.values):
                    per_pos[i] = per_pos.get(i, 0) + int(v)
            else:
                pos = int(m.labels.get("position", 0))
                per_pos[pos] = per_pos.get(pos, 0) + int(m.value)
        if m.name == ITERATIONS and hasattr(m, "count"):
            values["engine_steps"] = values.get("engine_steps", 0) + int(m.count)
    values["accepted_per_position"] = [per_pos[i] for i in sorted(per_pos)]
    return values


def counter_delta(after: dict, before: dict) -> dict:
    d = {k: after[k] - before[k] for k in COUNTERS}
    if "engine_steps" in after:
        d["engine_steps"] = after["engine_steps"] - before.get("engine_steps", 0)
    a, b = after["accepted_per_position"], before["accepted_per_position"]
    b = b + [0] * (len(a) - len(b))
    d["accepted_per_position"] = [x - y for x, y in zip(a, b)]
    return d


def versions() -> dict:
    import torch
    import transformers
    import vllm

    return {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version()}


def wave_prompts(prompts: list, c: int, min_prompts: int | None) -> list:
    """The prompts a wave set at concurrency ``c`` decodes: all, or the first c·⌈min_prompts/c⌉.

    >>> len(wave_prompts(list(range(100)), 8, 6)), len(wave_prompts(list(range(100)), 64, 6))
    (8, 64)
    """
    if not min_prompts:
        return prompts
    return prompts[: c * -(-min_prompts // c)]


def engine_settings(llm) -> dict:
    """What vLLM resolved for this engine (recorded beside the timings)."""
    cfg = llm.llm_engine.vllm_config
    out = {}
    for key, get in (("async_scheduling", lambda: cfg.scheduler_config.async_scheduling),
                     ("enforce_eager", lambda: cfg.model_config.enforce_eager),
                     ("model_runner", lambda: "v2" if cfg.use_v2_model_runner else "v1"),
                     ("cudagraph_mode", lambda: str(cfg.compilation_config.cudagraph_mode)),
                     ("compilation_mode", lambda: str(getattr(cfg.compilation_config, "mode", None))),
                     ("max_num_batched_tokens", lambda: cfg.scheduler_config.max_num_batched_tokens),
                     ("enable_prefix_caching", lambda: cfg.cache_config.enable_prefix_caching),
                     ("dtype", lambda: str(cfg.model_config.dtype))):
        try:
            v = get()
            out[key] = v if isinstance(v, (bool, int, float, str, type(None))) else str(v)
        except Exception:  # noqa: BLE001 - another vLLM layout: leave the field out
            pass
    return out


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def run_waves(llm, prompts: list, c: int, params, recorder: DraftRecorder | None) -> dict:
    """Decode ``prompts`` in waves of ``c`` (timed); the wave set's record."""
    before = read_counters(llm)
    outputs, drafts, passes, wall = [], [], [], 0.0
    for i in range(0, len(prompts), c):
        if recorder is not None:
            recorder.take([])
            recorder.active = True
        t = time.perf_counter()
        res = llm.generate(prompts[i:i + c], params, use_tqdm=False)
        wall += time.perf_counter() - t
        outputs.extend(list(r.outputs[0].token_ids) for r in res)
        if recorder is not None:
            blocks, n = recorder.take([r.request_id for r in res])
            drafts.extend(blocks)
            passes.extend(n)
    if recorder is not None:
        recorder.active = False
    wave = {"concurrency": c, "wall_s": wall, "num_prompts": len(prompts),
            "output_tokens": sum(len(o) for o in outputs),
            "counters": counter_delta(read_counters(llm), before), "outputs": outputs}
    if recorder is not None:
        wave["drafts"] = drafts  # per prompt: its [K] draft blocks in order
        wave["drafter_passes"] = passes  # per propose call (all requests of a step share one)
    return wave


def run_one(spec: dict, run: dict, recorder: DraftRecorder | None) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    concurrency = run.get("concurrency", [1])
    kwargs = {k: spec[k] for k in ("enable_prefix_caching", "gpu_memory_utilization") if spec.get(k) is not None}
    t0 = time.perf_counter()
    llm = LLM(model=spec["target"], tokenizer=spec["target"], dtype=spec.get("dtype", "float32"),
              max_model_len=spec.get("max_model_len", 1024), enforce_eager=spec.get("enforce_eager", True),
              seed=spec.get("seed", 0), speculative_config=copy.deepcopy(run.get("speculative_config")),
              disable_log_stats=False,
              max_num_seqs=max(max(concurrency), 1), **kwargs)
    startup_s = time.perf_counter() - t0
    sc = llm.llm_engine.vllm_config.speculative_config
    params = SamplingParams(temperature=spec.get("temperature", 0.0), max_tokens=spec["max_tokens"],
                            stop_token_ids=spec.get("stop_token_ids"), seed=spec.get("seed", 0),
                            ignore_eos=bool(spec.get("ignore_eos", False)),
                            detokenize=bool(spec.get("detokenize", True)))
    sets = spec.get("prompt_sets") or {None: spec["prompts"]}  # workload -> prompts
    sets = {w: [TokensPrompt(prompt_token_ids=p) for p in ps] for w, ps in sets.items()}
    min_prompts = spec.get("min_prompts")
    t0 = time.perf_counter()
    if spec.get("warmup", "one") == "waves":  # every wave shape once, untimed
        short = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, detokenize=False)
        for prompts in sets.values():
            for c in concurrency:
                llm.generate(wave_prompts(prompts, c, min_prompts)[:c], short, use_tqdm=False)
    else:
        first = next(iter(sets.values()))
        llm.generate(first[:1], SamplingParams(temperature=0.0, max_tokens=4), use_tqdm=False)
    warmup_s = time.perf_counter() - t0
    waves = []
    for workload, prompts in sets.items():
        for c in concurrency:
            wave = run_waves(llm, wave_prompts(prompts, c, min_prompts), c, params,
                             recorder if run.get("record_drafts") else None)
            if workload is not None:
                wave["workload"] = workload
            waves.append(wave)
    result = {"name": run["name"], "method": run["method"], "k": run.get("k", 0), "startup_s": startup_s,
              "warmup_s": warmup_s, "settings": engine_settings(llm),
              "parallel_drafting": bool(sc.parallel_drafting) if sc is not None else False,
              "speculative_method": sc.method if sc is not None else None,
              "num_speculative_tokens": sc.num_speculative_tokens if sc is not None else 0,
              "speculative_config": run.get("speculative_config"), "waves": waves}
    del llm
    gc.collect()
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        spec = json.load(f)
    in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
    recorder = DraftRecorder() if in_process else None
    if recorder is not None and not recorder.install():
        recorder = None
    out = {"versions": versions(), "device": device_name(),
           "draft_recording": recorder is not None, "runs": []}
    for run in spec["runs"]:
        out["runs"].append(run_one(spec, run, recorder))
        with open(argv[2], "w") as f:  # written after every run, so a crash keeps what finished
            json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
