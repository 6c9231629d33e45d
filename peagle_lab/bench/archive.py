"""The results archive: one folder a run, ``docs/results/<device>/<topic>/<date>-<commit>/``, and its index.

A run folder holds what one command wrote (a JSON whose ``run_info`` names the device, the versions, the
command, the commit and the date, and its CSV, log or HTML beside it; runs made side by side in the same
session sit in sub-folders). The current result of a topic is its newest folder (``latest``); nothing keeps a
"latest" copy by hand. ``docs/results/README.md``'s tables of runs are generated from the folders::

    python -m peagle_lab.bench.archive --readme docs/results/README.md

and ``tests/test_results_index.py`` fails while the page is stale.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

RESULTS_DIR = "docs/results"  # the archive, relative to the repository root
RESULTS = Path(__file__).resolve().parents[2] / RESULTS_DIR
FOLDER = re.compile(r"^(\d{4}-\d{2}-\d{2})-([0-9a-f]{7,40})$")  # <date>-<commit>
DEVICES = ("h100", "h200")  # device folders laid out in run folders (cpu/ is listed file by file)
# cpu/ files rewritten in place by a command whose own staleness test checks the pages that quote them
REGENERATED = ("cpu/kernels_aot.json", "cpu/notebook_times.json")
# what each topic measures, one line (the runs' commands and settings are in their JSON)
TOPICS = {
    "answer_length": "answers decoded to their end-of-sequence token, each method at its best K (the README's table)",
    "baseline_depth": "an EAGLE-3 head with a 3-step training-time test beside the shipped heads (acceptance by "
                      "position); HumanEval answers at c = 64 batched continuously; the stream decoder's two paths",
    "cod_cost": "the cost of training every P-EAGLE depth (COD r = 1.0 against 0.7): step time and peak memory, "
                "random target weights",
    "compact_rows": "c = 64 cells with finished rows kept to the end of a static batch (`--no-compact-rows`)",
    "compile_edges": "c = 1 and 64 cells with the work around the decoder layers eager (`--no-compile-edges`)",
    "continuous_batching": "static batches against continuous batching (admission every few steps)",
    "decode_attention": "the split-KV decode-attention kernel against SDPA, the call alone and in engine steps",
    "doctor": "`peagle-lab doctor --json`: versions, GPUs, engine paths, model and heads",
    "engine_ab": "an engine change where a server runs it: answers to EOS at c = 64 batched continuously "
                 "(`scripts/gpu/engine_ab_session.sh`), and the engine's GPU tests at the same commit",
    "first_draft": "the first draft after prefill: eager against graphed, and its share of the prefill",
    "gpu_suite": "the GPU test suite (`scripts/gpu/gpu_tests.sh`) and the bf16 greedy token-match rate",
    "k_scaling": "K sweep at a fixed length: plain, EAGLE-3 and P-EAGLE over K at c = 1 and 64, chat and code",
    "k_scaling_c1": "the shipped heads at c = 1, 8 prompts a cell",
    "k_scaling_c64": "the K sweep's c = 64 cells timed again (more prompts or repeats)",
    "kernels": "fused draft-batch kernels and greedy verification against their PyTorch references, µs a call",
    "long_attention": "2k-7k-token documents: decode attention through the kernel and through SDPA",
    "long_window": "2k-7k-token documents: the heads' 512-position drafting window against full attention",
    "prefill_batch": "warm prefills of c prompts at the benchmark's lengths",
    "prefill_cold": "the first prefill of a shape (compile and capture) against warm ones",
    "scale": "the scale lab: step costs at the paper's shapes",
    "smoke_engine": "engine decode steps on random weights, compiled and graphed variants",
    "soak": "many requests through the engine: no leak, no lost request",
    "stream": "bulk plain decoding for data generation (the stream decoder)",
    "sweeps": "the full sweep: K x c x chat / code / long, plain, EAGLE-3, P-EAGLE and transformers",
    "train_memory": "peak training memory of one long sequence split into S = 8, 4, 2, 1 segments",
    "training": "training sessions (`scripts/gpu/train_heads_h200.sh`): data card, each head's logs and summary, "
                "`results.json` (every head's acceptance side by side on the same prompts)",
    "training_data": "the training data stage alone: the data card and log, no head trained",
    "verify_profile": "profiles of the verify pass: kernels per step, combo kernels, the deferred residual add",
    "vllm": "vLLM and this engine side by side on the same heads and prompts",
    "vllm_runner": "vLLM's runner results per engine and their greedy outputs, compared on a CPU",
}


@dataclass(frozen=True)
class RunFolder:
    """One run: ``<device>/<topic>/<date>-<commit>/`` and the provenance of its main JSON."""

    path: Path
    device: str
    topic: str
    date: str  # the folder name's date (the session's day)
    commit: str  # the folder name's commit
    source: str  # the JSON the run_info came from, relative to the folder
    run_info: Mapping = field(repr=False)

    @property
    def name(self) -> str:
        """The folder's name, ``<date>-<commit>``."""
        return self.path.name

    @property
    def ran(self) -> str:
        """When it ran, as its run_info says (an ISO timestamp, or a day where only git knows)."""
        return str(self.run_info.get("date") or self.date)


