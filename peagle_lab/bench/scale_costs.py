"""The scale lab's document read back: full-depth step costs per cell, the per-layer rule's check, and the
step at any K (``step_costs``), which ``peagle_lab.lab.predict`` combines with acceptance.

The document is what ``peagle_lab.bench.scale.run_scale`` writes (``rows`` of measured engine cells,
``grid``, ``shapes``, ``moe``); these functions are pure and need no GPU.
"""
from __future__ import annotations

__all__ = ["PARTS", "full_depth_costs", "layer_check", "step_costs"]

PARTS = ("verify_ms", "prep_ms", "draft_ms", "host_ms", "step_ms")


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
                cell = {p: r[p] for p in PARTS}
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


def _interpolate(points: dict[int, dict], k: int) -> dict:
    """Linear in K between the two nearest measured K (extrapolated past the ends)."""
    ks = sorted(points)
    if k in points or len(ks) == 1:
        return dict(points.get(k, points[ks[0]]))
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
