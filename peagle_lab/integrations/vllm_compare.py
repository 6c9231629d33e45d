"""``peagle-lab vllm-compare``: vLLM and our engine side by side, same device, heads, prompts and settings.

The published P-EAGLE gains were measured inside vLLM, where every drafter pass carries the
serving engine's per-pass cost. This driver puts vLLM's numbers and ours in one file:

```
target HF folder, heads exported for vLLM (export_for_vllm), prompts of our workloads
  ├─ vLLM (vllm_runner.py, one process per engine): plain, EAGLE-3 and P-EAGLE at each K;
  │    bf16, CUDA graphs on, prefix caching off, greedy, fixed-length output, waves of c
  └─ our SpecDecoder (bench.sweep.run_sweep): the same cells, prompts and settings
→ rows of both (schema peagle_lab.bench/1, each with engine = "vllm" | "peagle_lab"),
  and per cell: greedy-output agreement, AL ratio, TPS ratio; P-EAGLE / EAGLE-3 inside each engine.
```

Where greedy outputs differ, the first differing token is checked against a float32 copy
of the target (``divergence_margins``): the two candidates' logit gap at that position
tells a bf16 near-tie (gap of a few hundredths) from a real mismatch.

Once outputs part ways, each engine measures its drafter on a different continuation, so
per-cell AL can differ by a few per cent for that reason alone. ``--same-text`` adds the
like-for-like figure: our engine's AL on vLLM's own outputs (``bench.forced``: the target's
greedy choices forced to vLLM's tokens, the drafter fed the target's real hidden states).
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..acceptance import acceptance_length
from ..bench.analysis import best_k
from ..bench.schema import BenchRow
from ..bench.sweep import agreement
from .vllm_bench import (
    SCHEMA, check_grid, engine_entries, engine_names, export_heads, find_vllm_python, rows_from_result, run_vllm,
)

ENGINES = ("vllm", "peagle_lab")
AL_TOLERANCE = 0.03  # the "AL equal within ±3 %", per cell and on the same text


def al_within(ratio: float) -> bool:
    """Whether an AL ratio (ours / vLLM) is within ``AL_TOLERANCE`` of 1.

    >>> al_within(1.029), al_within(0.969)
    (True, False)
    """
    return abs(ratio - 1) <= AL_TOLERANCE


# ------------------------------------------------------------------ comparing outputs

def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (a length difference counts), or None if equal.

    >>> first_difference([1, 2, 3], [1, 2, 4]), first_difference([1, 2], [1, 2]), first_difference([1], [1, 5])
    (2, None, 1)
    """
    n = min(len(a), len(b))
    i = next((i for i in range(n) if a[i] != b[i]), n)
    return None if i == n and len(a) == len(b) else i


def output_agreement(ours: list[list[int]], theirs: list[list[int]]) -> dict:
    """How two engines' greedy outputs for the same prompts agree.

    Returns ``equal_rate`` (share of requests with identical outputs), ``token_agreement``
    (share of tokens before each request's first difference) and ``first_differences``
    (per differing request: its index and position).

    >>> output_agreement([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 6]])["equal_rate"]
    0.5
    """
    if len(ours) != len(theirs):
        raise ValueError(f"{len(ours)} outputs against {len(theirs)}: the engines decoded different prompt lists")
    diffs = [{"request": i, "position": j} for i, (a, b) in enumerate(zip(ours, theirs))
             if (j := first_difference(a, b)) is not None]
    n = len(ours)
    return {"requests": n, "equal_rate": (n - len(diffs)) / n if n else 1.0,
            "token_agreement": agreement(ours, theirs) if any(ours) or any(theirs) else 1.0,
            "first_differences": diffs}