def provenance(doc: object) -> dict | None:
    """The run_info of a parsed result JSON: its ``run_info``, or the same fields at the top level.

    Older tools wrote the fields at the top level; either form names at least a commit and a date. A commit that is
    not a string (``{"sha": "HEAD", "dirty": true}``) names none.

    >>> provenance({"run_info": {"commit": "abc1234", "date": "2026-12-01"}, "rows": []})["commit"]
    'abc1234'
    >>> provenance({"commit": "abc1234", "date": "2026-12-01", "passed": 3})["date"]
    '2026-12-01'
    >>> provenance({"rows": []}) is None
    True
    >>> provenance({"commit": {"sha": "HEAD"}, "created": "2026-11-29"}) is None
    True
    """
    if not isinstance(doc, dict):
        return None
    info = doc.get("run_info") if isinstance(doc.get("run_info"), dict) else doc
    if not (isinstance(info.get("commit"), str) and info["commit"] and (info.get("date") or info.get("created"))):
        return None
    out = dict(info) if info is not doc else {k: v for k, v in doc.items() if not isinstance(v, (dict, list))}
    out.setdefault("date", info.get("created"))
    if isinstance(out.get("device"), dict):
        out["device"] = out["device"].get("name", "")
    return out


def folder_name(info: Mapping) -> str:
    """The run folder's name for a run_info: ``<date>-<commit>``, the day (UTC) and the short commit.

    >>> folder_name({"date": "2026-12-03T17:25:29+00:00", "commit": "d0f394eaa57a0278"})
    '2026-12-03-d0f394e'

    Raises:
        ValueError: the run_info lacks its date or commit.
    """
    date, commit = str(info.get("date") or "")[:10], str(info.get("commit") or "")[:7]
    if not (FOLDER.match(f"{date}-{commit}")):
        raise ValueError(f"run_info date {info.get('date')!r} and commit {info.get('commit')!r} do not make a "
                         "<YYYY-MM-DD>-<commit> folder name")
    return f"{date}-{commit}"


