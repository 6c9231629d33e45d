"""The scale lab's document read back: full-depth step costs per cell, the per-layer rule's check, the
step at any K (``step_costs``), at any number of busy rows (``step_costs_at_rows``), at any context
(``step_costs_at_context``, from runs at several prompt lengths), of a ragged batch (``step_costs_ragged``,
from runs whose requests' prompts differ in length) and at a batch's mean and longest context (``step_costs_fit``,
a least-squares fit over every run at one concurrency, ``context_fit``; each cell's contexts: ``cell_contexts``), which
``peagle_lab.lab.predict`` combines with acceptance, and the costs carried to another GPU by its memory
bandwidth (``carried_to``, a projection) or with MoE layers that cost only the experts they read
(``expert_bound_moe``).

The document is what ``peagle_lab.bench.scale.run_scale`` writes (``rows`` of measured engine cells,
``grid``, ``shapes``, ``moe``); these functions are pure and need no GPU.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping

import numpy as np
import torch

from ..hardware import DEVICES, bandwidth_ratio, preset_of

__all__ = ["PARTS", "CONTEXTS", "full_depth_costs", "layer_check", "step_costs", "step_costs_at_rows",
           "step_costs_at_context", "step_context", "prompt_range", "has_costs", "step_costs_ragged",
           "step_costs_toward", "cell_seed",
           "drawn_lengths", "cell_contexts", "context_fit", "step_costs_fit", "carried_to", "experts_read",
           "expert_bound_moe"]

PARTS = ("verify_ms", "prep_ms", "draft_ms", "host_ms", "step_ms")
# a cell's mean context over its busy row-steps and its steps' longest row (mean over steps), in tokens
# (``engine.context_summary``; runs that did not record them: ``cell_contexts``)
CONTEXTS = ("mean_context", "longest_context")


def _by_key(rows, name, layers, method):
    return {(r["depth"], r["k"], r["concurrency"]): r for r in rows
            if r["shape"] == name and r["layers"] == layers and r["method"] == method}


def _verify_slopes(doc: dict, name: str) -> dict:
    """(K, c) -> verify ms per target layer, from EAGLE-3 at the grid's two layer counts."""
    lo, hi = doc["grid"]["layers"]
    a, b = _by_key(doc["rows"], name, lo, "eagle3"), _by_key(doc["rows"], name, hi, "eagle3")
    return {key[1:]: (b[key]["verify_ms"] - a[key]["verify_ms"]) / (hi - lo) for key in a.keys() & b.keys()}


def full_depth_costs(doc: dict) -> list[dict]:
    """Every measured cell at its shape's full depth: measured where the whole target ran, else the
    ``hi``-layer cell with its verify time scaled per layer (the module docstring's rule)."""
    out = []
    hi = doc["grid"]["layers"][1]
    for name, info in doc["shapes"].items():
        full = info["layers"]
        slopes = _verify_slopes(doc, name)
        for method in ("eagle3", "peagle"):
            whole = _by_key(doc["rows"], name, full, method)
            base = whole or _by_key(doc["rows"], name, hi, method)
            for (depth, k, c), r in sorted(base.items()):
                if not whole and (k, c) not in slopes:
                    continue
                extra = 0.0 if whole else (full - hi) * slopes[(k, c)]
                cell = {p: r[p] for p in PARTS} | {f: r[f] for f in CONTEXTS if f in r}
                cell["verify_ms"] += extra
                cell["step_ms"] += extra
                out.append({"shape": name, "method": method, "depth": depth, "k": k, "concurrency": c,
                            "scaled": not whole, **cell})
    return out + _moe_costs(doc, out)


