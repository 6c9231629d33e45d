"""The scale lab's committed runs, found and merged into the one document :mod:`peagle_lab.lab.predict` reads.

A device's runs split three ways. Runs at the default prompt (``PROMPT_TOKENS``) give each shape's costs, the
newest run that measured a shape winning. Uniform runs at other prompt lengths (``peagle-lab scale
--prompt-tokens N``) go to ``contexts``, one per length, so the check can interpolate the step to a cell's
context. Ragged runs (``--prompt-range LO HI``: every request's prompt a different length, as in a continuous
batch) go to ``ragged``, one per range: they replace no uniform cost, since a ragged batch of the same mean
context costs more (its longest request sets the decode-attention kernel's pace).

Layout of a merged document::

    {**newest default run, "rows", "costs", "moe", "layer_check", "shapes", "files",
     "contexts": [{"grid", "costs", "file"}, ...],   # uniform, by context
     "ragged":   [{"grid", "costs", "file"}, ...]}   # grid["prompt_range"] = [LO, HI], by mean context
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..bench import archive
from ..bench.scale import PROMPT_TOKENS, SHAPES
from ..bench.scale_costs import prompt_range, short_rows
from ..hardware import DEVICES, preset_of
from ..kernels.decode_attention import row_tiles, tile_rows
from ..provenance import REPO

__all__ = ["SCALE_TOPIC", "SCALE_FILE", "CPU_SCALE", "scale_files", "merge_scale", "context_runs", "ragged_runs",
           "fit_runs", "load_scale", "attention_tile"]

# the scale lab's JSON: a GPU run (a docs/results/<device>/scale/<date>-<commit>/ run folder, or a sub-folder of
# one, as ctx320/ or ragged_50-550/) where one is committed, the newest by its date, else the CPU rehearsal (tiny
# shapes)
SCALE_TOPIC = "scale"
SCALE_FILE = "scale.json"
CPU_SCALE = f"{archive.RESULTS_DIR}/cpu/scale/{SCALE_FILE}"


def scale_files() -> list[Path]:
    """The committed scale-lab JSONs in the order ``load_scale`` prefers them: GPU runs newest first by their
    ``date`` (every ``SCALE_FILE`` in the run folders of ``SCALE_TOPIC``, sub-folders included), then the CPU's."""
    runs = archive.run_folders(topic=SCALE_TOPIC, root=REPO / archive.RESULTS_DIR)
    gpu = [p for run in runs for p in sorted(run.path.rglob(SCALE_FILE))]
    gpu.sort(key=lambda p: json.loads(p.read_text()).get("date", ""), reverse=True)
    return gpu + [REPO / CPU_SCALE]


def _base(shape: str) -> str:
    return shape.split("+")[0]  # "gpt-oss-20b+moe" -> "gpt-oss-20b"


def _prompt_tokens(doc: Mapping) -> int:
    return (doc.get("grid") or {}).get("prompt_tokens", PROMPT_TOKENS)


def _mean_prompt(doc: Mapping) -> float:
    """A run's mean prompt: the middle of its ``prompt_range``, else ``prompt_tokens``.

    >>> _mean_prompt({"grid": {"prompt_range": [50, 550]}}), _mean_prompt({"grid": {}})
    (300.0, 160.0)
    """
    rng = prompt_range(doc)
    return (rng[0] + rng[1]) / 2 if rng else float(_prompt_tokens(doc))


def _side_runs(docs: Sequence[tuple[dict, str]], key: Callable, skip: set) -> list[dict]:
    """The newest run with costs (``docs`` newest first) at each ``key(doc)`` not in ``skip``, by mean prompt."""
    seen, out = set(skip), []
    for doc, path in docs:
        if key(doc) not in seen and doc["costs"]:
            seen.add(key(doc))
            out.append({"grid": doc["grid"], "costs": doc["costs"], "file": path})
    return sorted(out, key=_mean_prompt)


