"""Land the folders a GPU benchmark session brought back into new run folders of ``docs/results/<device>/``.

``FETCHED`` is the folder ``scripts/gpu/h200_wait.sh`` fetched into (each of the session's folders as ``NAME/`` or
``NAME.tgz``). Two kinds of session land here, told apart by what ``FETCHED`` holds; each is checked before anything
is copied, and nothing in place moves (each topic's current result is its newest folder, ``archive.latest``).

**An answer-length session**, ``scripts/gpu/sweep_session_h200.sh``'s (``answer_length`` with ``code/`` and
``mt_bench/``; ``scale_lab``, ``gpu_suite`` and ``doctor.json`` where those stages ran; ``stage_seconds.json`` and
``sweep_session.log``), from an H100 or an H200:

1. check: each bench file passes the schema, both come from one commit and one device, an H100 or H200 (unless
   ``--any-device``), and they measured the shipped heads (by digest);
2. copy ``answer_length`` into ``<device>/answer_length/DATE-COMMIT/`` with the session's record and
   ``doctor.json``, the suite into ``<device>/gpu_suite/DATE-COMMIT/`` and the scale lab into
   ``<device>/scale/DATE-COMMIT/``;
3. write both workloads' rows as one ``bench.json`` beside them and ``summary.json``: each method at its best K per
   (workload, c) and the goals (P-EAGLE / EAGLE-3 throughput ratios, each method's best K) as PASS / MISS / n/a
   (``peagle_lab.bench.answer_length``), printed with the suite's counts. No page is regenerated.

**A full sweep and a K sweep** (parts ``sweep``: ``scripts/gpu/bench_h200.sh``'s throughput sweep, ``k_scaling``:
a K sweep, ``gpu_suite``; with the session's ``stage_seconds.json`` and ``sweep_session.log`` where present), from an
H200, in six steps:

1. check: both bench files pass the schema, all three parts come from one commit, the heads the sweeps measured
   are the shipped ones (by digest), the K sweep has the cells the K model's tests fit, the suite passed, and
   (unless ``--any-device``) it ran on an H200;
2. name the new run folders from the parts' own ``run_info`` (``peagle_lab.bench.archive``): the sweep with its
   suite and the session's record in ``h200/sweeps/DATE-COMMIT/``, the K sweep in ``h200/k_scaling/DATE-COMMIT/``;
3. copy the new files into them;
4. regenerate what reads them: the HTML report, the results index's K-scaling table and its tables of runs,
   ``docs/paper.md``'s and the README's paper-beside-lab tables (both read ``lab.paper.README_SWEEP`` and the newest
   continuous answer-length sweep, so a K sweep leaves them as they are), and
   notebook 5 (executed in place, then its PNG copies); ``--no-notebook`` leaves the notebook alone;
5. run the tests that read the committed sweeps (the K model's fit against the measured peaks, the figures, the
   tables) and notebook 5 under nbval, on the new files; a failure there is a finding about the new sweep, to
   write up or fix, so the script says which failed and exits 1 with everything landed (``--no-checks`` skips it);
6. list the prose that still names the old commits: that part is the author's.

Usage (repository root, after the fetch):
    .venv/bin/python scripts/dev/land_sweep.py FETCHED_DIR [--root REPO] [--any-device] [--no-notebook] [--no-checks]
    .venv/bin/python scripts/dev/land_sweep.py --regenerate-only     # a sweep's steps 4 and 5 again, in place
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from peagle_lab.bench.archive import folder_name, latest

REPO = Path(__file__).resolve().parents[2]
PARTS = ("sweep", "k_scaling", "gpu_suite")
SWEEP_FILES = ("bench.json", "bench.csv", "bench.log", "report.html")
SESSION_FILES = ("stage_seconds.json", "sweep_session.log")  # beside the parts, not in one
SUITE_FILES = ("gpu_suite.json", "gpu_junit.xml", "gpu_tests.log", "bf16_match_rate.json")
K_FILES = ("bench.json", "bench.csv", "bench.log")
NOTEBOOK = "notebooks/05_live_throughput.ipynb"
# the tests that read docs/results/h200's bench files, and notebook 5, which reads both (step 5)
SWEEP_TESTS = ("tests/test_lab_kmodel.py", "tests/test_figures.py", "tests/test_bench_report.py",
               "tests/test_lab_paper.py", "tests/test_lab_mechanics.py", "tests/test_train_walkthrough.py")
PROSE = ("README.md", "docs/concepts.md", "docs/paper.md", "docs/results/README.md", "docs/workshop.md", NOTEBOOK)


class LandError(Exception):
    """The fetched files cannot be landed as they are; the message says which and why."""


def unpack(fetched: Path, work: Path) -> dict[str, Path]:
    """Each part's folder: ``fetched/NAME/`` as it is, or ``fetched/NAME.tgz`` unpacked into ``work``."""
    found = {}
    for name in PARTS:
        if (fetched / name).is_dir():
            found[name] = fetched / name
        elif (fetched / f"{name}.tgz").is_file():
            with tarfile.open(fetched / f"{name}.tgz") as tar:
                tar.extractall(work, filter="data")
            found[name] = work / name
            if not found[name].is_dir():
                raise LandError(f"{fetched / f'{name}.tgz'} holds no folder {name}/")
        else:
            raise LandError(f"{fetched}: neither {name}/ nor {name}.tgz (expected the three parts {', '.join(PARTS)})")
    return found