def _moe_costs(doc: dict, costs: list[dict]) -> list[dict]:
    """Shape ``NAME+moe``: NAME's cells with every layer's MLP as the real MoE layer at that verify's tokens."""
    out = []
    for name, rows in (doc.get("moe") or {}).items():
        if isinstance(rows, str):
            continue
        extra = {r["tokens"]: r["moe_extra_ms"] for r in rows}
        layers = doc["shapes"][name]["layers"]
        for cell in costs:
            tokens = cell["concurrency"] * (cell["k"] + 1)
            if cell["shape"] == name and tokens in extra:
                add = layers * extra[tokens]
                out.append({**cell, "shape": f"{name}+moe", "verify_ms": cell["verify_ms"] + add,
                            "step_ms": cell["step_ms"] + add})
    return out


def layer_check(doc: dict) -> list[dict]:
    """Where a shape ran whole and at the two layer counts: the per-layer rule's verify against the
    measured one, per (K, c). ``error`` = predicted / measured − 1."""
    hi = doc["grid"]["layers"][1]
    out = []
    for name, info in doc["shapes"].items():
        full, slopes = info["layers"], _verify_slopes(doc, name)
        whole = _by_key(doc["rows"], name, full, "eagle3")
        at_hi = _by_key(doc["rows"], name, hi, "eagle3")
        if full == hi or not whole:
            continue
        for (depth, k, c), r in sorted(whole.items()):
            if (k, c) in slopes and (depth, k, c) in at_hi:
                pred = at_hi[(depth, k, c)]["verify_ms"] + (full - hi) * slopes[(k, c)]
                out.append({"shape": name, "k": k, "concurrency": c, "measured_ms": r["verify_ms"],
                            "predicted_ms": pred, "error": pred / r["verify_ms"] - 1.0})
    return out


def _interpolate(points: dict[int, dict], k: int, group: Callable[[int], int] | None = None) -> dict:
    """Linear in K between the two nearest measured K (extrapolated past the ends); where ``group`` names each
    K's group (the decode-attention tile its query rows fill), between measured K of ``k``'s group where it
    has two, so a step in cost between groups is not spread over the K around it.

    >>> pts = {k: {p: float(k + (10 if k >= 5 else 0)) for p in PARTS} for k in (1, 3, 5, 8)}
    >>> _interpolate(pts, 4)["step_ms"], _interpolate(pts, 4, lambda k: 16 if k <= 4 else 32)["step_ms"]
    (9.0, 4.0)
    """
    ks = sorted(points)
    if k in points or len(ks) == 1:
        return dict(points.get(k, points[ks[0]]))
    if group is not None and len(same := [x for x in ks if group(x) == group(k)]) >= 2:
        ks = same
    lo = max([x for x in ks if x < k], default=ks[0])
    hi = min([x for x in ks if x > k], default=ks[-1])
    if lo == hi:  # past an end: the last two
        lo, hi = (ks[0], ks[1]) if k < ks[0] else (ks[-2], ks[-1])
    t = (k - lo) / (hi - lo)
    return {p: points[lo][p] + t * (points[hi][p] - points[lo][p]) for p in PARTS}


def step_costs(doc: dict, shape: str, method: str, k: int, concurrency: int, depth: int = 1) -> dict:
    """One step's parts (ms) at full depth for ``method`` at K and c, interpolated in K.

    EAGLE-3's drafter has one layer (``depth`` is ignored); P-EAGLE's has ``depth``.

    Raises:
        ValueError: a shape, concurrency or depth the document did not measure.
    """
    depth = 1 if method == "eagle3" else depth
    cells = [r for r in doc["costs"] if r["shape"] == shape and r["method"] == method]
    if not cells:
        raise ValueError(f"no {method} costs for shape={shape!r}; measured: {sorted({r['shape'] for r in doc['costs']})}")
    pts = {r["k"]: r for r in cells if r["concurrency"] == concurrency and r["depth"] == depth}
    if not pts:
        have = sorted({(r["concurrency"], r["depth"]) for r in cells})
        raise ValueError(f"shape={shape!r} {method}: no cell at c={concurrency}, depth={depth}; measured (c, depth): {have}")
    return _interpolate(pts, k)


