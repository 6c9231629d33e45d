"""The results archive and its index (docs/results/README.md): the tables of runs regenerate byte for byte from the
run folders, every GPU run sits in ``<device>/<topic>/<date>-<commit>/`` with a run_info of that commit, ``latest``
picks the newest run, the heads table equals the training evaluations it names, and the page's links resolve."""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from peagle_lab.bench import archive
from peagle_lab.bench.archive import FOLDER, RESULTS, latest, run_folders

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs/results/README.md"
TRAINING = RESULTS / "h200/training"
# run folders whose JSON names no commit and date (peagle-lab doctor --json writes none): the folder name gives them
NAME_ONLY = {"h100/doctor/2026-12-06-b6ffca4"}
# the heads table's rows, in order: (file, head name in that file's "heads")
HEAD_ROWS = (("2026-12-04-85d480f/results.json", "eagle3-1l-top1-weight-0.5"),
             ("2026-12-04-6249d56/results.json", "eagle3-1l"), ("2026-12-04-6249d56/results.json", "eagle3-1l-shipped"),
             ("2026-12-04-6249d56/results.json", "peagle-4l"), ("2026-12-04-6249d56/results.json", "peagle-4l-shipped"))


def test_the_tables_of_runs_regenerate_byte_for_byte_from_the_run_folders():
    """Stale? Run `python -m peagle_lab.bench.archive --readme docs/results/README.md` and commit the page."""
    page = INDEX.read_text()
    assert archive.render(page) == page
    assert page.count(archive.BEGIN) == 1 and page.count(archive.END) == 1


def _topic_dirs():
    return [t for d in archive.DEVICES for t in sorted((RESULTS / d).iterdir())]


def test_every_gpu_run_is_a_dated_folder_with_the_run_info_of_its_commit():
    assert len(_topic_dirs()) >= 20
    for topic in _topic_dirs():
        assert topic.is_dir(), f"{topic}: a loose file where a topic folder belongs"
        for entry in topic.iterdir():
            assert not entry.is_file(), f"{entry}: a loose file where run folders belong"
            assert FOLDER.match(entry.name), f"{entry}: not a <YYYY-MM-DD>-<commit> run folder"
    for run in run_folders():
        rel = run.path.relative_to(RESULTS).as_posix()
        assert bool(run.source) == (rel not in NAME_ONLY), f"{rel}: no JSON names its commit and date"
        assert str(run.run_info["commit"]).startswith(run.commit), (rel, run.run_info["commit"])
        assert run.topic in archive.TOPICS, f"{rel}: topic {run.topic!r} has no line in archive.TOPICS"


def test_the_gpu_device_folders_hold_no_loose_files():
    for device in archive.DEVICES:
        assert not [p.name for p in (RESULTS / device).iterdir() if p.is_file()], device


def test_latest_is_the_newest_run_by_its_run_info_date_then_name(tmp_path):
    def run(name: str, date: str) -> None:
        (tmp_path / "h200/k_scaling" / name).mkdir(parents=True)
        (tmp_path / "h200/k_scaling" / name / "bench.json").write_text(
            json.dumps({"run_info": {"commit": name[11:] + "0" * 33, "date": date, "device": "NVIDIA H200"}}))

    run("2026-12-04-6249d56", "2026-12-04T04:25:34+00:00")
    run("2026-12-01-09fcc9b", "2026-12-01T20:55:57+00:00")
    assert latest("h200", "k_scaling", tmp_path).name == "2026-12-04-6249d56"
    run("2026-12-04-0aaaaaa", "2026-12-04T20:00:00+00:00")  # later that day, though its name sorts first
    assert latest("h200", "k_scaling", tmp_path).name == "2026-12-04-0aaaaaa"
    run("2026-12-04-fbbbbbb", "2026-12-04T20:00:00+00:00")  # the same second: the name decides
    assert latest("h200", "k_scaling", tmp_path).name == "2026-12-04-fbbbbbb"
    (tmp_path / "h200/k_scaling/notes").mkdir()  # not a run folder: ignored
    assert [r.name for r in run_folders("h200", "k_scaling", tmp_path)][-1] == "2026-12-04-fbbbbbb"


def test_latest_in_the_tree_reads_the_folders_the_pages_quote():
    assert latest("h200", "k_scaling").name >= "2026-12-04-6249d56"
    assert (latest("h200", "sweeps") / "bench.json").is_file()
    assert (latest("h200", "gpu_suite") / "gpu_suite.json").is_file()


def test_an_unknown_topic_or_device_is_named_with_the_topics_there():
    with pytest.raises(ValueError, match=r"topic 'k_scailing' on device 'h200'.*topics there: answer_length"):
        latest("h200", "k_scailing")
    with pytest.raises(ValueError, match=r"device 'b200'.*topics there: none"):
        latest("b200", "k_scaling")


def test_a_folder_without_run_info_or_dated_name_is_refused(tmp_path):
    (tmp_path / "h200/soak/2026-12-01-abc1234").mkdir(parents=True)
    (tmp_path / "h200/soak/2026-12-01-abc1234/soak.log").write_text("log only\n")
    (run,) = run_folders("h200", "soak", tmp_path)
    assert (run.source, run.date, run.commit) == ("", "2026-12-01", "abc1234")
    with pytest.raises(ValueError, match="no JSON with a run_info"):
        archive.read_run_info(tmp_path / "h200/soak")