@torch.no_grad()
def divergence_margins(target_fp32, prompts: list[list[int]], ours: list[list[int]], theirs: list[list[int]],
                       diffs: list[dict], limit: int = 64) -> list[dict]:
    """At each first difference, the float32 target's view of the two candidate tokens.

    For request ``r`` differing at position ``j``, runs the target on prompt + the common
    ``j`` tokens and reports the logit of our token and of vLLM's, their gap, and the rank
    of each (0 = float32 argmax). A gap of a few hundredths between the top two is a tie
    that bf16 rounding decides either way; a large gap would point at a real mismatch.
    """
    out = []
    for d in diffs[:limit]:
        r, j = d["request"], d["position"]
        if j >= len(ours[r]) or j >= len(theirs[r]):
            out.append({**d, "note": "one output ended early"})
            continue
        ids = torch.tensor([prompts[r] + ours[r][:j]], device=target_fp32.device)
        pos = torch.arange(ids.shape[1], device=ids.device)[None]
        logits = target_fp32(ids, pos, return_taps=False, logits_rows=torch.tensor([[ids.shape[1] - 1]],
                                                                                    device=ids.device)).logits[0, -1]
        a, b = ours[r][j], theirs[r][j]
        order = torch.argsort(logits, descending=True)
        rank = {int(t): i for i, t in enumerate(order[:50].tolist())}
        out.append({**d, "ours": a, "vllm": b, "logit_ours": float(logits[a]), "logit_vllm": float(logits[b]),
                    "gap": float(logits[a] - logits[b]), "rank_ours": rank.get(a, 50), "rank_vllm": rank.get(b, 50)})
    return out


# ------------------------------------------------------------------ the summary tables

def _row_index(rows: list[dict]) -> dict:
    return {(r["engine"], r["workload"], r["method"], r["k"], r["concurrency"]): r for r in rows}


def summarize(rows: list[dict], agreements: dict) -> dict:
    """Per cell: both engines' TPS and AL, ours / vLLM, output agreement; per (engine, workload, c):
    P-EAGLE / EAGLE-3 at each method's best K, and each speculative method over plain decoding.

    ``step_ms_vllm`` is vLLM's wall time over its engine steps (prefill steps and time included:
    vLLM does not split them); ``step_ms_ours`` is our decode time over decode steps.
    """
    idx = _row_index(rows)
    cells = []
    for (engine, w, m, k, c), r in sorted(idx.items(), key=lambda kv: kv[0][1:]):
        if engine != "vllm" or ("peagle_lab", w, m, k, c) not in idx:
            continue
        o = idx[("peagle_lab", w, m, k, c)]
        a = agreements.get((w, m, k, c), {})
        cells.append({"workload": w, "method": m, "k": k, "concurrency": c,
                      "tps_vllm": r["tps"], "tps_ours": o["tps"],
                      "ours_over_vllm": o["tps"] / r["tps"] if r["tps"] else None,
                      "al_vllm": r["acceptance_length"], "al_ours": o["acceptance_length"],
                      "al_ratio": o["acceptance_length"] / r["acceptance_length"],
                      "step_ms_vllm": r.get("step_ms"), "step_ms_ours": o.get("step_ms"),
                      "equal_rate": a.get("equal_rate"), "token_agreement": a.get("token_agreement")})
    within = []
    for engine in ENGINES:  # an engine's rows carry it as their source too
        best = {key: r.to_dict() for key, r in best_k([BenchRow.from_dict(r) for r in rows], source=engine).items()}
        for w, c in sorted({(r["workload"], r["concurrency"]) for r in rows if r["engine"] == engine}):
            e3, pe, plain = (best.get((w, 0.0, m, c)) for m in ("eagle3", "peagle", "baseline"))
            within.append({"engine": engine, "workload": w, "concurrency": c,
                           "plain_tps": plain["tps"] if plain else None,
                           "eagle3_tps": e3["tps"] if e3 else None, "eagle3_k": e3["k"] if e3 else None,
                           "peagle_tps": pe["tps"] if pe else None, "peagle_k": pe["k"] if pe else None,
                           "peagle_over_eagle3": pe["tps"] / e3["tps"] if pe and e3 and e3["tps"] else None,
                           "peagle_over_plain": pe["tps"] / plain["tps"] if pe and plain and plain["tps"] else None,
                           "eagle3_over_plain": e3["tps"] / plain["tps"] if e3 and plain and plain["tps"] else None})
    return {"cells": cells, "within_engine": within}