def _concurrencies(runs: list[dict], shape: str, method: str, depth: int) -> list[int]:
    """The concurrencies ``runs`` measured for ``shape``, ``method`` and ``depth`` (EAGLE-3 at depth 1), sorted."""
    depth = 1 if method == "eagle3" else depth
    return sorted({r["concurrency"] for d in runs for r in d["costs"]
                   if (r["shape"], r["method"], r["depth"]) == (shape, method, depth)})


def step_costs_at_rows(doc: dict, shape: str, method: str, k: int, rows: float, depth: int = 1) -> dict:
    """:func:`step_costs` at ``rows`` busy rows, linear between the two measured concurrencies around it.

    A static batch whose requests finish at different steps runs most of its steps with fewer rows than
    it started with; ``rows`` is then the batch's mean (a bench row's ``row_steps / num_steps``). Outside
    the measured concurrencies the nearest one stands in.

    >>> doc = {"costs": [{"shape": "s", "method": "eagle3", "depth": 1, "k": 1, "concurrency": c,
    ...                   **{p: float(c) for p in PARTS}} for c in (8, 16)]}
    >>> step_costs_at_rows(doc, "s", "eagle3", 1, 12.0)["step_ms"], step_costs_at_rows(doc, "s", "eagle3", 1, 3)["step_ms"]
    (12.0, 8.0)
    """
    depth = 1 if method == "eagle3" else depth
    cs = _concurrencies([doc], shape, method, depth)
    if not cs:
        raise ValueError(f"no {method} costs at depth {depth} for shape={shape!r}")
    lo = max([c for c in cs if c <= rows], default=cs[0])
    hi = min([c for c in cs if c >= rows], default=cs[-1])
    a, b = step_costs(doc, shape, method, k, lo, depth), step_costs(doc, shape, method, k, hi, depth)
    t = 0.0 if hi == lo else (rows - lo) / (hi - lo)
    return {p: a[p] + t * (b[p] - a[p]) for p in PARTS}


def prompt_range(doc: dict) -> tuple[int, int] | None:
    """A ragged run's (LO, HI) prompt lengths (``peagle-lab scale --prompt-range``); None for a uniform run
    (every request ``prompt_tokens`` long, as every run that records no range)."""
    rng = (doc.get("grid") or {}).get("prompt_range")
    return (int(rng[0]), int(rng[1])) if rng else None


def short_rows(doc: Mapping) -> int:
    """How many of a run's c requests hold a one-token prompt (``peagle-lab scale --short-rows``), 0 for most."""
    return int((doc.get("grid") or {}).get("short_rows") or 0)


def with_short_rows(lengths: list[int], n: int) -> list[int]:
    """``lengths`` with its last ``n`` prompts one token long: stand-ins for a continuous batch's idle rows.

    >>> with_short_rows([300, 500, 700, 900], 2), with_short_rows([300], 0)
    ([300, 500, 1, 1], [300])
    """
    return lengths[:len(lengths) - n] + [1] * n if n else lengths


def step_context(doc: dict) -> float:
    """A scale-lab run's mean context a decode step attends to: its mean prompt (``prompt_tokens``, or the
    middle of a ragged run's ``prompt_range``) plus half the tokens it decodes.

    >>> step_context({"grid": {"prompt_tokens": 320, "new_tokens": 24}})
    332.0
    >>> step_context({"grid": {"prompt_tokens": 750, "prompt_range": [50, 1451], "new_tokens": 24}})
    762.5
    """
    grid, rng = doc["grid"], prompt_range(doc)
    prompt = (rng[0] + rng[1]) / 2 if rng else grid["prompt_tokens"]
    return float(prompt + grid["new_tokens"] / 2)


def has_costs(doc: Mapping, shape: str, method: str, depth: int = 1) -> bool:
    """Whether the run ``doc`` has costs for ``method`` at ``shape`` (EAGLE-3's drafter: depth 1, whatever ``depth``).

    >>> has_costs({"costs": [{"shape": "s", "method": "eagle3", "depth": 1}]}, "s", "eagle3", 4)
    True
    """
    depth = 1 if method == "eagle3" else depth
    return any(r["shape"] == shape and r["method"] == method and r["depth"] == depth for r in doc["costs"])


