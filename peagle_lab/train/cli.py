"""Command-line entry points: ``train-data`` (synthesise), ``train`` and ``train-eval`` (measure + export).

``python -m peagle_lab.train.cli {data,train,eval} ...`` runs them directly; ``peagle_lab.cli``
mounts the same ``add_*_arguments`` / ``run_*`` as ``peagle-lab train-data | train | train-eval``.
``--tiny`` swaps in a random tiny target and random-prompt data, so the whole path runs on a CPU
in seconds.

One module a command, each importing only what the commands share (``cli_common``), so this
module sits above all of them and none imports it back:

    cli          this entry point (and the names ``peagle_lab.cli`` and ``train.bench`` import)
    data_cli     ``data``: synthesise a training data folder
    train_cli    ``train`` and ``eval``: train a head; measure trained runs' heads and export them
    cli_common   argument groups, loading the target, error reporting
"""
from __future__ import annotations

import argparse
import shlex
import sys

from .cli_common import command_line, common_arguments, load_target, reports_errors
from .data_cli import add_data_arguments, read_exclusions, run_data
from .train_cli import add_eval_arguments, add_train_arguments, run_eval, run_train

__all__ = ["main", "add_data_arguments", "run_data", "add_train_arguments", "run_train", "add_eval_arguments",
           "run_eval", "command_line", "common_arguments", "load_target", "reports_errors", "read_exclusions"]


def main(argv: list[str] | None = None) -> int:
    """``python -m peagle_lab.train.cli {data,train,eval} ...``."""
    parser = argparse.ArgumentParser(prog="python -m peagle_lab.train.cli", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add, run in (("data", add_data_arguments, run_data), ("train", add_train_arguments, run_train),
                           ("eval", add_eval_arguments, run_eval)):
        sp = sub.add_parser(name)
        add(sp)
        sp.set_defaults(func=run)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["python", "-m", "peagle_lab.train.cli", *argv])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
