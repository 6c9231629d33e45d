"""scripts/dev/land_sweep.py: the benchmark session's files land in new run folders of docs/results/h200 only when
they fit."""
from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from peagle_lab.bench.archive import latest
from peagle_lab.lab.paper import README_SWEEP
from peagle_lab.testing import script_module

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results" / "h200"
SWEEP, K_SWEEP = latest("h200", "sweeps"), latest("h200", "k_scaling")  # the newest in the tree
NEW = "f" * 40  # the commit of the pretend session
NEW_FOLDER = f"2026-12-09-{NEW[:7]}"  # its run folders' name


@pytest.fixture(scope="module")
def land_sweep():
    return script_module("dev/land_sweep.py")


@pytest.fixture(scope="module")
def shipped_digests():
    from peagle_lab.heads import bundled_head_dir
    from peagle_lab.heads.io import head_digest

    return {m: head_digest(bundled_head_dir(m)) for m in ("eagle3", "peagle")}


def _fetched(tmp_path: Path, digests: dict, commit: str = NEW, device: str = "NVIDIA H200", failures: int = 0,
             suite_commit: str | None = None) -> Path:
    """What h200_wait.sh brings back from a benchmark session: three FOLDER.tgz, the stage seconds, the log."""
    parts, fetched = tmp_path / "parts", tmp_path / "fetched"
    fetched.mkdir(parents=True)
    for name, src in (("sweep", SWEEP / "bench.json"), ("k_scaling", K_SWEEP / "bench.json")):
        doc = json.loads(src.read_text())
        doc["run_info"].update(commit=commit, device=device, date="2026-12-09T10:00:00+00:00")
        doc["config"]["head_digests"] = digests
        for row in doc["rows"]:  # a faster engine, so that tables built from it differ from those in place
            row["tps"] *= 1.5
        (parts / name).mkdir(parents=True)
        (parts / name / "bench.json").write_text(json.dumps(doc))
        (parts / name / "bench.csv").write_text(f"{name} csv\n")
        (parts / name / "bench.log").write_text(f"{name} log\n")
    suite = {"device": device, "commit": suite_commit or commit, "date": "2026-12-09T10:20:00+00:00",
             "exit_code": 1 if failures else 0, "tests": 92, "failures": failures, "errors": 0, "skipped": 0,
             "passed": 92 - failures}
    (parts / "gpu_suite").mkdir()
    (parts / "gpu_suite" / "gpu_suite.json").write_text(json.dumps(suite))
    for n in ("gpu_junit.xml", "gpu_tests.log", "bf16_match_rate.json"):
        (parts / "gpu_suite" / n).write_text(f"new {n}\n")
    for name in ("sweep", "k_scaling", "gpu_suite"):
        _pack(parts / name, fetched)
    (fetched / "stage_seconds.json").write_text('{"sweep": 600, "k_scaling": 160, "suite": 450}')
    (fetched / "sweep_session.log").write_text("### done\n")
    return fetched


def _pack(folder: Path, fetched: Path) -> None:
    """``folder`` as ``fetched/NAME.tgz``, the way h200_wait.sh brings a folder back."""
    with tarfile.open(fetched / f"{folder.name}.tgz", "w:gz") as tar:
        tar.add(folder, arcname=folder.name)


def _root(tmp_path: Path) -> Path:
    """A repository's files that landing reads and writes: the newest sweep and K sweep, the README, the results
    index and paper.md."""
    root = tmp_path / "repo"
    for folder in (SWEEP, K_SWEEP):
        shutil.copytree(folder, root / folder.relative_to(REPO))
    for rel in ("README.md", "docs/paper.md", "docs/results/README.md"):
        shutil.copy2(REPO / rel, root / rel)
    sweep = Path(README_SWEEP)  # what the README's table reads: a bench.json or a folder of them
    (root / sweep).parent.mkdir(parents=True, exist_ok=True)
    (shutil.copytree if (REPO / sweep).is_dir() else shutil.copy2)(REPO / sweep, root / sweep)
    return root