def _load(path: Path) -> dict:
    """A result file's JSON document; LandError when it is missing or cut short."""
    if not path.is_file():
        raise LandError(f"{path} is missing")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LandError(f"{path} is not JSON ({e}): a truncated fetch?") from e


def _run_info(doc: dict) -> dict:
    """The provenance of a result document (a bench document's ``run_info``, or the suite summary itself)."""
    return doc.get("run_info", doc)


def check(parts: dict[str, Path], any_device: bool = False) -> str:
    """Raise LandError unless the three parts belong together and are fit to ship; return their commit."""
    from peagle_lab.bench.schema import validate_result
    from peagle_lab.heads import bundled_head_dir
    from peagle_lab.heads.io import head_digest

    docs = {name: _load(parts[name] / ("gpu_suite.json" if name == "gpu_suite" else "bench.json")) for name in PARTS}
    commits = {name: _run_info(doc).get("commit") for name, doc in docs.items()}
    if len(set(commits.values())) != 1 or None in commits.values():
        raise LandError(f"the parts come from different commits: {commits}")
    shipped = {m: head_digest(d) for m in ("eagle3", "peagle") if (d := bundled_head_dir(m)) is not None}
    for name in ("sweep", "k_scaling"):
        doc = docs[name]
        try:
            validate_result(doc)
        except ValueError as e:
            raise LandError(f"{parts[name] / 'bench.json'}: {e}") from e
        device = doc["run_info"].get("device", "?")
        if not any_device and "H200" not in device:
            raise LandError(f"{name} ran on {device!r}, not an H200 (--any-device lands it anyway, for a rehearsal)")
        digests = doc.get("config", {}).get("head_digests") or {}
        for method, digest in shipped.items():
            if digests.get(method) != digest:
                raise LandError(f"{name} measured a {method} head with digest {digests.get(method)!r}, not the "
                                f"shipped heads/{method} ({digest}): land it by hand if that is meant")
    _check_k_fits(docs["k_scaling"])
    suite = docs["gpu_suite"]
    if suite.get("exit_code") != 0 or suite.get("failures") or suite.get("errors"):
        raise LandError(f"the GPU suite did not pass: exit {suite.get('exit_code')}, {suite.get('failures')} failed, "
                        f"{suite.get('errors')} errors (see its gpu_tests.log)")
    if not any_device and not suite.get("passed"):
        raise LandError(f"the GPU suite ran no test ({suite.get('skipped')} skipped): no CUDA where it ran?")
    return next(iter(commits.values()))


def _check_k_fits(k_sweep: dict) -> None:
    """``tests/test_lab_kmodel.py`` fits the K model to the K sweep at c = 1 and 64 on chat and code: each fit needs
    two K values per method. (Notebook 5 fits its model to the answer-length sweep, ``predict.answer_sweep``; of
    the K sweep it prints the settings and headline, as the fixed-length throughput-stress variant.)"""
    import statistics

    from peagle_lab.lab.kmodel import fit_k_model

    for workload in ("chat", "code"):
        for c in (1, 64):
            try:
                fit_k_model(k_sweep, workload, c)
            except (ValueError, statistics.StatisticsError) as e:
                skipped = len(k_sweep.get("skipped") or [])
                raise LandError(f"the K sweep cannot be fitted at {workload}, c = {c} ({e}; {skipped} cells were "
                                "skipped): the K model's tests (tests/test_lab_kmodel.py) would fail on it") from e


