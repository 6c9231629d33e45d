"""What every ``peagle-lab train*`` command shares: argument groups, loading the target, error reporting.

The commands live one to a module (``data_cli``, ``train_cli``, ``bench``); ``cli`` mounts them.
"""
from __future__ import annotations

import argparse
import functools
import shlex
import sys
from pathlib import Path

from ..devices import DTYPES, resolve_device, resolve_dtype


def reports_errors(run):
    """``run_*`` return 2 and print the message for bad input (ValueError), like the rest of the CLI."""
    @functools.wraps(run)
    def wrapper(args) -> int:
        try:
            return run(args)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return wrapper


def load_target(args) -> tuple[object, object, str]:
    """``(target, tokenizer or None, name)`` for ``--tiny`` / ``--model`` / the default SmolLM2."""
    device = resolve_device(args.device)
    if getattr(args, "tiny", False):
        from ..testing import tiny_target

        model = tiny_target(seed=0).to(device=device, dtype=resolve_dtype(args.dtype, device))
        return model, None, "tiny random target (peagle_lab.testing.tiny_target)"
    from ..zoo import DEFAULT, load_model

    model, tok = load_model(args.model, resolve_dtype(args.dtype, device), device, quiet=False)
    return model.eval(), tok, Path(args.model).name if args.model else DEFAULT.name


def command_line(args=None) -> str:
    """The command that produced ``args``, as someone would retype it."""
    if getattr(args, "command_line", None):
        return args.command_line
    prog = Path(sys.argv[0]).name
    head = ["python", "-m", "peagle_lab.train.cli"] if prog in ("cli.py", "-c") else [prog]
    return shlex.join(head + sys.argv[1:])


def common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="target HF folder or GGUF (default: the embedded SmolLM2)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES],
                   help="target dtype (auto: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no tqdm bars (logs only)")