def step_costs_at_context(runs: list[dict], shape: str, method: str, k: int, rows: float, context: float,
                          depth: int = 1) -> dict:
    """:func:`step_costs_at_rows` at a step's mean ``context`` (tokens), linear between the two runs of ``runs``
    whose contexts (:func:`step_context`) lie around it; outside them the nearest run stands in.

    Attention reads every cached token once a step, so its cost grows about linearly with the context; the
    rest of the step does not depend on it. Runs without costs for ``shape`` and ``method`` are passed over, and
    so are runs whose concurrencies do not reach ``rows`` where others do: a run measured at c = 64 alone says
    nothing of a step of one row (its c = 64 step would stand in for it).

    >>> run = lambda p, ms, cs=(1,): {"grid": {"prompt_tokens": p, "new_tokens": 0}, "costs": [{"shape": "s",
    ...     "method": "eagle3", "depth": 1, "k": 1, "concurrency": c, **{q: ms * c for q in PARTS}} for c in cs]}
    >>> runs = [run(100, 1.0), run(300, 2.0), run(900, 3.0, (64,))]
    >>> [step_costs_at_context(runs, "s", "eagle3", 1, 1, ctx)["step_ms"] for ctx in (250, 600)]
    [1.75, 2.0]

    Raises:
        ValueError: no run has costs for ``shape`` and ``method`` at ``depth``.
    """
    depth = 1 if method == "eagle3" else depth
    have = sorted(((step_context(d), d) for d in runs if has_costs(d, shape, method, depth)), key=lambda cd: cd[0])
    if not have:
        raise ValueError(f"no run has {method} costs at depth {depth} for shape={shape!r}")
    have = [cd for cd in have if _reaches(cd[1], shape, method, depth, rows)] or have
    lo = max([cd for cd in have if cd[0] <= context], default=have[0], key=lambda cd: cd[0])
    hi = min([cd for cd in have if cd[0] >= context], default=have[-1], key=lambda cd: cd[0])
    a, b = (step_costs_at_rows(d, shape, method, k, rows, depth) for _, d in (lo, hi))
    t = 0.0 if hi[0] == lo[0] else (context - lo[0]) / (hi[0] - lo[0])
    return {p: a[p] + t * (b[p] - a[p]) for p in PARTS}


def _reaches(doc: dict, shape: str, method: str, depth: int, rows: float) -> bool:
    """Whether a run's concurrencies for ``shape``, ``method`` and ``depth`` reach from below ``rows`` to above it."""
    cs = _concurrencies([doc], shape, method, depth)
    return bool(cs) and cs[0] <= rows <= cs[-1]


def step_costs_ragged(uniform: list[dict], ragged: list[dict], shape: str, method: str, k: int, rows: float,
                      context: float, depth: int = 1) -> dict:
    """The step of a ragged batch (requests of different contexts) of ``rows`` busy rows at mean ``context``.

    At or above the smallest concurrency c_r the ``ragged`` runs measured, :func:`step_costs_at_context` over
    them; one row is one request, so a batch of one is uniform; in between, linear in rows from the ``uniform``
    runs' step at the largest concurrency at or below ``rows`` to the ragged runs' step at c_r. The runs'
    concurrencies are those they measured for ``shape``, ``method`` and ``depth``.

    >>> run = lambda cs, ms, rng=None: {"grid": {"prompt_tokens": 100, "new_tokens": 0, "prompt_range": rng},
    ...     "costs": [{"shape": "s", "method": "eagle3", "depth": 1, "k": 1, "concurrency": c,
    ...                **{q: ms * c for q in PARTS}} for c in cs]}
    >>> uniform, ragged = [run((1, 8), 1.0)], [run((64,), 1.5, [50, 150])]
    >>> [step_costs_ragged(uniform, ragged, "s", "eagle3", 1, r, 100)["step_ms"] for r in (64, 36, 8)]
    [96.0, 52.0, 8.0]
    """
    depth = 1 if method == "eagle3" else depth
    ragged_cs = _concurrencies(ragged, shape, method, depth)
    if not ragged_cs:
        raise ValueError(f"no ragged run has {method} costs at depth {depth} for shape={shape!r}")
    low = ragged_cs[0]
    if rows >= low:
        return step_costs_at_context(ragged, shape, method, k, rows, context, depth)
    top = step_costs_at_context(ragged, shape, method, k, low, context, depth)
    return step_costs_toward(uniform, shape, method, k, rows, context, low, top, depth)