def _block(text: str, name: str) -> str:
    """The generated part of a page, between its BEGIN and END markers."""
    return text[text.index(f"<!-- BEGIN {name}"):text.index(f"<!-- END {name}")]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_session_lands_in_new_run_folders_and_the_pages_read_them(tmp_path, land_sweep, shipped_digests):
    fetched, root = _fetched(tmp_path, shipped_digests), _root(tmp_path)
    results = root / "docs" / "results" / "h200"
    before = _tree(root / "docs" / "results")
    old = land_sweep.land(fetched, root, notebook=False)
    assert [c[:7] for c in old] == [SWEEP.name[-7:], K_SWEEP.name[-7:]]
    # the folders in place are untouched; the new files in run folders named from their own run_info
    assert all(_tree(root / "docs" / "results")[rel] == data for rel, data in before.items() if "README" not in rel)
    sweep, k_sweep = results / "sweeps" / NEW_FOLDER, results / "k_scaling" / NEW_FOLDER
    assert latest("h200", "sweeps", root / "docs/results") == sweep
    assert latest("h200", "k_scaling", root / "docs/results") == k_sweep
    assert json.loads((sweep / "bench.json").read_text())["run_info"]["commit"] == NEW
    assert (k_sweep / "bench.csv").read_text() == "k_scaling csv\n"
    assert json.loads((sweep / "gpu_suite.json").read_text())["commit"] == NEW
    assert (sweep / "bf16_match_rate.json").read_text() == "new bf16_match_rate.json\n"
    assert json.loads((sweep / "stage_seconds.json").read_text())["suite"] == 450
    # regenerated from them: the HTML report; paper.md's table reads the answer-length sweeps, which a K sweep
    # does not change, so its block is regenerated to the same text
    assert (sweep / "report.html").is_file()
    table = [_block((r / "docs" / "paper.md").read_text(), "paper-vs-lab") for r in (REPO, root)]
    assert table[0] == table[1] and "k_scaling" not in table[1]
    headline = [_block((r / "docs/results/README.md").read_text(), "headline") for r in (REPO, root)]
    assert headline[0] != headline[1] and "| chat | 1 |" in headline[1]
    assert f"`h200/sweeps/{NEW_FOLDER}/`" in _block((root / "docs/results/README.md").read_text(), "runs")
    assert (root / "README.md").read_text() == (REPO / "README.md").read_text()  # its JSON did not change
    # the results index's prose still names the old sweep: listed for the author, not rewritten
    assert any(line.startswith("docs/results/README.md:") and K_SWEEP.name[-7:] in line
               for line in land_sweep.stale_prose(root, old))


@pytest.mark.parametrize("change, expected", [
    (dict(suite_commit="e" * 40), "different commits"),
    (dict(device="CPU (x86_64, 2 cores)"), "not an H200"),
    (dict(failures=2), "GPU suite did not pass"),
    (dict(digests={"eagle3": "0" * 16, "peagle": "1" * 16}), "not the shipped heads/eagle3"),
    (dict(commit="d0f394eaa57a0278355f2d29adfbb74d236babb8"), "in place already"),
])
def test_a_session_that_does_not_fit_is_refused_before_anything_moves(tmp_path, land_sweep, shipped_digests,
                                                                       change, expected):
    change = {"digests": shipped_digests, **change}
    fetched, root = _fetched(tmp_path, **change), _root(tmp_path)
    before = _tree(root)
    with pytest.raises(land_sweep.LandError, match=expected):
        land_sweep.land(fetched, root, notebook=False)
    assert _tree(root) == before


def test_missing_or_truncated_parts_are_named(tmp_path, land_sweep, shipped_digests):
    fetched, root = _fetched(tmp_path, shipped_digests), _root(tmp_path)
    (fetched / "gpu_suite.tgz").unlink()
    with pytest.raises(land_sweep.LandError, match="neither gpu_suite/ nor gpu_suite.tgz"):
        land_sweep.land(fetched, root, notebook=False)
    shutil.copytree(tmp_path / "parts" / "gpu_suite", fetched / "gpu_suite")  # an unpacked folder is taken as it is
    (fetched / "gpu_suite" / "gpu_suite.json").write_text('{"commit": "fff')
    with pytest.raises(land_sweep.LandError, match="not JSON .* truncated fetch"):
        land_sweep.land(fetched, root, notebook=False)