def merge_scale(docs: Sequence[tuple[dict, str]]) -> tuple[dict, str]:
    """One document from several runs on the newest run's device (``docs`` newest first): each shape's rows,
    costs, MoE layer and layer check from the newest uniform run at the default context (``PROMPT_TOKENS``)
    that has costs for it; ``files`` names the runs used.

    A second GPU run that measures the shapes a first one did not reach adds them this way. A uniform run at
    another prompt length replaces nothing: the newest at each length goes to ``contexts``
    (``{"grid", "costs", "file"}``), where :func:`context_runs` finds it for the check; a ragged run
    (``grid["prompt_range"]``) neither: the newest of each range (and count of one-token stand-ins for idle rows,
    ``grid["short_rows"]``) goes to ``ragged`` (:func:`ragged_runs`).
    """
    device = docs[0][0].get("device")
    docs = [(d, p) for d, p in docs if d.get("device") == device]
    uniform = [(d, p) for d, p in docs if prompt_range(d) is None] or docs  # ragged runs alone: the newest stands in
    default = [(d, p) for d, p in uniform if _prompt_tokens(d) == PROMPT_TOKENS] or uniform[:1]
    base = default[0][0]
    out = {**base, "rows": [], "costs": [], "moe": {}, "layer_check": [], "skipped": [], "files": [],
           "shapes": {}, "wall_s": 0.0}
    taken: set[str] = set()
    for doc, path in default:
        new = {_base(r["shape"]) for r in doc["costs"]} - taken
        if not new:
            continue
        out["files"].append(path)
        out["rows"] += [r for r in doc["rows"] if r["shape"] in new]
        out["costs"] += [r for r in doc["costs"] if _base(r["shape"]) in new]
        out["moe"].update({k: v for k, v in (doc.get("moe") or {}).items() if k in new})
        out["layer_check"] += [r for r in doc.get("layer_check", []) if r["shape"] in new]
        out["shapes"].update(doc["shapes"])
        out["wall_s"] += doc.get("wall_s", 0.0)
        taken |= new
    out["contexts"] = _side_runs([dp for dp in uniform if prompt_range(dp[0]) is None], _prompt_tokens,
                                 {_prompt_tokens(base)})
    out["ragged"] = _side_runs([dp for dp in docs if prompt_range(dp[0])], lambda d: (prompt_range(d), short_rows(d)),
                               set())
    order = list(SHAPES)  # smallest target first, as the scale lab lists them
    out["costs"].sort(key=lambda r: (order.index(_base(r["shape"])), r["shape"]))
    grid_shapes = [s_ for doc, _ in default for s_ in doc["grid"]["shapes"]]
    out["grid"] = {**base["grid"], "shapes": list(dict.fromkeys(grid_shapes))}
    out["skipped"] = [c for doc, _ in default for c in doc.get("skipped", []) if c.split()[0] not in taken]
    return out, " + ".join(out["files"] + [c["file"] for c in out["contexts"] + out["ragged"]])


def context_runs(scale: Mapping) -> list[Mapping]:
    """The runs the check interpolates the step between by context: ``scale`` itself and its ``contexts``."""
    return [scale, *(scale.get("contexts") or [])]


def ragged_runs(scale: Mapping) -> list[Mapping]:
    """The ragged runs the check reads a batch of several busy rows from: ``scale``'s ``ragged``, and ``scale``
    itself where it is one (a ragged run loaded alone)."""
    own = [scale] if prompt_range(scale) else []
    return [*own, *(scale.get("ragged") or [])]


def fit_runs(scale: Mapping) -> list[Mapping]:
    """Every run the context fit (``scale_costs.context_fit``) reads: the uniform runs at each prompt length
    (:func:`context_runs`), then the ragged ones (:func:`ragged_runs`)."""
    return [*context_runs(scale), *ragged_runs(scale)]


def load_scale(path: str | Path | None = None) -> tuple[dict, str]:
    """(the scale lab's JSON, its path relative to the repository): ``path``; else the committed GPU runs of the
    newest run's device merged (:func:`merge_scale`); else the CPU rehearsal."""
    def read(p: Path) -> tuple[dict, str]:
        rel = p.resolve().relative_to(REPO) if p.resolve().is_relative_to(REPO) else p
        return json.loads(p.read_text()), str(rel)

    candidates = [Path(path)] if path else scale_files()
    found = [p for p in candidates if p.is_file()]
    if not found:
        raise ValueError(f"no scale-lab JSON at {', '.join(map(str, candidates))}; run `peagle-lab scale --out FILE`")
    if path or found[0] == REPO / CPU_SCALE:
        return read(found[0])
    return merge_scale([read(p) for p in found if p != REPO / CPU_SCALE])


def attention_tile(scale: Mapping, shape: str, concurrency: int) -> Callable[[int], int] | None:
    """K -> the rows of the tile one decode-attention program computes in a verify pass of ``shape`` at c =
    ``concurrency`` on the scale lab's device, None where that device is not a preset (``hardware.DEVICES``).

    While the GPU has a program to spare for each (:func:`~peagle_lab.kernels.decode_attention.row_tiles`: c ×
    K/V heads × tiles at most its SMs), a K/V head's query rows go out in 16-row tiles; else they stay one tile,
    padded (:func:`~peagle_lab.kernels.decode_attention.tile_rows`), and the verify pass's cost steps up where the
    padded tile doubles.

    >>> tile = attention_tile({"device": "NVIDIA H100 80GB HBM3"}, "smollm2-135m", 64)
    >>> [tile(k) for k in (1, 4, 5, 8)], [attention_tile({"device": "NVIDIA H100"}, "smollm2-135m", 1)(k) for k in (4, 5)]
    ([16, 16, 32, 32], [16, 16])
    """
    preset = preset_of(str(scale.get("device") or ""))
    if preset is None:
        return None
    cfg = SHAPES[_base(shape)].config
    nkv, sms = cfg.num_key_value_heads, DEVICES[preset].sms
    rep = cfg.num_attention_heads // nkv

    def tile(k: int) -> int:
        rows = rep * (k + 1)
        return tile_rows(rows, row_tiles(concurrency, nkv, rows, sms))
    return tile