def step_costs_toward(uniform: list[dict], shape: str, method: str, k: int, rows: float, context: float,
                      top_rows: int, top: Mapping[str, float], depth: int = 1) -> dict:
    """A step of ``rows`` busy rows at mean ``context``, linear in rows from the ``uniform`` runs' step at the
    largest concurrency they measured at or below ``rows`` (:func:`step_costs_at_context`) to ``top``, the parts
    of a step of ``top_rows`` rows (a ragged run's, or the context fit's at c). ``rows`` at or above ``top_rows``
    gives ``top``.

    >>> run = {"grid": {"prompt_tokens": 100, "new_tokens": 0}, "costs": [{"shape": "s", "method": "eagle3",
    ...     "depth": 1, "k": 1, "concurrency": c, **{q: float(c) for q in PARTS}} for c in (1, 8)]}
    >>> [step_costs_toward([run], "s", "eagle3", 1, r, 100, 64, {q: 120.0 for q in PARTS})["step_ms"] for r in (36, 64)]
    [64.0, 120.0]
    """
    if rows >= top_rows:
        return dict(top)
    cs = _concurrencies(uniform, shape, method, depth)
    base = max([c for c in cs if c <= rows] or [rows])
    a = step_costs_at_context(uniform, shape, method, k, base, context, depth)
    t = (rows - base) / (top_rows - base)
    return {p: a[p] + t * (top[p] - a[p]) for p in PARTS}


def cell_seed(concurrency: int, k: int) -> int:
    """The seed of the scale lab's cell at (K, c): its prompts' lengths (a ragged run's draw) and tokens."""
    return concurrency * 100 + k


def drawn_lengths(lo: int, hi: int, concurrency: int, gen: torch.Generator) -> list[int]:
    """``concurrency`` prompt lengths drawn uniformly from [``lo``, ``hi``] by ``gen`` (a ragged run's requests)."""
    return torch.randint(lo, hi + 1, (concurrency,), generator=gen).tolist()


def cell_contexts(doc: Mapping, row: Mapping) -> tuple[float, float]:
    """(mean, longest) context of a scale-lab cell's decode steps (``CONTEXTS``): as its ``row`` records them,
    else from the run's grid: the prompts plus half the ``new_tokens`` it decodes (one a step), where a uniform
    run's prompts are all ``prompt_tokens`` long (:func:`step_context`) and a ragged run's are drawn again as
    the run drew them (:func:`drawn_lengths`, seeded by :func:`cell_seed`).

    >>> cell_contexts({"grid": {"prompt_tokens": 320, "new_tokens": 24}}, {"k": 1, "concurrency": 64})
    (332.0, 332.0)
    >>> mean, longest = cell_contexts({"grid": {"prompt_tokens": 300, "prompt_range": [50, 550], "new_tokens": 24}},
    ...                               {"k": 1, "concurrency": 64})
    >>> 250 < mean < 350, 500 < longest <= 562
    (True, True)
    """
    if all(f in row for f in CONTEXTS):
        return float(row["mean_context"]), float(row["longest_context"])
    rng = prompt_range(doc)
    if rng is None:
        return step_context(doc), step_context(doc)
    c = row["concurrency"]
    lengths = with_short_rows(drawn_lengths(*rng, c, torch.Generator().manual_seed(cell_seed(c, row["k"]))),
                              short_rows(doc))
    half = doc["grid"]["new_tokens"] / 2
    return statistics.mean(lengths) + half, max(lengths) + half