def _load(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _candidates(folder: Path) -> list[Path]:
    """JSON files in reading order: the folder's own (``bench.json``, then ``gpu_suite.json`` first), then its
    sub-folders'."""
    top = sorted(folder.glob("*.json"), key=lambda p: (p.name != "bench.json", p.name != "gpu_suite.json", p.name))
    return top + sorted(p for p in folder.rglob("*.json") if p.parent != folder)


def read_run_info(folder: Path) -> tuple[dict, str]:
    """The run_info of a run folder and the file it came from (relative to the folder).

    The first JSON (in ``_candidates`` order) made at the folder's commit; failing that, the first with any
    run_info (a file measured with an older tree beside the run). Where no JSON names a commit and a date
    (``peagle-lab doctor --json`` writes none), the folder's name gives them and the source is ``""``.

    Raises:
        ValueError: nothing to go by: no run_info and a name that is not ``<date>-<commit>``.
    """
    match = FOLDER.match(folder.name)
    found = [(p, info) for p in _candidates(folder) if (info := provenance(_load(p))) is not None]
    for path, info in sorted(found, key=lambda f: not (match and str(f[1]["commit"]).startswith(match[2]))):
        return info, path.relative_to(folder).as_posix()
    if match is None:
        raise ValueError(f"{folder}: no JSON with a run_info (device, command, commit, date) and no "
                         "<date>-<commit> name")
    docs = [d for p in _candidates(folder) if isinstance(d := _load(p), dict)]
    gpus = [g.get("name") for d in docs for g in d.get("gpus") or [] if isinstance(g, dict)]
    versions = next((d["versions"] for d in docs if isinstance(d.get("versions"), dict)), {})
    return {"date": match[1], "commit": match[2], "device": ", ".join(gpus), **versions}, ""


# read_run_info's answers by folder, with the (file, mtime, size) of the JSON they were read from
_RUN_INFO: dict[Path, tuple[tuple, tuple[dict, str]]] = {}
SETTLED_NS = 2_000_000_000  # a file this much older than the read is settled: a rewrite would change its mtime


def _run_info_cached(folder: Path) -> tuple[dict, str]:
    """``read_run_info(folder)``, read again only where the folder's JSON files (names, mtimes, sizes) changed.

    A file's mtime ticks coarsely (a few ms), so a file rewritten within one tick at the same size keeps its stamp:
    answers from files younger than ``SETTLED_NS`` are therefore not kept (git's "racy" rule). The listing of run
    folders is never cached: a new run folder is found on the next call.
    """
    stats = [(p, p.stat()) for p in _candidates(folder)]
    key = tuple((p.relative_to(folder).as_posix(), s.st_mtime_ns, s.st_size) for p, s in stats)
    folder = folder.absolute()
    if folder in _RUN_INFO and _RUN_INFO[folder][0] == key:
        info, source = _RUN_INFO[folder][1]
        return dict(info), source  # a copy: a caller editing its run_info leaves the cache as it was
    info, source = read_run_info(folder)
    if all(time.time_ns() - s.st_mtime_ns > SETTLED_NS for _, s in stats):
        _RUN_INFO[folder] = key, (dict(info), source)
    return info, source


def run_folders(device: str | None = None, topic: str | None = None, root: Path = RESULTS) -> list[RunFolder]:
    """Every run folder under ``root``, by device, topic, then oldest to newest (see ``latest``); an empty
    ``<date>-<commit>`` folder (git keeps none) is not a run. The folders are listed afresh on every call; each
    one's run_info is parsed again only where its JSON files changed (``_run_info_cached``).

    Args:
        device: only this device folder (``"h200"``, ``"h100"``); None: every one in ``DEVICES``.
        topic: only this topic; None: every topic.
        root: the archive (``RESULTS``; a repository elsewhere passes its own ``<repo>/RESULTS_DIR``).
    """
    runs = []
    for dev in (device,) if device else DEVICES:
        for topic_dir in sorted(p for p in (root / dev).glob("*") if p.is_dir()):
            if topic and topic_dir.name != topic:
                continue
            for folder in sorted(p for p in topic_dir.iterdir() if p.is_dir() and FOLDER.match(p.name)):
                if not any(p.is_file() for p in folder.rglob("*")):
                    continue
                info, source = _run_info_cached(folder)
                date, commit = FOLDER.match(folder.name).groups()
                runs.append(RunFolder(folder, dev, topic_dir.name, date, commit, source, info))
    return sorted(runs, key=lambda r: (r.device, r.topic, r.ran, r.name))


def latest(device: str, topic: str, root: Path = RESULTS) -> Path:
    """The newest run folder of ``topic`` on ``device``: latest run_info date (to the second), then name.

    >>> latest("h200", "k_scaling").parent.name
    'k_scaling'

    Raises:
        ValueError: the device has no run folder of that topic (the message lists the topics it has).
    """
    runs = run_folders(device, topic, root)
    if not runs:
        have = sorted({r.topic for r in run_folders(device, None, root)}) if (root / device).is_dir() else []
        raise ValueError(f"no run folder of topic {topic!r} on device {device!r} under {root}; "
                         f"topics there: {', '.join(have) or 'none'}")
    return runs[-1].path


BEGIN = "<!-- BEGIN runs: generated by `python -m peagle_lab.bench.archive --readme docs/results/README.md` -->"
END = "<!-- END runs -->"


def key_figure(folder: Path) -> str:
    """What the folder's own files say in one phrase: cells measured, tests passed, token-match rate; where the
    folder's own files say nothing, what its sub-folders' say, each named (an A/B run's ``base/`` and ``gpu_suite/``).

    >>> key_figure(RESULTS / "h200/gpu_suite/2026-12-04-85d480f")
    'GPU suite 92/92 passed; bf16 greedy match 1.0'
    >>> key_figure(RESULTS / "h100/engine_ab/2026-12-06-981fddb")
    'base/: 18 cells; gpu_suite/: GPU suite 92/92 passed (exit 1)'
    """
    own = _own_figure(folder)
    if own != "—":
        return own
    subs = [f"{sub.name}/: {figure}" for sub in sorted(p for p in folder.iterdir() if p.is_dir())
            if (figure := _own_figure(sub)) != "—"]
    return "; ".join(subs) or "—"


def _own_figure(folder: Path) -> str:
    parts = []
    bench = _load(folder / "bench.json")
    if isinstance(bench, dict) and isinstance(bench.get("rows"), list):
        skipped = len(bench.get("skipped") or [])
        parts.append(f"{len(bench['rows'])} cells" + (f", {skipped} skipped" if skipped else ""))
    suite = _load(folder / "gpu_suite.json")
    if isinstance(suite, dict) and "passed" in suite:
        cut = f" (exit {suite['exit_code']})" if suite.get("exit_code") else ""  # e.g. a session's budget cut it
        parts.append(f"GPU suite {suite['passed']}/{suite.get('tests', suite['passed'])} passed{cut}")
    match = _load(folder / "bf16_match_rate.json")
    if isinstance(match, dict) and isinstance(match.get("token_match_rate"), dict):
        parts.append(f"bf16 greedy match {min(match['token_match_rate'].values())}")
    return "; ".join(parts) or "—"


def _when(info: Mapping, source: str = "-") -> str:
    """``2026-12-03 17:25`` from an ISO timestamp; a bare day is git's (a ``run_info.json`` beside a run that wrote
    no JSON), or the folder name's where no file names one (``source`` empty)."""
    date = str(info.get("date") or "")
    return f"{date[:10]} {date[11:16]}" if "T" in date else f"{date} ({'git' if source else 'folder name'})"


def _versions(info: Mapping) -> str:
    names = ("torch", "triton", "transformers")
    versions = [str(info.get(n) or (info.get("versions") or {}).get(n) or "—").split("+")[0] for n in names]
    return " / ".join(versions) if set(versions) != {"—"} else "—"


def _device(info: Mapping) -> str:
    """The device name without a ``cuda (…)`` wrapper: ``cuda (NVIDIA H200)`` and ``NVIDIA H200`` are one."""
    return re.sub(r"^cuda \((.*)\)$", r"\1", str(info.get("device") or ""))


def _device_table(device: str, runs: list[RunFolder]) -> list[str]:
    newest = {r.topic: r for r in runs}  # runs are sorted oldest to newest within a topic
    names = sorted({_device(r.run_info) for r in runs} - {""})
    lines = [f"### `{device}/`: {', '.join(names)}", "",
             "| topic | what it measures | runs | newest |", "| --- | --- | --- | --- |"]
    for topic, run in newest.items():
        count = sum(r.topic == topic for r in runs)
        lines.append(f"| `{topic}` | {TOPICS.get(topic, '—')} | {count} | `{run.name}/` |")
    lines += ["", "| run folder | ran (UTC) | commit | torch / triton / transformers | run_info from | key figure |",
              "| --- | --- | --- | --- | --- | --- |"]
    for run in sorted(runs, key=lambda r: (r.topic, r.ran, r.name), reverse=False):
        commit = str(run.run_info.get("commit") or "")[:7]
        lines.append(f"| `{device}/{run.topic}/{run.name}/` | {_when(run.run_info, run.source)} | {commit} | "
                     f"{_versions(run.run_info)} | {f'`{run.source}`' if run.source else 'the folder name'} | "
                     f"{key_figure(run.path)} |")
    return lines + [""]


def _loose_table(device: str, root: Path) -> list[str]:
    """The JSON files of a device folder kept outside run folders (cpu/), each with its provenance."""
    lines = ["| file | ran (UTC) | commit | device |", "| --- | --- | --- | --- |"]
    for path in sorted((root / device).rglob("*.json")):
        info = provenance(_load(path))
        if info is not None and path.relative_to(root).as_posix() not in REGENERATED:
            lines.append(f"| `{path.relative_to(root).as_posix()}` | {_when(info)} | "
                         f"{str(info['commit'])[:7]} | {info.get('device') or '—'} |")
    return lines + [""]


def index(root: Path = RESULTS) -> str:
    """The generated block of the results index: per device, its topics and every run folder."""
    lines = [BEGIN]
    for device in DEVICES:
        runs = run_folders(device, None, root)
        if runs:
            lines += _device_table(device, runs)
    lines += ["### `cpu/`: files, not run folders", ""] + _loose_table("cpu", root)
    return "\n".join(lines[:-1] + [END])


def render(page: str, root: Path = RESULTS) -> str:
    """``page`` with the text between ``BEGIN`` and ``END`` replaced by ``index(root)``.

    Raises:
        ValueError: the page lacks the marker comments.
    """
    start, end = page.find("<!-- BEGIN runs"), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no '{BEGIN[:15]} …' / '{END}' markers to write the index between")
    return page[:start] + index(root) + page[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    """``--readme PAGE``: rewrite its generated block; ``--latest DEVICE TOPIC``: print the newest folder."""
    p = argparse.ArgumentParser(prog="python -m peagle_lab.bench.archive", description=__doc__.splitlines()[0])
    p.add_argument("--readme", type=Path, help="the results index to rewrite (docs/results/README.md)")
    p.add_argument("--latest", nargs=2, metavar=("DEVICE", "TOPIC"), help="print the newest run folder")
    p.add_argument("--results", type=Path, default=RESULTS, help=f"the archive (default {RESULTS})")
    args = p.parse_args(argv)
    if args.latest:
        try:
            found = latest(*args.latest, root=args.results)
        except ValueError as e:
            print(f"archive: {e}", file=sys.stderr)
            return 2
        print(found.resolve().relative_to(args.results.resolve().parents[1]))
    if args.readme:
        text = args.readme.read_text()
        new = render(text, args.results)
        if new != text:
            args.readme.write_text(new)
        print(f"{args.readme}: {'rewritten' if new != text else 'up to date'}")
    if not (args.latest or args.readme):
        p.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
