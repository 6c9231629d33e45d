"""CI parity check against a real vLLM: export SmolLM2 + heads, run both engines, judge (a)–(d).

    python scripts/bench/vllm_check.py --vllm-python /path/to/vllm-venv/bin/python \
        [--eagle3 DIR] [--peagle DIR] [--ks 3 7] [--num-prompts 8] [--max-new-tokens 32] [--out DIR]
        [--workload long --long-tokens 768 1024]   # prompts past the heads' 512-position drafting window

Heads default to the shipped ones (peagle_lab/heads/eagle3, peagle_lab/heads/peagle); a
missing one is replaced by an untrained probe head (EAGLE-3: 1 layer; P-EAGLE: 2 layers;
see ``probe_drafter``: its drafts depend on the embeddings, attention and the learned
mask row, so check (d) still bites), and checks (b)-accepted and (c) are then reported as
needing trained heads. The checks are
described in ``peagle_lab.integrations.vllm_check``. Exit status 1 when any check fails.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from peagle_lab.bench.workloads import load_workload
from peagle_lab.heads import bundled_head_dir
from peagle_lab.integrations.vllm import export_for_vllm, export_target_for_vllm, import_head
from peagle_lab.integrations.vllm_bench import find_vllm_python, run_entry, run_vllm
from peagle_lab.integrations.vllm_check import judge, probe_drafter, run_ours
from peagle_lab.provenance import run_info
from peagle_lab.zoo import load_default


def heads_for(args, target, out: Path) -> dict[str, tuple[Path, bool]]:
    """method -> (exported vLLM head folder, trained?)."""
    heads = {}
    for method, layers, seed in (("eagle3", 1, 1), ("peagle", 2, 2)):
        src = getattr(args, method) or bundled_head_dir(method)
        if src is not None and Path(src).is_dir():
            drafter, trained = import_head(src, target), True
            print(f"{method}: trained head {src}")
        else:
            drafter, trained = probe_drafter(target, method, num_hidden_layers=layers, seed=seed), False
            print(f"{method}: no trained head (looked in {src or f'peagle_lab/heads/{method}'}); "
                  f"using a random {layers}-layer probe head")
        heads[method] = (export_for_vllm(drafter, out / "heads" / method, "vllm", args.target_dir,
                                         k=max(args.ks)), trained)
    return heads


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vllm-python")
    p.add_argument("--eagle3", help="EAGLE-3 head folder (default: peagle_lab/heads/eagle3 when present)")
    p.add_argument("--peagle", help="P-EAGLE head folder (default: peagle_lab/heads/peagle when present)")
    p.add_argument("--ks", nargs="+", type=int, default=[3, 7])
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--workload", choices=["chat", "long"], default="chat",
                   help="long: stdlib excerpts past the heads' drafting window (see --long-tokens)")
    p.add_argument("--long-tokens", nargs=2, type=int, default=[768, 1024], metavar=("MIN", "MAX"),
                   help="excerpt length range of --workload long, in tokens")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for vLLM")
    p.add_argument("--out", default="vllm_check")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(args.out)
    python = find_vllm_python(args.vllm_python)
    target, tok = load_default(quiet=True)
    args.target_dir = export_target_for_vllm()  # the cached float32 HF folder, loaded in place
    if args.workload == "long":
        prompts = [list(q.token_ids) for q in load_workload("long", args.num_prompts, tokenizer=tok,
                                                            long_context_tokens=tuple(args.long_tokens))]
    else:
        prompts = [list(q.token_ids) for q in load_workload("chat", args.num_prompts, tokenizer=tok,
                                                            max_prompt_tokens=256)]
    max_model_len = max(1024, -(-(max(map(len, prompts)) + args.max_new_tokens + 16) // 256) * 256)
    heads = heads_for(args, target, out)
    c = [len(prompts)]  # one wave: all prompts decode concurrently, as in our engine's batch
    runs = [run_entry("baseline", "baseline", 0, None, c)]
    runs += [run_entry(f"{m}-k{k}", m, k, heads[m][0], c, record_drafts=True) for m in heads for k in args.ks]
    spec = {"target": str(args.target_dir), "dtype": "float32", "max_model_len": max_model_len, "seed": 0,
            "prompts": prompts, "max_tokens": args.max_new_tokens, "temperature": 0.0,
            "stop_token_ids": list(target.config.eos_token_ids), "runs": runs}
    t1 = time.perf_counter()
    print(f"vLLM: {len(runs)} engines, {len(prompts)} prompts, {args.max_new_tokens} new tokens "
          f"(log {out / 'vllm.log'})", flush=True)
    result = run_vllm(spec, python, out, threads=args.threads)
    t2 = time.perf_counter()
    plain = result["runs"][0]["waves"][0]["outputs"]
    verdicts = []
    for run in result["runs"][1:]:
        method, k = run["method"], run["k"]
        drafter = import_head(heads[method][0], target)  # exactly the tensors vLLM loaded
        ours = run_ours(target, drafter, method, k, prompts, args.max_new_tokens, target.config.eos_token_ids)
        verdicts.append(judge(method, k, run, plain, ours, trained=heads[method][1]))
    t3 = time.perf_counter()
    for v in verdicts:
        print(f"\n{v.name}: {'ok' if v.ok else 'FAILED'}")
        for name, (ok, detail) in v.checks.items():
            mark = {True: "pass", False: "FAIL", None: "n/a "}[ok]
            print(f"  {mark}  {name}: {detail}")
    timing = {"export_s": t1 - t0, "vllm_s": t2 - t1, "ours_s": t3 - t2,
              "vllm_startup_s": [r["startup_s"] for r in result["runs"]]}
    print(f"\ntimes: export {timing['export_s']:.0f} s, vLLM {timing['vllm_s']:.0f} s "
          f"(engine start-ups {', '.join(f'{s:.0f}' for s in timing['vllm_startup_s'])} s), "
          f"our engine {timing['ours_s']:.0f} s")
    if not all(h[1] for h in heads.values()):
        print("note: random heads were used; (b) accepted > 0 and (c) acceptance length need trained heads")
    report = {"run_info": run_info(), "vllm": result["versions"], "device": result["device"], "timing": timing,
              "verdicts": [{"name": v.name, "ok": v.ok, "checks": v.checks, "numbers": v.numbers}
                           for v in verdicts]}
    (out / "vllm_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return 0 if all(v.ok for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