def _context_points(runs: list[dict], shape: str, method: str, concurrency: int, depth: int) -> dict[int, list]:
    """K -> [(mean, longest, cost row, the run's file)] of every run's cells at ``shape``, ``method``, depth and c."""
    out: dict[int, list] = {}
    for doc in runs:
        for r in doc["costs"]:
            if (r["shape"], r["method"], r["depth"], r["concurrency"]) == (shape, method, depth, concurrency):
                out.setdefault(r["k"], []).append((*cell_contexts(doc, r), r, doc.get("file", "")))
    return out


def _least_squares(points: list) -> dict[str, tuple[float, float, float]] | None:
    """PART -> (a, b, c) of part ≈ a + b · mean + c · longest over ``points``; None unless the contexts pin all
    three (uniform runs alone have mean = longest: they fix a and b + c only)."""
    x = np.array([[1.0, mean, longest] for mean, longest, *_ in points])
    if len(points) < 3 or np.linalg.matrix_rank(x) < 3:
        return None
    y = np.array([[r[p] for p in PARTS] for _, _, r, _ in points])
    coef = np.linalg.lstsq(x, y, rcond=None)[0]  # [3, parts]
    return {p: tuple(float(v) for v in coef[:, i]) for i, p in enumerate(PARTS)}


def context_fit(runs: list[dict], shape: str, method: str, k: int, concurrency: int, depth: int = 1) -> dict:
    """The least-squares fit step ≈ a + b · mean + c · longest (per part) over ``runs``' cells at a measured K
    and c (:func:`cell_contexts`), with each cell's residual: ``{"coef": {part: (a, b, c)}, "points":
    [{"file", "mean", "longest", "step_ms", "fitted_ms", "residual"}]}`` (residual = fitted − measured, ms).

    Uniform runs place cells at mean = longest; ragged runs, whose longest request lies far above their mean,
    separate the two: the decode-attention kernel's programs each walk one request's keys, so the longest
    request sets the step's pace beside the mean's share of the work.

    Raises:
        ValueError: the runs' cells at K and c do not fix three coefficients (fewer than three, or no ragged run).
    """
    depth = 1 if method == "eagle3" else depth
    points = _context_points(runs, shape, method, concurrency, depth).get(k, [])
    coef = _least_squares(points)
    if coef is None:
        raise ValueError(f"shape={shape!r} {method} K={k} c={concurrency}: {len(points)} runs' cells do not fit "
                         "a + b·mean + c·longest (need three, not all uniform)")
    a, b, c = coef["step_ms"]
    out = []
    for mean, longest, r, file in points:
        fitted = a + b * mean + c * longest
        out.append({"file": file, "mean": mean, "longest": longest, "step_ms": r["step_ms"], "fitted_ms": fitted,
                    "residual": fitted - r["step_ms"]})
    return {"coef": coef, "points": out}


