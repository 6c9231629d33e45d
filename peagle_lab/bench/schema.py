"""The benchmark result format: one JSON file (provenance + config + one row per cell) and a CSV.

```
{"schema": "peagle_lab.bench/1",
 "run_info": {device, python, torch, triton, transformers, command, commit, date},
 "config":   {what was swept and how: methods, K values, concurrencies, workloads, heads, ...},
 "rows":     [{method, k, concurrency, workload, temperature, tps, tpot_ms, acceptance_length,
               per_position_acceptance, num_drafts, num_accepted_tokens, verify_ms, prep_ms,
               draft_ms, output_tokens, source, ...optional fields}],
 "skipped":  [{workload, method, k, concurrency, temperature, source, reason}]}
```
Rows come from our engine (``source="peagle_lab"``), from transformers' static-cache
``generate`` (``"transformers"``, the outside reference) and from the vLLM driver
(``"vllm"``). ``validate_result`` is the contract all three writers are held to. The
definitions are the glossary's: AL = 1 + accepted / drafts = 1 + sum(per-position
acceptance); TPS counts output tokens of all requests over wall time, prefill included.
"""
from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..config import METHODS

SCHEMA = "peagle_lab.bench/1"
SOURCES = ("peagle_lab", "transformers", "vllm")
RUN_INFO_FIELDS = ("device", "torch", "command", "commit", "date")
# Tolerance of the AL identities (AL = 1 + accepted/drafts = 1 + sum of per-position rates).
AL_TOLERANCE = 1e-3
# The contexts a cell's decode steps held, averaged over steps (peagle_lab.engine.metrics.context_summary): mean and
# longest over busy rows, then over every row the step ran; optional, each mean at most its longest.
CONTEXT_FIELDS = (("mean_context", "longest_context"), ("mean_row_context", "longest_row_context"))


class SchemaError(ValueError):
    """A result file or row that breaks the schema; the message names the field."""


@dataclass
class BenchRow:
    """One measured cell: (source, workload, temperature, method, K, concurrency) → numbers."""

    method: str  # "baseline" | "eagle3" | "peagle"
    k: int  # draft tokens per step; 0 for baseline
    concurrency: int  # c, requests decoded together
    workload: str  # "chat" | "code" | "long" (or a vLLM dataset name)
    temperature: float
    tps: float  # output tokens / s over all requests, prefill included
    tpot_ms: float  # decode time per output token of one request
    acceptance_length: float  # 1 + accepted / drafts; 1.0 for baseline
    per_position_acceptance: list[float]  # accepted at position i / drafts; [] when not measured
    num_drafts: int  # draft rounds over all requests (vLLM's num_drafts)
    num_accepted_tokens: int
    verify_ms: float | None  # median per step: target forward + verification
    prep_ms: float | None  # median per step: draft-batch construction
    draft_ms: float | None  # median per step: drafter passes + sampling
    output_tokens: int
    source: str = "peagle_lab"
    num_prompts: int | None = None
    max_new_tokens: int | None = None
    num_steps: int | None = None  # decode steps over all batches
    step_ms: float | None = None  # mean wall time of one decode step (host included)
    prefill_ms: float | None = None  # mean prefill wall time per batch
    agreement: float | None = None  # reference only: share of greedy tokens equal to our baseline's
    extra: dict = field(default_factory=dict)  # unknown fields, kept for the round trip

    @property
    def key(self) -> tuple:
        return (self.source, self.workload, self.temperature, self.method, self.k, self.concurrency)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        d["per_position_acceptance"] = list(self.per_position_acceptance)
        return {**d, **self.extra}

    @classmethod
    def from_dict(cls, d: dict) -> "BenchRow":
        names = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in d.items() if k in names},
                   extra={k: v for k, v in d.items() if k not in names})


# The fields every writer (our sweep, the transformers reference, the vLLM driver) must fill.
REQUIRED_ROW_FIELDS = (
    "method", "k", "concurrency", "workload", "temperature", "tps", "tpot_ms", "acceptance_length",
    "per_position_acceptance", "num_drafts", "num_accepted_tokens", "verify_ms", "prep_ms", "draft_ms",
    "output_tokens", "source",
)
OPTIONAL_ROW_FIELDS = tuple(f.name for f in fields(BenchRow) if f.name not in REQUIRED_ROW_FIELDS + ("extra",))