def comparison_table(summary: dict) -> str:
    """The per-cell table as Markdown (what the README and docs/vllm.md show)."""
    lines = ["| workload | method | K | c | vLLM tok/s | ours tok/s | ours / vLLM | AL vLLM | AL ours | equal outputs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for x in summary["cells"]:
        eq = "—" if x["equal_rate"] is None else f"{100 * x['equal_rate']:.0f} %"
        ratio = "—" if x["ours_over_vllm"] is None else f"{x['ours_over_vllm']:.2f}×"
        lines.append(f"| {x['workload']} | {x['method']} | {x['k'] or '—'} | {x['concurrency']} | {x['tps_vllm']:,.0f} | "
                     f"{x['tps_ours']:,.0f} | {ratio} | {x['al_vllm']:.2f} | {x['al_ours']:.2f} | {eq} |")
    return "\n".join(lines)


def within_table(summary: dict) -> str:
    """P-EAGLE / EAGLE-3 (each at its best K) inside each engine, as Markdown."""
    lines = ["| engine | workload | c | plain tok/s | EAGLE-3 tok/s (K) | P-EAGLE tok/s (K) | P-EAGLE / EAGLE-3 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for x in summary["within_engine"]:
        if x["peagle_over_eagle3"] is None:
            continue
        lines.append(f"| {x['engine']} | {x['workload']} | {x['concurrency']} | {x['plain_tps'] or 0:,.0f} | "
                     f"{x['eagle3_tps']:,.0f} ({x['eagle3_k']}) | {x['peagle_tps']:,.0f} ({x['peagle_k']}) | "
                     f"{x['peagle_over_eagle3']:.2f}× |")
    return "\n".join(lines)


def same_text_cells(vres: dict, ids: dict, target, drafters: dict, batch: int = 8, log=print) -> list[dict]:
    """Per speculative vLLM cell: vLLM's AL and ours on the same text (vLLM's outputs, forced).

    ``ids[workload]`` are the prompts both engines decoded (vLLM's outputs follow their order).
    """
    from ..bench.forced import acceptance_on_text
    from ..config import SpecConfig

    cells = []
    for run_ in vres["runs"]:
        if run_["method"] == "baseline" or run_["method"] not in drafters:
            continue
        spec = SpecConfig(method=run_["method"], num_speculative_tokens=run_["k"])
        for w in run_["waves"]:
            t0, outs = time.perf_counter(), w["outputs"]
            cnt = w["counters"]
            cell = {"workload": w["workload"], "method": run_["method"], "k": run_["k"],
                    "concurrency": w["concurrency"], "requests": len(outs),
                    "al_vllm": acceptance_length(cnt["num_accepted_tokens"], cnt["num_drafts"])}
            try:
                ours = acceptance_on_text(target, drafters[run_["method"]], spec, ids[w["workload"]][:len(outs)],
                                          outs, batch=batch)
            except ValueError as err:  # one cell failing must not lose the others
                cells.append({**cell, "error": str(err), "al_within_3pct": False})
                log(f"same text: {w['workload']} {run_['name']} c={w['concurrency']}: FAILED: {err}")
                continue
            ratio = ours["acceptance_length"] / cell["al_vllm"]
            cells.append({**cell, "al_ours_same_text": ours["acceptance_length"], "al_ratio": ratio,
                          "al_within_3pct": al_within(ratio)})
            log(f"same text: {w['workload']} {run_['name']} c={w['concurrency']}: AL vLLM {cell['al_vllm']:.3f}, "
                f"ours {ours['acceptance_length']:.3f} ({time.perf_counter() - t0:.0f} s)")
    return cells


def same_text_table(cells: list[dict]) -> str:
    """``same_text_cells`` as Markdown."""
    lines = ["| workload | method | K | c | requests | AL vLLM | AL ours, same text | ours / vLLM |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {x['workload']} | {x['method']} | {x['k']} | {x['concurrency']} | {x['requests']} | "
              f"{x['al_vllm']:.3f} | " + (f"{x['al_ours_same_text']:.3f} | {x['al_ratio']:.3f} |" if "error" not in x
                                          else "failed | — |") for x in cells]
    return "\n".join(lines)


# ------------------------------------------------------------------ CLI

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vllm-python", help="interpreter with vLLM (default: $PEAGLE_LAB_VLLM_PYTHON, or this one)")
    p.add_argument("--methods", nargs="+", default=["baseline", "eagle3", "peagle"],
                   choices=("baseline", "eagle3", "peagle"))
    p.add_argument("-k", "--num-speculative-tokens", dest="ks", nargs="+", type=int, default=[3, 5, 7], metavar="K")
    p.add_argument("-c", "--concurrency", dest="concurrencies", nargs="+", type=int, default=[1, 8, 64], metavar="C")
    p.add_argument("--workloads", nargs="+", default=["chat", "code"], choices=("chat", "code"))
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--min-prompts", type=int, default=8, help="a cell at c decodes c·⌈this/c⌉ prompts, in waves of c")
    p.add_argument("--device", default="auto", help="auto (cuda when there), cuda or cpu")
    p.add_argument("--dtype", default="auto", help="auto: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--heads", nargs="*", default=[], metavar="METHOD=DIR",
                   help="head folders (default: the shipped heads)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3,
                   help="vLLM's share of GPU memory per engine (one engine runs at a time)")
    p.add_argument("--vllm-timeout-s", type=float, default=900.0, help="per vLLM engine: start-up and all its waves")
    p.add_argument("--skip-ours", action="store_true", help="vLLM only (our rows are left out)")
    p.add_argument("--vllm-runner", default="default", choices=("default", "v1"),
                   help="v1: every engine on vLLM's V1 model runner (vLLM 0.24 puts parallel drafting there "
                        "anyway, and the rest on its V2 runner)")
    p.add_argument("--note", help="a line of provenance to keep in run_info (e.g. where saved results came from)")
    p.add_argument("--vllm-results", metavar="DIR",
                   help="use runner results saved by an earlier run (DIR/<engine>.json) instead of running vLLM")
    p.add_argument("--out", default="vllm_compare", help="work folder: exported heads, specs, logs")
    p.add_argument("--json", help="where to write the result (default: OUT/vllm_compare.json)")
    p.add_argument("--same-text", action="store_true",
                   help="also our drafters' AL on vLLM's own outputs (teacher-forced, like for like; see bench.forced)")
    p.add_argument("--same-text-batch", type=int, default=8, metavar="N",
                   help="requests per forced generate call (--same-text)")


def check_args(args) -> None:
    """Refuse bad values; drop repeated K, c and workloads (each engine and cell runs once)."""
    from ..config import check_int

    for name in ("ks", "concurrencies", "workloads", "methods"):
        setattr(args, name, list(dict.fromkeys(getattr(args, name))))
    check_grid(args)
    check_int("--min-prompts", args.min_prompts, 1)
    check_int("--same-text-batch", args.same_text_batch, 1)
    if not 0.05 <= args.gpu_memory_utilization <= 0.95:
        raise ValueError(f"--gpu-memory-utilization {args.gpu_memory_utilization}: expected a share in [0.05, 0.95]")


def _log_run(run: dict, total_s: float | None, log) -> None:
    s = run.get("settings", {})
    log(f"vllm {run['name']} ({s.get('model_runner', '?')} model runner, parallel drafting "
        f"{run['parallel_drafting']}): start-up {run['startup_s']:.0f} s, warm-up {run.get('warmup_s', 0):.0f} s"
        + (f", total {total_s:.0f} s" if total_s is not None else "") + "; "
        + ", ".join(f"{w.get('workload')} c={w['concurrency']}: {w['output_tokens'] / max(w['wall_s'], 1e-9):.0f} tok/s"
                    for w in run["waves"]))


def _merge(results: list[dict], failed: dict) -> dict:
    if not results:
        raise RuntimeError(f"every vLLM engine failed; the first: {next(iter(failed.values()), 'none ran')}")
    merged = {k: v for k, v in results[0].items() if k != "runs"}
    merged["runs"] = [r["runs"][0] for r in results]
    merged["failed"] = failed
    return merged


def load_vllm_results(folder: Path | str, names: list[str], log=print) -> dict:
    """Runner results saved by an earlier run (``<folder>/<engine>.json`` or ``<folder>/<engine>/vllm_result.json``)."""
    folder = Path(folder)
    results, failed = [], {}
    for name in names:
        for cand in (folder / f"{name}.json", folder / name / "vllm_result.json"):
            if cand.is_file():
                res = json.loads(cand.read_text())
                results.append(res)
                _log_run(res["runs"][0], None, log)
                break
        else:
            failed[name] = f"no saved result for {name} in {folder}"
    return _merge(results, failed)


def _vllm_runs(args, spec_base: dict, heads: dict, python: str, out: Path, on_cuda: bool, env: dict,
               log=lambda s: print(s, flush=True)) -> dict:
    """One runner process per engine (its GPU memory is returned when it exits); the results merged."""
    results, failed = [], {}
    for e in engine_entries(args.methods, args.ks, heads, args.concurrencies):
        t0 = time.perf_counter()
        try:
            res = run_vllm({**spec_base, "runs": [e]}, python, out / "vllm" / e["name"], timeout=args.vllm_timeout_s,
                           in_process=not on_cuda, env=env)
        except (RuntimeError, subprocess.TimeoutExpired) as err:  # one engine failing must not lose the others
            failed[e["name"]] = str(err)[-2000:]
            log(f"vllm {e['name']}: FAILED after {time.perf_counter() - t0:.0f} s: {str(err)[-1500:]}")
            continue
        results.append(res)
        _log_run(res["runs"][0], time.perf_counter() - t0, log)
    return _merge(results, failed)


def build_document(args, info: dict, config: dict, vres: dict, rows: list[dict], ids: dict,
                   ours_tokens: dict, target_fp32_loader, ours_skipped: list[dict] | None = None) -> dict:
    """The result document: both engines' rows, the per-cell comparison and the output agreement."""
    vllm_tokens = {}
    for run_ in vres["runs"]:
        for w in run_["waves"]:
            vllm_tokens[(w["workload"], run_["method"], run_["k"] if run_["method"] != "baseline" else 0,
                         w["concurrency"])] = w["outputs"]
    agreements, margins, target32 = {}, {}, None
    for key, theirs in vllm_tokens.items():
        if key not in ours_tokens:
            continue
        if len(ours_tokens[key]) != len(theirs):  # e.g. saved vLLM results of another prompt count
            agreements[key] = {"requests": 0, "equal_rate": None, "token_agreement": None, "first_differences": [],
                               "error": f"{len(ours_tokens[key])} outputs of ours against {len(theirs)} of vLLM's"}
            continue
        a = output_agreement(ours_tokens[key], theirs)
        agreements[key] = a
        if a["first_differences"]:
            target32 = target32 or target_fp32_loader()
            margins[key] = divergence_margins(target32, ids[key[0]][:len(theirs)], ours_tokens[key], theirs,
                                              a["first_differences"])
    gaps = [abs(m["gap"]) for ms in margins.values() for m in ms if "gap" in m]
    summary = summarize(rows, agreements)
    compared = [a for a in agreements.values() if a["requests"]]
    total_req = sum(a["requests"] for a in compared)
    summary["outputs"] = {
        "requests_compared": total_req,
        "equal_rate": (sum(a["requests"] * a["equal_rate"] for a in compared) / total_req) if total_req else None,
        "token_agreement": (sum(a["requests"] * a["token_agreement"] for a in compared) / total_req) if total_req else None,
        "first_difference_gap_median": statistics.median(gaps) if gaps else None,
        "first_difference_gap_max": max(gaps) if gaps else None,
        "first_differences_checked": len(gaps),
    }
    for x in summary["cells"]:
        x["al_within_3pct"] = al_within(x["al_ratio"])
    failed = vres.get("failed", {})
    skipped = [{"workload": w, "method": m, "k": k, "concurrency": c, "temperature": 0.0,
                "reason": f"vLLM engine failed: {failed[name][-300:]}", "source": "vllm"}
               for name, m, k in engine_names(args.methods, args.ks) if name in failed
               for w in args.workloads for c in args.concurrencies]
    skipped += ours_skipped or []
    engines = sorted({r["engine"] for r in rows})
    planned = {(w, m, k, c) for _, m, k in engine_names(args.methods, args.ks) for w in args.workloads for c in args.concurrencies}
    have = {(x["workload"], x["method"], x["k"], x["concurrency"]) for x in summary["cells"]}
    if set(engines) != set(ENGINES):
        summary["status"] = f"partial: only {', '.join(engines) or 'no engine'}"
    elif planned - have or skipped:
        summary["status"] = f"partial: {len(planned - have)} of {len(planned)} planned cells missing in one engine"
    else:
        summary["status"] = "complete"
    return {"schema": SCHEMA, "run_info": info, "config": config, "rows": rows, "skipped": skipped,
            "comparison": summary,
            "agreement": {"/".join(map(str, k)): {**v, "margins": margins.get(k, [])} for k, v in agreements.items()}}


def _setup(args, device, dtype, out: Path):
    """Target, tokenizer, our drafters and where they came from, the heads exported for vLLM, the
    sweep config and its prompts (the same token ids go to both engines)."""
    from ..bench.sweep import SweepConfig, load_prompts, plan_cells
    from ..heads import default_drafter
    from ..heads.io import load_head
    from .. import zoo

    target_dir = zoo.convert_default(quiet=True)  # the float32 HF folder vLLM reads
    target, tok = zoo.load_model(target_dir, dtype, device, quiet=True)
    spec_methods = [m for m in args.methods if m != "baseline"]
    heads = {} if args.vllm_results else export_heads(args, spec_methods, target_dir, out)  # for vLLM, same weights
    given = dict(h.split("=", 1) for h in args.heads)
    drafters, origins = {}, {}
    for m in spec_methods:
        if m in given:
            drafters[m], origins[m] = load_head(given[m], target, dtype=dtype, device=device), given[m]
        else:
            drafters[m], origins[m] = default_drafter(target, m)
    cfg = SweepConfig(methods=tuple(args.methods), ks=tuple(args.ks), extra_ks=(), concurrencies=tuple(args.concurrencies),
                      workloads=tuple(args.workloads), max_new_tokens=args.max_new_tokens, min_prompts=args.min_prompts,
                      ignore_eos=True, reference=False, cuda_graphs=device.type == "cuda")
    prompts = load_prompts(cfg, tok, target.config.max_position_embeddings, plan_cells(cfg))
    return target_dir, target, tok, drafters, origins, heads, cfg, prompts


def _config(args, spec_base: dict, origins: dict, vres: dict, prompts: dict) -> dict:
    return {"methods": args.methods, "ks": args.ks, "concurrencies": args.concurrencies, "workloads": args.workloads,
            "max_new_tokens": args.max_new_tokens, "min_prompts": args.min_prompts, "temperature": 0.0,
            "ignore_eos": True, "dtype": spec_base["dtype"], "target": "SmolLM2-135M-Instruct (embedded default)",
            "heads": origins, "vllm_settings": {r["name"]: r.get("settings", {}) | {
                "startup_s": round(r["startup_s"], 1), "warmup_s": round(r.get("warmup_s", 0.0), 1),
                "parallel_drafting": r["parallel_drafting"]} for r in vres["runs"]},
            "prompts": {w: {"num": len(ps), "ids": [x.id for x in ps]} for w, ps in prompts.items()}}


def _print_report(doc: dict, path: Path) -> None:
    summary, info = doc["comparison"], doc["run_info"]
    print(comparison_table(summary))
    print()
    print(within_table(summary))
    o = summary["outputs"]
    if o["requests_compared"]:
        print(f"greedy outputs equal on {100 * o['equal_rate']:.0f} % of {o['requests_compared']} requests; "
              f"first-difference logit gap (float32 target) median {o['first_difference_gap_median']}, "
              f"max {o['first_difference_gap_max']}")
    if summary.get("same_text"):
        st = summary["same_text"]
        ratios = [x["al_ratio"] for x in st if "al_ratio" in x] or [float("nan")]
        print(f"\n{same_text_table(st)}\nsame text: AL within 3 % of vLLM's in {sum(x['al_within_3pct'] for x in st)} "
              f"of {len(st)} cells (ours / vLLM {min(ratios):.3f}–{max(ratios):.3f})")
    print(f"vllm-compare: {summary['status']}; vLLM {info.get('vllm_s', 0):.0f} s, ours {info.get('ours_s', 0):.0f} s; "
          f"wrote {path}")


def _add_same_text(doc: dict, info: dict, vres: dict, ids: dict, target, drafters: dict, batch: int,
                   device: str) -> None:
    """``--same-text``: the like-for-like AL cells into the document, their time and device into run_info."""
    t0 = time.perf_counter()
    doc["comparison"]["same_text"] = same_text_cells(vres, ids, target, drafters, batch)
    info.update(same_text_s=round(time.perf_counter() - t0, 1), same_text_device=device,
                same_text_dtype=str(target.dtype).removeprefix("torch."))


def run(args) -> int:
    """``peagle-lab vllm-compare``: see the module docstring."""
    from ..bench.schema import write_document
    from ..bench.sweep import run_sweep
    from ..devices import resolve_device, resolve_dtype
    from ..provenance import git_commit, run_info
    from .. import zoo

    check_args(args)
    python = None if args.vllm_results else find_vllm_python(args.vllm_python)
    device = resolve_device(args.device)
    dtype = resolve_dtype("bfloat16" if args.dtype == "auto" and device.type == "cuda" else args.dtype, device)
    on_cuda = device.type == "cuda"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = Path(args.json) if args.json else out / "vllm_compare.json"
    command = getattr(args, "command_line", None) or shlex.join(["peagle-lab", *sys.argv[1:]])
    info = run_info(command) | ({"note": args.note} if args.note else {})
    here = info["device"]  # our engine's device (vLLM's results may have been saved on another machine)
    t_start = time.perf_counter()
    target_dir, target, tok, drafters, origins, heads, cfg, prompts = _setup(args, device, dtype, out)
    ids = {w: [list(p.token_ids) for p in ps] for w, ps in prompts.items()}
    env = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}  # greedy needs no FlashInfer (not staged on the H200)
    if args.vllm_runner == "v1":
        env["VLLM_USE_V2_MODEL_RUNNER"] = "0"

    # 1. vLLM, one engine at a time (or results saved by an earlier run)
    spec_base = {"target": str(target_dir), "dtype": str(dtype).removeprefix("torch."), "max_model_len": 2048,
                 "seed": 0, "prompt_sets": ids, "max_tokens": args.max_new_tokens, "temperature": 0.0,
                 "ignore_eos": True, "detokenize": False, "min_prompts": args.min_prompts, "warmup": "waves",
                 "enforce_eager": not on_cuda, "enable_prefix_caching": False,
                 "gpu_memory_utilization": args.gpu_memory_utilization if on_cuda else None}
    t0 = time.perf_counter()
    if args.vllm_results:
        print(f"vllm-compare: vLLM results from {args.vllm_results}", flush=True)
        vres = load_vllm_results(args.vllm_results, [name for name, _, _ in engine_names(args.methods, args.ks)])
    else:
        print(f"vllm-compare: vLLM ({python}) on {device} ({spec_base['dtype']}), {len(engine_names(args.methods, args.ks))} engines",
              flush=True)
        vres = _vllm_runs(args, spec_base, heads, python, out, on_cuda, env)
    commit = git_commit()
    rows = [{**r, "engine": "vllm"} for r in rows_from_result(vres, "", 0.0, args.max_new_tokens, 0, command, commit)]
    info.update({"device": vres["device"], "vllm": vres["versions"].get("vllm"), "vllm_torch": vres["versions"].get("torch"),
                 "vllm_s": round(time.perf_counter() - t0, 1), "vllm_env": env})
    config = _config(args, spec_base, origins, vres, prompts)

    def target32():
        return zoo.load_model(target_dir, torch.float32, device, quiet=True)[0]

    # the vLLM half is saved before our sweep starts, so a run cut short keeps it
    write_document(build_document(args, info, config, vres, rows, ids, {}, target32), json_path)

    # 2. ours, same cells
    ours_tokens: dict = {}
    if not args.skip_ours:
        t0 = time.perf_counter()
        res = run_sweep(target, tok, drafters, cfg, run_info=info, tokens_out=ours_tokens,
                        extra_config={"heads": origins})
        info["ours_s"] = round(time.perf_counter() - t0, 1)
        rows += [{**r.to_dict(), "engine": "peagle_lab", "device": here, "commit": commit, "command": command}
                 for r in res.rows]
    info["wall_s"] = round(time.perf_counter() - t_start, 1)
    doc = build_document(args, info, config, vres, rows, ids, ours_tokens, target32,
                         [vars(x).copy() for x in res.skipped] if not args.skip_ours else [])
    if args.same_text:  # our rows are saved first: the like-for-like check must not risk them
        write_document(doc, json_path)
        _add_same_text(doc, info, vres, ids, target, drafters, args.same_text_batch, here)
    _print_report(doc, write_document(doc, json_path))
    return 0
