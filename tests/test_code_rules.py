"""House rules of the code base that a reviewer would otherwise check by hand (issue 14)."""
from __future__ import annotations

import ast
from pathlib import Path

from peagle_lab.testing import script_module

ROOT = Path(__file__).resolve().parents[1]


def _function_lengths():
    return script_module("dev/function_lengths.py")


def test_no_function_in_the_package_is_over_60_lines_of_code():
    rules = _function_lengths()
    assert rules.long_functions(60) == []
    assert rules.long_functions(25), "the checker finds nothing even at a low limit: it is not looking"


def private_imports(root: Path) -> list[str]:
    """``from module import _name`` anywhere in the package: a private name crossing modules."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                found += [f"{path.relative_to(root.parent)}:{node.lineno} {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_across_modules(tmp_path):
    assert private_imports(ROOT / "peagle_lab") == []
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from .b import _hidden, shown\n")
    assert private_imports(tmp_path / "pkg") == ["pkg/a.py:1 _hidden"]