@dataclass
class SkippedCell:
    """A planned cell that did not run, and why (time budget, memory, batch-token cap)."""

    workload: str
    method: str
    k: int
    concurrency: int
    temperature: float
    reason: str
    source: str = "peagle_lab"


@dataclass
class BenchResult:
    run_info: dict
    config: dict
    rows: list[BenchRow] = field(default_factory=list)
    skipped: list[SkippedCell] = field(default_factory=list)
    schema: str = SCHEMA

    def to_dict(self) -> dict:
        return {"schema": self.schema, "run_info": self.run_info, "config": self.config,
                "rows": [r.to_dict() for r in self.rows], "skipped": [vars(s).copy() for s in self.skipped]}

    @classmethod
    def from_dict(cls, d: dict) -> "BenchResult":
        """Validate ``d`` and build the result."""
        validate_result(d)
        return cls(d["run_info"], d["config"], [BenchRow.from_dict(r) for r in d["rows"]],
                   [SkippedCell(**s) for s in d.get("skipped", [])], d["schema"])


# ---------------------------------------------------------------- validation

def _number(where: str, v, lo: float = 0.0, hi: float = math.inf, none_ok: bool = False) -> None:
    if v is None and none_ok:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise SchemaError(f"{where}: must be a finite number in [{lo}, {hi}], got {v!r}")


def _integer(where: str, v, lo: int = 0) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise SchemaError(f"{where}: must be an integer >= {lo}, got {v!r}")


def validate_row(d: dict, where: str = "row") -> None:
    """Raise ``SchemaError`` unless ``d`` is a well-formed, self-consistent row.

    >>> validate_row({"method": "peagle", "k": 0})
    Traceback (most recent call last):
    ...
    peagle_lab.bench.schema.SchemaError: row: missing fields concurrency, workload, ...
    """
    if not isinstance(d, dict):
        raise SchemaError(f"{where}: must be an object, got {type(d).__name__}")
    missing = [f for f in REQUIRED_ROW_FIELDS if f not in d]
    if missing:
        shown = ", ".join(missing[:2]) + (", ..." if len(missing) > 2 else "")
        raise SchemaError(f"{where}: missing fields {shown}")
    if d["method"] not in METHODS:
        raise SchemaError(f"{where}.method: {d['method']!r} is not one of {', '.join(METHODS)}")
    if d["source"] not in SOURCES:
        raise SchemaError(f"{where}.source: {d['source']!r} is not one of {', '.join(SOURCES)}")
    if not isinstance(d["workload"], str) or not d["workload"]:
        raise SchemaError(f"{where}.workload: must be a non-empty string, got {d['workload']!r}")
    _integer(f"{where}.k", d["k"])
    if (d["method"] == "baseline") != (d["k"] == 0):
        raise SchemaError(f"{where}.k: baseline rows have k=0 and speculative rows k>=1; "
                          f"got method={d['method']!r}, k={d['k']}")
    _integer(f"{where}.concurrency", d["concurrency"], 1)
    _number(f"{where}.temperature", d["temperature"])
    for name in ("tps", "tpot_ms"):
        _number(f"{where}.{name}", d[name])
    for name in ("num_drafts", "num_accepted_tokens", "output_tokens"):
        _integer(f"{where}.{name}", d[name])
    timed = d["source"] == "peagle_lab"
    for name in ("verify_ms", "prep_ms", "draft_ms"):
        _number(f"{where}.{name}", d[name], none_ok=not timed)
    k, drafts, acc, al = d["k"], d["num_drafts"], d["num_accepted_tokens"], d["acceptance_length"]
    if acc > drafts * k:
        raise SchemaError(f"{where}.num_accepted_tokens: {acc} exceeds num_drafts*k = {drafts * k}")
    _number(f"{where}.acceptance_length", al, 1.0, k + 1.0)
    if drafts and abs(al - (1 + acc / drafts)) > AL_TOLERANCE:
        raise SchemaError(f"{where}.acceptance_length: {al} != 1 + accepted/drafts = {1 + acc / drafts:.4f}")
    if d["method"] == "baseline" and (drafts or acc or al != 1.0):
        raise SchemaError(f"{where}: a baseline row drafts nothing (num_drafts=0, AL=1)")
    pos = d["per_position_acceptance"]
    if not isinstance(pos, list) or len(pos) not in (0, k):
        raise SchemaError(f"{where}.per_position_acceptance: must be a list of k={k} rates (or [] if not "
                          f"measured), got {pos!r}")
    for i, v in enumerate(pos):
        _number(f"{where}.per_position_acceptance[{i}]", v, 0.0, 1.0)
    if any(b > a + AL_TOLERANCE for a, b in zip(pos, pos[1:])):
        raise SchemaError(f"{where}.per_position_acceptance: must not increase (accepting position i "
                          f"needs positions < i), got {pos}")
    if pos and drafts and abs(al - 1 - sum(pos)) > AL_TOLERANCE:
        raise SchemaError(f"{where}.per_position_acceptance: 1 + sum = {1 + sum(pos):.4f} != AL {al}")
    for name in ("num_prompts", "max_new_tokens", "num_steps"):
        if d.get(name) is not None:
            _integer(f"{where}.{name}", d[name])
    for name in ("step_ms", "prefill_ms"):
        _number(f"{where}.{name}", d.get(name), none_ok=True)
    _number(f"{where}.agreement", d.get("agreement"), 0.0, 1.0, none_ok=True)
    for mean, longest in CONTEXT_FIELDS:
        _number(f"{where}.{mean}", d.get(mean), none_ok=True)
        _number(f"{where}.{longest}", d.get(longest), none_ok=True)
        if d.get(mean) is not None and d.get(longest) is not None and d[mean] > d[longest] + AL_TOLERANCE:
            raise SchemaError(f"{where}.{mean}: {d[mean]} exceeds {longest} = {d[longest]} (a mean over rows is at "
                              f"most their longest)")