def step_costs_fit(runs: list[dict], shape: str, method: str, k: int, concurrency: int, mean: float,
                   longest: float, depth: int = 1, group: Callable[[int], int] | None = None) -> dict:
    """One step's parts (ms) at c = ``concurrency`` of a batch whose steps attend to ``mean`` and ``longest``
    contexts: :func:`context_fit`'s a + b · mean + c · longest at each K the runs fit, linear in K between them
    (between measured K of ``k``'s group where ``group``, K -> its decode-attention tile, is given).

    >>> run = lambda mean, longest: {"grid": {}, "costs": [{"shape": "s", "method": "eagle3", "depth": 1, "k": k,
    ...     "concurrency": 64, "mean_context": mean, "longest_context": longest,
    ...     **{p: k * (1 + mean / 100 + longest / 200) for p in PARTS}} for k in (1, 3)]}
    >>> runs = [run(100, 100), run(200, 200), run(100, 300)]
    >>> round(step_costs_fit(runs, "s", "eagle3", 2, 64, 150, 400)["step_ms"], 6)  # 2 · (1 + 1.5 + 2)
    9.0

    Raises:
        ValueError: no K has runs that fit (see :func:`context_fit`).
    """
    depth = 1 if method == "eagle3" else depth
    fitted = {}
    for kk, points in _context_points(runs, shape, method, concurrency, depth).items():
        coef = _least_squares(points)
        if coef is not None:
            fitted[kk] = {p: a + b * mean + c * longest for p, (a, b, c) in coef.items()}
    if not fitted:
        raise ValueError(f"shape={shape!r} {method} c={concurrency}: no K whose runs fit a + b·mean + c·longest "
                         "(a ragged run and two uniform ones at that c)")
    return _interpolate(fitted, k, group)


def carried_to(scale: Mapping, device: str, drafter: bool = True) -> dict:
    """The scale lab's costs carried to ``device`` by the ratio of memory bandwidths (a projection).

    The verify pass at small c reads the target's weights once, so it scales with 1 / bandwidth; so do
    the drafter passes where ``drafter`` (the rule of ``peagle_lab.lab.kmodel.device_costs``), else they keep their measured
    time, as passes bound by launch and fixed costs would; prep and host time stay.

    Raises:
        ValueError: the scale lab's device or ``device`` is not a preset.
    """
    measured = preset_of(scale.get("device", ""))
    if measured is None or device not in DEVICES:
        raise ValueError(f"carry {scale.get('device')!r} to {device!r}: both must be presets ({', '.join(DEVICES)})")
    ratio = bandwidth_ratio(measured, device)
    costs = []
    for r in scale["costs"]:
        verify, draft = r["verify_ms"] * ratio, r["draft_ms"] * (ratio if drafter else 1.0)
        costs.append({**r, "verify_ms": verify, "draft_ms": draft,
                      "step_ms": r["step_ms"] - r["verify_ms"] - r["draft_ms"] + verify + draft})
    return {**scale, "costs": costs, "device": f"{device} (projected from {scale['device']})"}


def experts_read(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts ``tokens`` tokens route to in one layer, if each picks ``top_k`` of ``experts`` uniformly:
    E · (1 − (1 − top_k / E)^tokens); 0 for a dense layer (``experts`` 0).

    >>> round(experts_read(32, 4, 1), 2), round(experts_read(32, 4, 8), 1), experts_read(0, 0, 8)
    (4.0, 21.0, 0.0)
    """
    if not experts:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def expert_bound_moe(doc: dict) -> dict:
    """``doc`` with each measured MoE layer replaced by one that costs only the experts its tokens read:
    the dense stand-in's time (``top_k`` experts) × distinct experts read / ``top_k``, read at random
    routing (:func:`experts_read`). The ``NAME+moe`` costs follow.

    It separates what K + 1 verify tokens must cost (more experts' weights to read) from what this lab's
    grouped-GEMM layer (:class:`~peagle_lab.bench.scale_moe.MoELayer`) adds on top: routing, sorting, its launches.
    """
    moe = {}
    for name, rows in (doc.get("moe") or {}).items():
        e, k = doc["shapes"][name]["experts"], doc["shapes"][name]["top_k"]
        moe[name] = rows if isinstance(rows, str) else [
            {**r, "moe_ms": r["dense_ms"] * read / k, "moe_extra_ms": r["dense_ms"] * (read / k - 1.0)}
            for r in rows for read in (experts_read(e, k, r["tokens"]),)]
    out = {**doc, "moe": moe}
    base = [c for c in doc["costs"] if "+" not in c["shape"]]
    out["costs"] = base + _moe_costs(out, base)
    return out