def test_run_folders_parse_again_only_what_changed(tmp_path, monkeypatch):
    """The run_info cache: a new run folder is found after a first call, a settled folder is not parsed twice, a
    rewritten JSON is, and a caller editing a run_info edits its own copy."""
    def run(name: str, date: str, settled: bool = True) -> Path:
        (tmp_path / "h200/soak" / name).mkdir(parents=True, exist_ok=True)
        path = tmp_path / "h200/soak" / name / "soak.json"
        path.write_text(json.dumps({"run_info": {"commit": name[11:] + "0" * 33, "date": date}}))
        if settled:  # written a minute ago: older than archive.SETTLED_NS
            os.utime(path, (time.time() - 60, time.time() - 60))
        return path

    first = run("2026-12-01-abc1234", "2026-12-01T10:00:00")
    assert [r.ran for r in run_folders("h200", "soak", tmp_path)] == ["2026-12-01T10:00:00"]
    parsed = []
    load = archive._load
    monkeypatch.setattr(archive, "_load", lambda p: parsed.append(p.parent.name) or load(p))
    run("2026-12-02-def5678", "2026-12-02T10:00:00")
    assert [r.name for r in run_folders("h200", "soak", tmp_path)] == ["2026-12-01-abc1234", "2026-12-02-def5678"]
    assert parsed == ["2026-12-02-def5678"]  # the settled folder came from the cache
    run_folders("h200", "soak", tmp_path)[0].run_info["date"] = "edited by a caller"
    assert run_folders("h200", "soak", tmp_path)[0].ran == "2026-12-01T10:00:00"
    assert parsed == ["2026-12-02-def5678"]  # three calls, each folder parsed once
    run("2026-12-01-abc1234", "2026-12-03T10:00:00", settled=False)  # rewritten in place, now
    assert latest("h200", "soak", tmp_path) == first.parent
    assert [r.ran for r in run_folders("h200", "soak", tmp_path)] == ["2026-12-02T10:00:00", "2026-12-03T10:00:00"]
    assert parsed.count("2026-12-01-abc1234") == 2  # younger than SETTLED_NS: not kept, parsed on each call


def test_a_new_run_folder_lands_in_the_index(tmp_path):
    shutil.copytree(latest("h200", "gpu_suite"), tmp_path / "h200/gpu_suite/2026-12-09-fffffff")
    suite = tmp_path / "h200/gpu_suite/2026-12-09-fffffff/gpu_suite.json"
    suite.write_text(json.dumps({**json.loads(suite.read_text()), "commit": "f" * 40, "date": "2026-12-09T10:00:00"}))
    block = archive.index(tmp_path)
    assert "| `gpu_suite` |" in block and "| 1 | `2026-12-09-fffffff/` |" in block
    assert "| `h200/gpu_suite/2026-12-09-fffffff/` | 2026-12-09 10:00 | fffffff |" in block
    with pytest.raises(ValueError, match="markers"):
        archive.render("# a page without the markers\n", tmp_path)


def _table_after(heading: str) -> list[list[str]]:
    """The cells of the first table under ``heading`` (header and rule left out)."""
    text = INDEX.read_text()
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def test_the_heads_table_reads_what_the_evaluations_hold():
    rows = _table_after("### The heads:")
    assert len(rows) == len(HEAD_ROWS)
    for cells, (name, head) in zip(rows, HEAD_ROWS):
        h = json.loads((TRAINING / name).read_text())["heads"][head]
        al = [h["acceptance"][str(k)]["AL"] for k in (3, 7)]
        al += [h["workloads"][w][str(k)]["AL"] for w in ("chat", "code") for k in (3, 7)]
        assert cells[4:10] == [f"{v:.2f}" for v in al], (name, head)
        assert cells[2] == f"{h['draft_vocab_size']:,}" and cells[3] == f"{h['cumulative_tokens'] / 1e6:.0f} M"
        assert ("**ships**" in cells[0]) == (head in ("eagle3-1l-top1-weight-0.5", "peagle-4l"))


@pytest.mark.parametrize("page", [INDEX, ROOT / "docs/results/history.md"], ids=lambda p: p.name)
def test_every_path_the_pages_name_exists(page):
    """Links, and the `h200/…` / `docs/results/…` paths written in backticks (globs and DATE-COMMIT left out)."""
    text = page.read_text()
    for link in set(re.findall(r"\]\(([^)#\s]+)", text)):
        assert re.match(r"[a-z]+:", link) or (page.parent / link).exists(), link
    for path in set(re.findall(r"`((?:docs/results/)?(?:h100|h200|cpu)/[^`*\s]+)`", text)):
        if "DATE" in path:
            continue
        rel = path.removeprefix("docs/results/")
        assert (RESULTS / rel).exists() or (RESULTS / "h200" / rel).exists(), f"{page.name}: {path}"



# topics the index describes as a kind, not folder by folder: the GPU suite (its subsection names the files every run
# holds); and the K sweeps, which history.md's "The K sweeps on the H200, folder by folder" names one by one
AS_A_KIND = {"gpu_suite"}
NAMED_IN_HISTORY = {"k_scaling"}


def unnamed_runs(index_text: str, history_text: str) -> list[str]:
    """The run folders (relative to docs/results/) whose ``DATE-COMMIT/`` name no hand-written line mentions."""
    hand = index_text.split(archive.BEGIN)[0]  # the generated tables list every folder; they do not count
    return [run.path.relative_to(RESULTS).as_posix() for run in run_folders() if run.topic not in AS_A_KIND
            and f"{run.path.name}/" not in (history_text if run.topic in NAMED_IN_HISTORY else hand)]


def test_every_run_folder_is_described_by_name():
    """A run landed without a line saying what it holds is caught: each run folder's name appears in the index's
    hand-written part (above the generated tables), or for a K sweep in the history's folder-by-folder table."""
    missing = unnamed_runs(INDEX.read_text(), (ROOT / "docs/results/history.md").read_text())
    assert not missing, f"say what these run folders hold in docs/results/README.md's topic rows: {missing}"