def validate_result(d: dict) -> None:
    """Raise ``SchemaError`` unless ``d`` is a complete result document (see the module docstring)."""
    if not isinstance(d, dict):
        raise SchemaError(f"result: must be an object, got {type(d).__name__}")
    if d.get("schema") != SCHEMA:
        raise SchemaError(f"schema: expected {SCHEMA!r}, got {d.get('schema')!r}")
    info = d.get("run_info")
    if not isinstance(info, dict) or any(f not in info for f in RUN_INFO_FIELDS):
        raise SchemaError(f"run_info: must hold {', '.join(RUN_INFO_FIELDS)} (peagle_lab.provenance.run_info)")
    if not isinstance(d.get("config"), dict):
        raise SchemaError("config: must be an object")
    rows = d.get("rows")
    if not isinstance(rows, list):
        raise SchemaError("rows: must be a list")
    seen = {}
    for i, r in enumerate(rows):
        validate_row(r, f"rows[{i}]")
        key = BenchRow.from_dict(r).key
        if key in seen:
            raise SchemaError(f"rows[{i}]: duplicates rows[{seen[key]}] (same source, workload, temperature, "
                              f"method, k, concurrency)")
        seen[key] = i
    for i, s in enumerate(d.get("skipped", [])):
        names = {f.name for f in fields(SkippedCell)}
        if not isinstance(s, dict) or set(s) != names:
            raise SchemaError(f"skipped[{i}]: must have exactly the fields {', '.join(sorted(names))}")


# ---------------------------------------------------------------- files

def write_json(result: BenchResult, path: Path | str) -> Path:
    """Validate and write ``result`` atomically (a crash mid-write leaves the old file)."""
    return write_document(result.to_dict(), path)


def write_document(d: dict, path: Path | str) -> Path:
    """Validate the result document ``d`` and write it atomically (what every writer uses)."""
    validate_result(d)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; a result file is meant to be shared
    os.replace(tmp, path)
    return path


def read_json(path: Path | str) -> BenchResult:
    """Load and validate a result file."""
    try:
        d = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise SchemaError(f"{path}: not valid JSON ({e})") from None
    return BenchResult.from_dict(d)


def write_csv(result: BenchResult, path: Path | str) -> Path:
    """One line per row; per-position acceptance as ``;``-separated rates. Provenance stays in the JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = REQUIRED_ROW_FIELDS + OPTIONAL_ROW_FIELDS
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        for r in result.rows:
            d = r.to_dict()
            d["per_position_acceptance"] = ";".join(f"{v:.6g}" for v in r.per_position_acceptance)
            w.writerow({c: "" if d.get(c) is None else d[c] for c in columns})
    return path