def test_an_archive_folder_that_exists_stops_the_landing_with_nothing_moved(tmp_path, land_sweep, shipped_digests):
    fetched, root = _fetched(tmp_path, shipped_digests), _root(tmp_path)
    (root / "docs" / "results" / "h200" / "k_scaling" / NEW_FOLDER).mkdir()
    before = _tree(root)
    with pytest.raises(land_sweep.LandError, match="exists already"):
        land_sweep.land(fetched, root, notebook=False)
    assert _tree(root) == before


def test_a_k_sweep_that_notebook_5_cannot_fit_is_refused_with_the_cell_it_lacks(tmp_path, land_sweep,
                                                                                 shipped_digests):
    fetched, root = _fetched(tmp_path, shipped_digests), _root(tmp_path)
    doc = json.loads((tmp_path / "parts" / "k_scaling" / "bench.json").read_text())
    doc["rows"] = [r for r in doc["rows"] if not (r["workload"] == "code" and r["concurrency"] == 64
                                                  and r["method"] == "peagle" and r["k"] != 3)]
    (tmp_path / "parts" / "k_scaling" / "bench.json").write_text(json.dumps(doc))
    _pack(tmp_path / "parts" / "k_scaling", fetched)
    with pytest.raises(land_sweep.LandError, match="cannot be fitted at code, c = 64"):
        land_sweep.land(fetched, root, notebook=False)


def test_a_bench_file_off_the_schema_is_refused_with_the_field_named(tmp_path, land_sweep, shipped_digests):
    fetched, root = _fetched(tmp_path, shipped_digests), _root(tmp_path)
    doc = json.loads((tmp_path / "parts" / "sweep" / "bench.json").read_text())
    del doc["config"]
    (tmp_path / "parts" / "sweep" / "bench.json").write_text(json.dumps(doc))
    shutil.move(tmp_path / "parts" / "sweep", fetched / "sweep")  # an unpacked folder is taken before sweep.tgz
    with pytest.raises(land_sweep.LandError, match="sweep/bench.json: config"):
        land_sweep.land(fetched, root, notebook=False)


def test_the_checks_after_landing_name_each_failed_test_and_notebook_cell(tmp_path, land_sweep, monkeypatch):
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_reads_sweep.py").write_text("def test_holds():\n    assert True\n\n\n"
                                                        "def test_peak_moved():\n    assert 4 >= 6\n")
    (root / "notebooks").mkdir()
    cell = {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": ["1 / 0"], "outputs": []}
    (root / land_sweep.NOTEBOOK).write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                        "nbformat_minor": 5}))
    monkeypatch.setattr(land_sweep, "SWEEP_TESTS", ("tests/test_reads_sweep.py",))
    failed = land_sweep.check_tests(root)
    assert len(failed) == 2, failed
    assert failed[0].startswith("tests/test_reads_sweep.py::test_peak_moved")
    assert failed[1].startswith(land_sweep.NOTEBOOK)


# ---------------------------------------------------------------- answer-length sessions (issue 49)

