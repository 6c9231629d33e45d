"""Student copies and solutions notebooks (peagle_lab.lab.student_copies): built for every notebook; each
exercise passes its check in the source and fails it in the student copy; broken conventions are named."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from peagle_lab.lab import checks
from peagle_lab.lab import student_copies as sc

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _nb(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _code(src: str, cid: str, tags=()) -> dict:
    return {"cell_type": "code", "id": cid, "metadata": {"tags": list(tags)} if tags else {}, "source": src,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": "old output"}], "execution_count": 3}


EXERCISE = _code("# NBVAL_CHECK_OUTPUT\ndef double(x):\n    # BEGIN SOLUTION\n    return 2 * x\n    # END SOLUTION\n",
                 "ex1", ["exercise"])
CHECK = _code("check_double(double)", "chk1")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("workshop")
    return out, sc.build_workshop(NOTEBOOKS, out)


def test_every_notebook_gets_a_student_copy(built):
    out, written = built
    assert [p.name for p in written["student"]] == [p.name for p in NOTEBOOKS]
    with_exercises = [p for p in NOTEBOOKS if sc.exercise_cells(json.loads(p.read_text()), str(p))]
    assert {p.stem for p in with_exercises} >= {"01_single_pass_drafting", "02_masked_input_construction",
                                                 "03_attention_chunking", "04_fused_kernels",
                                                 "05_live_throughput", "06_train_your_own_head"}
    assert [p.name for p in written["solutions"]] == [f"{p.stem}_solutions.ipynb" for p in with_exercises]


def test_student_copies_hold_no_solution_and_no_output(built):
    out, written = built
    for path in written["student"]:
        nb = json.loads(path.read_text())
        code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        assert sc.BEGIN not in code and sc.END not in code, path.name
        assert all(not c.get("outputs") and c.get("execution_count") is None
                   for c in nb["cells"] if c["cell_type"] == "code"), path.name
    student = json.loads((out / "student" / "04_fused_kernels.ipynb").read_text())
    sources = ["".join(c["source"]) for c in student["cells"] if c["cell_type"] == "code"]
    assert [sum(s.count(stub) for s in sources) for stub in (sc.STUB, sc.STUB_TOP)] == [1, 1]  # in a def; top level
    assert not any("index_select" in s for s in sources if sc.STUB in s)  # the answer is gone, not just hidden


def test_solutions_keep_the_answers_and_outputs(built):
    out, _ = built
    source = json.loads((ROOT / "notebooks" / "04_fused_kernels.ipynb").read_text())
    sol = json.loads((out / "solutions" / "04_fused_kernels_solutions.ipynb").read_text())
    assert [c["id"] for c in sol["cells"][1:]] == [c["id"] for c in source["cells"]]
    assert [c.get("outputs") for c in sol["cells"][1:]] == [c.get("outputs") for c in source["cells"]]
    assert sum("# BEGIN SOLUTION" in "".join(c["source"]) for c in sol["cells"] if c["cell_type"] == "code") == 2
    assert "Solutions" in "".join(sol["cells"][0]["source"])


def test_relative_paths_are_rebased_to_the_copy(built):
    out, _ = built
    student = json.loads((out / "student" / "04_fused_kernels.ipynb").read_text())
    src = next("".join(c["source"]) for c in student["cells"] if "kernels.json" in "".join(c["source"]))
    rel = src.split('Path("')[1].split('")')[0]
    assert (out / "student" / rel).resolve() == (ROOT / "docs/results/h200/kernels/2026-12-03-cdfd42a/kernels.json").resolve()


def test_strip_keeps_indentation_and_code_around_the_region():
    src = "x = 1\nif x:\n    # BEGIN SOLUTION\n    y = 2\n    # END SOLUTION\nprint(x)"
    assert sc.strip_solutions(src) == f"x = 1\nif x:\n    {sc.STUB}\nprint(x)"


@pytest.mark.parametrize("src, message", [
    ("def f():\n    # BEGIN SOLUTION\n    return 1\n", "'# BEGIN SOLUTION' at line 2 has no '# END SOLUTION' after it"),
    ("x = 1\n# END SOLUTION\n", "line 2 has '# END SOLUTION' without a '# BEGIN SOLUTION'"),
    ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", "line 2 opens a solution region inside"),
])
def test_broken_regions_name_the_notebook_and_cell(src, message):
    nb = _nb(_code("import x", "setup"), _code(src, "abc123", ["exercise"]), CHECK)
    with pytest.raises(sc.NotebookConventionError) as e:
        sc.student_notebook(nb, "notebooks/09_demo.ipynb")
    assert str(e.value).startswith("notebooks/09_demo.ipynb, cell 1 (id abc123): ")
    assert message in str(e.value)


@pytest.mark.parametrize("cells, message", [
    ((_code("# BEGIN SOLUTION\nx = 1\n# END SOLUTION\n", "u1"), CHECK), "not tagged 'exercise': tag it"),
    ((_code("x = 1\n", "u2", ["exercise"]), CHECK), "has no '# BEGIN SOLUTION' region"),
    ((EXERCISE, _code("print(double(2))", "u3")), "must call a check_<name>(...)"),
    ((EXERCISE,), "must call a check_<name>(...)"),
])
def test_convention_errors(cells, message):
    with pytest.raises(sc.NotebookConventionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sc.exercise_cells(_nb(*cells), "nb.ipynb")


def test_student_notebook_stubs_and_clears():
    student = sc.student_notebook(_nb(_code("import x", "setup"), EXERCISE, CHECK), "nb.ipynb")
    assert student["cells"][0]["cell_type"] == "markdown" and "Student copy" in student["cells"][0]["source"]
    assert student["cells"][2]["source"] == f"# NBVAL_CHECK_OUTPUT\ndef double(x):\n    {sc.STUB}\n"
    assert [c["id"] for c in student["cells"][1:]] == ["setup", "ex1", "chk1"]
    assert all(c["outputs"] == [] for c in student["cells"][1:])


def test_the_script_stops_on_a_broken_notebook(tmp_path):
    bad = tmp_path / "09_broken.ipynb"
    bad.write_text(json.dumps(_nb(_code("# BEGIN SOLUTION\nx = 1\n", "c0", ["exercise"]), CHECK)))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "dev" / "build_student_notebooks.py"), str(bad),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 1
    assert f"error: {bad}, cell 0 (id c0): '# BEGIN SOLUTION' at line 1 has no" in out.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- exercises run: source passes, student fails
def _exercises():
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for n, (ex, chk) in enumerate(sc.exercise_cells(nb, str(path))):
            yield pytest.param(path, ex, chk, id=f"{path.stem[:2]}-exercise{n + 1}")


_SETUP: dict[Path, dict] = {}


def _setup_namespace(path: Path, nb: dict) -> dict:
    """What the notebook's leading code cells define, up to the one that imports the checks (run once per
    notebook, from notebooks/; notebook 1 runs `peagle-lab doctor` before its imports)."""
    if path not in _SETUP:
        ns: dict = {"__name__": "__main__"}
        with contextlib.redirect_stdout(io.StringIO()):
            for cell in (c for c in nb["cells"] if c["cell_type"] == "code"):
                exec(compile("".join(cell["source"]), f"{path.name}[setup]", "exec"), ns)
                if "checks" in ns:
                    break
        assert "checks" in ns, f"{path.name}: no code cell imports the checks"
        _SETUP[path] = ns
    return dict(_SETUP[path])


def _run(path: Path, nb: dict, cells: list[int]) -> str:
    ns, out = _setup_namespace(path, nb), io.StringIO()
    with contextlib.redirect_stdout(out):
        for i in cells:
            exec(compile("".join(nb["cells"][i]["source"]), f"{path.name}[{i}]", "exec"), ns)
    return out.getvalue()


@pytest.mark.parametrize("path, ex, chk", list(_exercises()))
def test_exercise_passes_in_the_source_and_goes_on_unanswered_in_the_student_copy(path, ex, chk, monkeypatch):
    monkeypatch.chdir(path.parent)
    source = json.loads(path.read_text())
    printed = _run(path, source, [ex, chk])
    assert printed.splitlines()[-1].startswith("correct:"), printed
    student = sc.student_notebook(source, str(path))
    shift = len(student["cells"]) - len(source["cells"])  # the banner cell
    printed = _run(path, student, [ex + shift, chk + shift])  # neither cell raises; the check says so
    assert printed.splitlines()[-1].startswith("not answered yet:") and "worked answer" in printed, printed


def test_a_check_hands_on_the_answer_or_the_worked_one(capsys):
    from peagle_lab.lab import exercises

    assert checks.check_padding_slots(9) == 9  # right: the answer itself
    assert capsys.readouterr().out.startswith("correct:")
    assert checks.check_padding_slots(None) == 9  # unanswered: the worked answer, and a line that says so
    assert capsys.readouterr().out.startswith("not answered yet:")

    def stub(hidden, hidden_mapping, is_masked, shared_hidden):
        raise NotImplementedError("your code here")

    assert checks.check_fill_by_gather(stub) is exercises.fill_draft_hidden_by_gather
    with pytest.raises(AssertionError, match="drafts the requests kept"):  # wrong: stops, with the hint
        checks.check_padding_slots(7)


@pytest.mark.parametrize("name", [n for n in checks.__all__ if n.startswith("check_")])
def test_every_check_hands_on_a_worked_answer_that_passes_it(name, capsys):
    assert name in checks._WORKED, f"add the worked answer of {name} to checks._WORKED"
    worked = checks._WORKED[name]()
    getattr(checks, name)(*(worked if isinstance(worked, tuple) else (worked,)))
    assert capsys.readouterr().out.startswith("correct:")


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name for p in NOTEBOOKS])
def test_run_all_on_a_student_copy_reaches_the_last_cell(built, name, monkeypatch):
    """"Run All" on an unanswered student copy, headless, one kernel: no cell stops it."""
    import nbclient
    import nbformat

    out, _ = built
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the kernel inherits it: two spin-waiting threads are 15-40x slower
    path = out / "student" / name
    nb = nbformat.read(str(path), as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[-1].execution_count is not None and not any(o.output_type == "error" for c in code for o in c.outputs)
    checked = ["".join(o.get("text", "") for o in c.outputs) for c in code if "checks.check_" in c.source]
    assert all(t.startswith("not answered yet:") for t in checked), checked


def test_committed_check_cells_show_a_correct_answer():
    """The committed outputs come from a solved run: every check cell printed its ``correct:`` line."""
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for _, chk in sc.exercise_cells(nb, str(path)):
            text = "".join("".join(o.get("text", "")) for o in nb["cells"][chk].get("outputs", []))
            assert text.startswith("correct:"), f"{path.name}, cell {chk}: re-run the notebook ({text[:80]!r})"


# ---------------------------------------------------------------- notebooks 1-4: a wrong answer stops with a hint
_KEEP_REJECTED = """out = []
for d, c in zip(drafts, target_choices):
    out.append(d)
    if d != c:
        return out
