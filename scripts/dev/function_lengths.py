"""List functions in peagle_lab/ longer than a limit (lines of code: no docstring, blank or comment lines).

    python scripts/dev/function_lengths.py [--limit 60]     # exits 1 if any function is longer
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "peagle_lab"


def code_lines(node: ast.AST, lines: list[str]) -> int:
    """Lines of code in a function body, its docstring, blank lines and comments left out."""
    body = node.body
    first = body[0]
    has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    start = first.end_lineno + 1 if has_doc else first.lineno
    return sum(1 for ln in lines[start - 1: node.end_lineno] if ln.strip() and not ln.strip().startswith("#"))


def long_functions(limit: int) -> list[tuple[int, str, str, int]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        lines = text.split("\n")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = code_lines(node, lines)
                if n > limit:
                    found.append((n, str(path.relative_to(ROOT.parent)), node.name, node.lineno))
    return sorted(found, reverse=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=60)
    args = p.parse_args(argv)
    found = long_functions(args.limit)
    for n, path, name, line in found:
        print(f"{path}:{line} {name}: {n} lines of code (limit {args.limit})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