def _answer_session(tmp_path: Path, digests: dict, device: str = "NVIDIA H100 80GB HBM3",
                    mt_commit: str = NEW) -> Path:
    """An answer-length session as h200_wait.sh brings it back: answer_length.tgz (code/, mt_bench/), the suite,
    the scale lab, doctor.json and the session's record; the rows are the committed stop-at-EOS K sweep's."""
    parts, fetched = tmp_path / "parts", tmp_path / "fetched"
    fetched.mkdir(parents=True)
    src = json.loads((RESULTS / "answer_length" / "2026-12-01-09fcc9b" / "bench.json").read_text())
    for w, source, commit in (("code", "code", NEW), ("mt_bench", "chat", mt_commit)):
        doc = json.loads(json.dumps(src))
        doc["run_info"].update(commit=commit, device=device, date="2026-12-06T04:20:00+00:00")
        doc["config"].update(head_digests=digests, workloads=[w])
        doc["rows"] = [dict(r, workload=w) for r in doc["rows"] if r["workload"] == source]
        doc["skipped"] = []
        (parts / "answer_length" / w).mkdir(parents=True)
        (parts / "answer_length" / w / "bench.json").write_text(json.dumps(doc))
        (parts / "answer_length" / w / "bench.log").write_text(f"{w} log\n")
    (parts / "gpu_suite").mkdir()
    (parts / "gpu_suite" / "gpu_suite.json").write_text(json.dumps(
        {"device": device, "commit": NEW, "exit_code": 0, "tests": 92, "failures": 0, "errors": 0, "skipped": 0,
         "passed": 92}))
    (parts / "scale_lab").mkdir()
    (parts / "scale_lab" / "scale.json").write_text("{}")
    for name in ("answer_length", "gpu_suite", "scale_lab"):
        _pack(parts / name, fetched)
    (fetched / "stage_seconds.json").write_text('{"answer_code": 250}')
    (fetched / "sweep_session.log").write_text("### done\n")
    (fetched / "doctor.json").write_text('{"ok": true}')
    return fetched


def test_an_answer_length_session_lands_beside_the_sweeps_with_its_goals(tmp_path, land_sweep, shipped_digests):
    fetched, root = _answer_session(tmp_path, shipped_digests), tmp_path / "repo"
    (root / "docs" / "results").mkdir(parents=True)
    assert land_sweep.main([str(fetched), "--root", str(root)]) == 0  # an H100 is fine
    dest = root / "docs" / "results" / "h100" / "answer_length" / f"2026-12-06-{NEW[:7]}"
    assert (dest / "code" / "bench.log").read_text() == "code log\n" and (dest / "mt_bench" / "bench.json").is_file()
    assert {p.name for p in dest.iterdir()} >= {"stage_seconds.json", "sweep_session.log", "doctor.json", "summary.json",
                                                "bench.json"}
    merged = json.loads((dest / "bench.json").read_text())  # both workloads' rows in one bench file
    assert {r["workload"] for r in merged["rows"]} == {"code", "mt_bench"} and merged["run_info"]["commit"] == NEW
    assert json.loads((root / "docs/results/h100/gpu_suite" / dest.name / "gpu_suite.json").read_text())["passed"] == 92
    assert (root / "docs/results/h100/scale" / dest.name / "scale.json").read_text() == "{}"
    summary = json.loads((dest / "summary.json").read_text())
    code1 = next(c for c in summary["columns"] if (c["workload"], c["c"]) == ("code", 1))
    assert code1["best"]["peagle"]["k"] == 7 and code1["p_over_e3"] == pytest.approx(1808.8 / 1380.8, abs=1e-3)
    goals = {g["goal"]: g["status"] for g in summary["goals"]}
    assert goals["P-EAGLE/EAGLE-3 >= 1.3x, code, c = 1"] == "PASS"
    assert goals["eagle3 best K <= 4, code, c = 1"] == "PASS" and len(goals) == 7
    assert land_sweep.main([str(fetched), "--root", str(root)]) == 2  # the same session twice: refused


@pytest.mark.parametrize("change, expected", [
    (dict(device="CPU (x86_64, 2 cores)"), "not an H100 or H200"),
    (dict(mt_commit="e" * 40), "different commits"),
    (dict(digests={"eagle3": "0" * 16, "peagle": "1" * 16}), "not the shipped ones"),
])
def test_an_answer_length_session_that_does_not_fit_is_refused(tmp_path, land_sweep, shipped_digests, change,
                                                               expected):
    fetched, root = _answer_session(tmp_path, **{"digests": shipped_digests, **change}), tmp_path / "repo"
    (root / "docs" / "results").mkdir(parents=True)
    with pytest.raises(land_sweep.LandError, match=expected):
        land_sweep.land_answer_length(fetched, root)
    assert not any(p.is_file() for p in root.rglob("*"))