return out + [target_choices[-1]]"""
_ROW = """from peagle_lab.lab.exercises import draft_row_by_hand
row = draft_row_by_hand(token_ids, positions, num_accepted, bonus_token, k=k, mask_token_id=mask_token_id)
"""
_WHERE_FILL = """out = hidden.index_select(0, hidden_mapping.clamp(min=0))
out = torch.where(is_masked[:, None], shared_hidden, out)
return torch.where(((hidden_mapping < 0) & ~is_masked)[:, None], torch.zeros_like(out), out)"""
_WRONG = [  # (notebook, exercise number, code for each solution region in order, the hint the check must give)
    ("01", 1, ["return [d for d, c in zip(drafts, target_choices) if d == c]"], "Every step also gains the target's own"),
    ("01", 1, [_KEEP_REJECTED], "a step gains the target's token, never a rejected draft"),
    ("01", 2, ["return (k, 2 * k * layers) if method == 'eagle3' else (1, k * layers)"],
     "P-EAGLE's pass carries every slot of the request's row, not only the K it samples"),
    ("01", 2, ["return 1, 2 * k * layers"], "EAGLE-3 drafts one token per pass"),
    ("02", 1, [_ROW + "return dict(row, input_ids=token_ids[:num_accepted] + row['input_ids'][num_accepted:])"],
     "EAGLE's shift by one"),
    ("02", 1, [_ROW + "return dict(row, positions=[positions[num_accepted] if m else p "
                      "for p, m in zip(row['positions'], row['is_masked'])])"], "positions keep counting"),
    ("02", 2, ["padding = sum(accepted)"], "drafts the requests kept"),
    ("02", 2, ["padding = len(accepted) * (K - 1)"], "number of mask slots, and those are live"),
    ("03", 1, ["return a_key + d_key <= a + d", "leaked_token = 4"], "positions alone do not decide"),
    ("03", 1, ["return a_key < a or (a_key == a and d_key <= d)", "leaked_token = 4"], "never another chain's drafts"),
    ("03", 1, ["return (d_key == 0 and a_key <= a) or (a_key == a and d_key <= d)", "leaked_token = 5"],
     "x\\[5\\] is what query \\(1, 2\\) must predict"),
    ("03", 2, ["kept, without_cod = 3373, 8000"], "round each depth up"),
    ("03", 2, ["import math\nkept, without_cod = sum(math.ceil(n * 0.7 ** d) for d in range(K_train)), n * K_train"],
     "without the floor r_min"),
    ("04", 1, ["return hidden.index_select(0, hidden_mapping.clamp(min=0))"], "first among the mask slots"),
    ("04", 1, [_WHERE_FILL], "right values, but torch.where produced a"),
    ("04", 2, ["moved = c * 2 * K * H"], "is too little"),
    ("04", 2, ["moved = c * 2 * K * H * 2"], "close but short"),
]


def _answer(source: str, regions: list[str]) -> str:
    """``source`` with its solution regions replaced, in order, by ``regions`` (indented as the region was)."""
    lines, out, todo = sc.strip_solutions(source).splitlines(keepends=True), [], list(regions)
    for line in lines:
        if line.strip() in (sc.STUB, sc.STUB_TOP):
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + code + "\n" for code in todo.pop(0).splitlines()]
        else:
            out.append(line)
    assert not todo, "more answers than solution regions"
    return "".join(out)


@pytest.mark.parametrize("stem, number, regions, hint", _WRONG, ids=[f"{w[0]}-ex{w[1]}-{i}" for i, w in enumerate(_WRONG)])
def test_a_plausible_wrong_answer_stops_its_check_with_a_hint(stem, number, regions, hint, monkeypatch):
    path = next(p for p in NOTEBOOKS if p.stem.startswith(stem))
    monkeypatch.chdir(path.parent)
    nb = json.loads(path.read_text())
    ex, chk = sc.exercise_cells(nb, str(path))[number - 1]
    wrong = copy.deepcopy(nb)
    wrong["cells"][ex]["source"] = _answer("".join(nb["cells"][ex]["source"]), regions)
    with pytest.raises(AssertionError) as e:
        _run(path, wrong, [ex, chk])
    assert re.search(hint, str(e.value)), str(e.value)