def _folder(results: Path, topic: str, doc: dict) -> Path:
    """``results/TOPIC/DATE-COMMIT/`` for a part, named from its own run_info."""
    try:
        return results / topic / folder_name(_run_info(doc))
    except ValueError as e:
        raise LandError(str(e)) from e


def place(parts: dict[str, Path], fetched: Path, results: Path) -> list[Path]:
    """Copy the sweep (with the suite's and the session's files) into ``results/sweeps/DATE-COMMIT/`` and the K sweep
    into ``results/k_scaling/DATE-COMMIT/``; LandError, with nothing copied, when either folder exists."""
    plan = [(parts["sweep"], SWEEP_FILES, _folder(results, "sweeps", _load(parts["sweep"] / "bench.json"))),
            (parts["k_scaling"], K_FILES, _folder(results, "k_scaling", _load(parts["k_scaling"] / "bench.json")))]
    plan[1:1] = [(parts["gpu_suite"], SUITE_FILES, plan[0][2]), (fetched, SESSION_FILES, plan[0][2])]
    for dest in {d for _, _, d in plan}:
        if dest.exists():
            raise LandError(f"{dest} exists already: was this session landed before? (nothing was copied)")
    placed = []
    for src_dir, names, dest in plan:
        dest.mkdir(parents=True, exist_ok=True)
        placed += [Path(shutil.copy2(src_dir / n, dest / n)) for n in names if (src_dir / n).is_file()]
    return placed


def _run_with_retry(cmd: list[str], cwd: Path, env: dict, limit_s: float = 300) -> subprocess.CompletedProcess:
    """Run ``cmd``, once more if it outlives ``limit_s``: on two cores nbconvert at times sits for many minutes
    waiting on an idle kernel of notebook 5, a step that otherwise takes about 30 s, and a second run finishes."""
    for attempt in (1, 2):
        try:
            return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=limit_s)
        except subprocess.TimeoutExpired:
            print(f"[ran past {limit_s:.0f} s{', again' if attempt == 2 else '; once more'}]", end=" ", flush=True)
    raise LandError(f"{' '.join(cmd)} ran past {limit_s:.0f} s twice; the files are in place: rerun with "
                    "--regenerate-only")


def regenerate(root: Path, notebook: bool = True) -> None:
    """Rebuild every page and figure that reads the two bench files, in ``root``."""
    py, results = sys.executable, root / "docs" / "results"
    sweep, k_sweep = (str(latest("h200", t, results).relative_to(root) / "bench.json") for t in ("sweeps", "k_scaling"))
    steps = [[py, "-m", "peagle_lab.bench.report", sweep],
             [py, "-m", "peagle_lab.bench.report", k_sweep, "--readme", "docs/results/README.md"],
             [py, "-m", "peagle_lab.bench.archive", "--readme", "docs/results/README.md", "--results", "docs/results"],
             [py, "-m", "peagle_lab.lab.paper", "docs/paper.md"],  # the answer-length sweeps, as the README
             [py, "-m", "peagle_lab.lab.paper", "--readme", "README.md"]]
    if notebook:
        steps += [[py, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                   "--ExecutePreprocessor.timeout=240", NOTEBOOK],
                  [py, "scripts/dev/notebook_pngs.py", "--force", NOTEBOOK]]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as CI's notebook stage runs
    for cmd in steps:
        print("$", " ".join(cmd[1:] if cmd[0] == py else cmd), end=" ", flush=True)
        t = time.monotonic()
        done = _run_with_retry(cmd, root, env)
        print(f"({time.monotonic() - t:.0f} s)", flush=True)
        if done.returncode:
            raise LandError(f"{' '.join(cmd)} failed (exit {done.returncode}); the files are in place, so fix it and "
                            "rerun with --regenerate-only (or undo all with git checkout and git clean on docs/, "
                            f"README.md and notebooks/):\n{done.stderr[-2000:]}")


def check_tests(root: Path) -> list[str]:
    """Step 5: the tests and the notebook that read the sweeps, on the files now in place; the ids that failed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    failed = []
    for args in ([*SWEEP_TESTS], ["--nbval-lax", NOTEBOOK]):
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *args]
        print("$", " ".join(cmd[1:]), end=" ", flush=True)
        t = time.monotonic()
        done = _run_with_retry(cmd, root, env, limit_s=900)
        print(f"({time.monotonic() - t:.0f} s, exit {done.returncode})", flush=True)
        failed += [line[len("FAILED "):] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
        if done.returncode not in (0, 1):  # 1: tests failed (listed); anything else: pytest could not run them
            failed.append(f"pytest {' '.join(args)} exited {done.returncode}: {done.stdout[-500:]}{done.stderr[-500:]}")
    return failed


def stale_prose(root: Path, commits: list[str]) -> list[str]:
    """``file:line: text`` for each line of the user-facing pages that names one of ``commits`` (short forms)."""
    pattern = re.compile("|".join(re.escape(c[:7]) for c in commits))
    hits = []
    for rel in PROSE:
        path = root / rel
        if path.is_file():
            hits += [f"{rel}:{i}: {line.strip()[:140]}" for i, line in enumerate(path.read_text().splitlines(), 1)
                     if pattern.search(line)]
    return hits


def land(fetched: Path, root: Path, any_device: bool = False, notebook: bool = True) -> list[str]:
    """Steps 1-4 into ``root``; return the commits of the sweeps that were newest before (step 6 greps the prose
    for them)."""
    results = root / "docs" / "results" / "h200"
    old = [_run_info(_load(latest("h200", t, results.parent) / "bench.json")).get("commit", "")
           for t in ("sweeps", "k_scaling")]
    with tempfile.TemporaryDirectory() as work:
        parts = unpack(fetched, Path(work))
        commit = check(parts, any_device)
        if commit in old:
            raise LandError(f"commit {commit[:7]} is in place already (nothing was moved)")
        placed = place(parts, fetched, results)
    print(f"placed {len(placed)} files from commit {commit[:7]} in "
          f"{sorted({str(p.parent.relative_to(root)) for p in placed})}")
    regenerate(root, notebook)
    return old


def device_dir(device: str) -> str:
    """The results folder a device's files go to: its GPU model, or ``cpu``.

    >>> device_dir("NVIDIA H100 80GB HBM3"), device_dir("NVIDIA H200"), device_dir("CPU (x86_64, 2 cores)")
    ('h100', 'h200', 'cpu')
    """
    found = re.search(r"\b([ABH]\d{2,3})\b", device.upper())
    return found.group(1).lower() if found else "cpu" if "CPU" in device.upper() else re.sub(r"\W+", "_", device).lower()


def _optional_part(fetched: Path, work: Path, name: str) -> Path | None:
    """``fetched/NAME/`` or ``NAME.tgz`` unpacked into ``work``; None when the session did not bring it."""
    if (fetched / name).is_dir():
        return fetched / name
    if (fetched / f"{name}.tgz").is_file():
        with tarfile.open(fetched / f"{name}.tgz") as tar:
            tar.extractall(work, filter="data")
        return work / name if (work / name).is_dir() else None
    return None


def check_answer_length(folder: Path, any_device: bool = False) -> tuple[str, str, str]:
    """Raise LandError unless the answer-length bench files fit; return (commit, date, device)."""
    from peagle_lab.bench.answer_length import WORKLOADS
    from peagle_lab.bench.schema import validate_result
    from peagle_lab.heads import bundled_head_dir
    from peagle_lab.heads.io import head_digest

    docs = {w: _load(folder / w / "bench.json") for w in WORKLOADS if (folder / w / "bench.json").is_file()}
    if not docs:
        raise LandError(f"{folder}: no {' or '.join(f'{w}/bench.json' for w in WORKLOADS)}")
    shipped = {m: head_digest(d) for m in ("eagle3", "peagle") if (d := bundled_head_dir(m)) is not None}
    for w, doc in docs.items():
        try:
            validate_result(doc)
        except ValueError as e:
            raise LandError(f"{folder / w / 'bench.json'}: {e}") from e
        device = doc["run_info"].get("device", "?")
        if not any_device and device_dir(device) not in ("h100", "h200"):
            raise LandError(f"{w} ran on {device!r}, not an H100 or H200 (--any-device lands it anyway, for a rehearsal)")
        digests = doc.get("config", {}).get("head_digests") or {}
        if any(digests.get(m) != d for m, d in shipped.items()):
            raise LandError(f"{w} measured heads {digests}, not the shipped ones {shipped}: land it by hand if meant")
    infos = [d["run_info"] for d in docs.values()]
    if len({(i.get("commit"), i.get("device")) for i in infos}) != 1 or infos[0].get("commit") is None:
        raise LandError(f"the answer-length files come from different commits or devices: "
                        f"{ {w: (d['run_info'].get('commit'), d['run_info'].get('device')) for w, d in docs.items()} }")
    return infos[0]["commit"], infos[0].get("date", "????-??-??")[:10], infos[0]["device"]


def land_answer_length(fetched: Path, root: Path, any_device: bool = False) -> Path:
    """Check, then copy an answer-length session under ``docs/results/<device>/``; return its folder."""
    from peagle_lab.bench.answer_length import load_folder, merge, render, summarize
    from peagle_lab.bench.schema import write_json

    with tempfile.TemporaryDirectory() as work:
        answers = _optional_part(fetched, Path(work), "answer_length")
        if answers is None:
            raise LandError(f"{fetched}: neither answer_length/ nor answer_length.tgz")
        commit, date, device = check_answer_length(answers, any_device)
        results = root / "docs" / "results" / device_dir(device)
        name = f"{date}-{commit[:7]}"
        dest = results / "answer_length" / name
        if dest.exists():
            raise LandError(f"{dest} exists already (nothing was moved)")
        shutil.copytree(answers, dest)
        for n in SESSION_FILES + ("doctor.json",):
            if (fetched / n).is_file():
                shutil.copy2(fetched / n, dest / n)
        for part, target in (("gpu_suite", results / "gpu_suite" / name), ("scale_lab", results / "scale" / name)):
            if (src := _optional_part(fetched, Path(work), part)) is not None:
                shutil.copytree(src, target, dirs_exist_ok=True)
                print(f"placed {part} in {target.relative_to(root)}")
    by_workload = load_folder(dest)
    write_json(merge(by_workload), dest / "bench.json")  # both workloads in one file, for tables and notebooks
    summary = summarize(by_workload)
    (dest / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"placed the answer-length session from {device}, commit {commit[:7]}, in {dest.relative_to(root)}")
    print(render(summary))
    suite = results / "gpu_suite" / name / "gpu_suite.json"
    if suite.is_file():
        s = json.loads(suite.read_text())
        print(f"GPU suite: exit {s.get('exit_code')}, {s.get('passed')} passed, {s.get('failures')} failed, "
              f"{s.get('errors')} errors, {s.get('skipped')} skipped")
    else:
        print("GPU suite: not in this session (skipped for time, or cut before its summary)")
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("fetched", type=Path, nargs="?",
                   help="the fetched folder: answer_length(.tgz) [scale_lab, gpu_suite, doctor.json], or "
                        "sweep(.tgz), k_scaling(.tgz) and gpu_suite(.tgz)")
    p.add_argument("--root", type=Path, default=REPO, help="the repository to land into (default: this one)")
    p.add_argument("--any-device", action="store_true", help="land results from any device (a CPU rehearsal)")
    p.add_argument("--no-notebook", action="store_true", help="leave notebook 5 alone (it takes a minute or two)")
    p.add_argument("--no-checks", action="store_true", help="skip step 5 (the tests that read the sweeps, ~1 min)")
    p.add_argument("--regenerate-only", action="store_true",
                   help="only steps 4 and 5, on the files in place (once a failed regeneration step is fixed)")
    args = p.parse_args(argv)
    if args.fetched is None and not args.regenerate_only:
        p.error("FETCHED is needed (or --regenerate-only)")
    if args.fetched is not None and any((args.fetched / n).exists() for n in ("answer_length", "answer_length.tgz")):
        try:
            land_answer_length(args.fetched, args.root, args.any_device)
        except LandError as e:
            print(f"land_sweep: {e}", file=sys.stderr)
            return 2
        return 0
    try:
        if args.regenerate_only:
            regenerate(args.root, notebook=not args.no_notebook)
        else:
            old = land(args.fetched, args.root, args.any_device, notebook=not args.no_notebook)
    except LandError as e:
        print(f"land_sweep: {e}", file=sys.stderr)
        return 2
    failed = [] if args.no_checks else check_tests(args.root)
    if not args.regenerate_only:
        stale = stale_prose(args.root, old)
        print(f"prose that still names the old sweeps ({', '.join(c[:7] for c in old)}): {len(stale)} lines")
        print("\n".join(stale))
    if failed:
        print(f"landed, but {len(failed)} checks on the new sweep fail (findings about it, or tests to update):",
              *failed, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
