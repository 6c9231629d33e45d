"""``results.json`` of a training session: heads, acceptance per K and per position, curves, goals.

``scripts/gpu/train_heads_h200.sh`` exports every trained head with a ``summary.json`` (training,
learning curve, the engine's acceptance at each K on held-out prompts and on benchmark
workloads). :func:`training_results` gathers them with the data card and the throughput
benchmark into one document, and states the issue's goals next to what was measured.

    python -m peagle_lab.train.report SHIP_DIR --out results.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

GOALS = {"eagle3_AL_at_K3": 2.2, "peagle_AL_at_K7": 2.6}


def _acceptance(rows: list[dict]) -> dict:
    return {int(r["k"]): {"AL": round(r["acceptance_length"], 4),
                          "per_position": [round(a, 4) for a in r["per_position_acceptance"]],
                          "tps": round(r.get("tps", 0.0)), "prompts": r.get("num_prompts")} for r in rows}


def head_entry(summary: dict) -> dict:
    """The part of one head's ``summary.json`` that a results document keeps."""
    cum = summary.get("cumulative") or {}
    return {
        "method": summary.get("method"), "num_hidden_layers": summary.get("num_hidden_layers"),
        "draft_vocab_size": summary.get("draft_vocab_size"), "vocab_coverage": summary.get("vocab_coverage"),
        "steps": summary.get("steps"), "wall_s": summary.get("wall_s"), "world_size": summary.get("world_size", 1),
        "tokens": summary.get("tokens"), "tokens_per_s": summary.get("tokens_per_s"),
        "cumulative_tokens": cum.get("tokens", summary.get("tokens")), "warm_start": summary.get("warm_start"),
        "first_loss": summary.get("first_loss"), "last_loss": summary.get("last_loss"),
        "heldout_loss": summary.get("heldout_loss"), "heldout_depth_acc": summary.get("heldout_depth_acc"),
        "acceptance": _acceptance(summary.get("acceptance", [])),
        "workloads": {name: _acceptance(rows) for name, rows in (summary.get("workloads") or {}).items()},
        "curve": [{k: p[k] for k in ("step", "tokens", "loss", "depth_acc", "expected_per_position") if k in p}
                  for p in summary.get("curve", [])],
        "baseline_tps": summary.get("baseline_tps"), "config": summary.get("config"),
        "command": summary.get("command"), "eval_command": summary.get("eval_command"),
    }


def conditional_acceptance(per_position: list[float]) -> list[float | None]:
    """Each position's acceptance given that the one before it was accepted (the first: as it is).

    Per-position acceptance is cumulative (a draft counts only after every earlier one was accepted), so two
    heads' later positions compare only as ratios: this is where P-EAGLE and EAGLE-3 part (training.md).

    >>> conditional_acceptance([0.8, 0.4, 0.1, 0.0, 0.0])
    [0.8, 0.5, 0.25, 0.0, None]
    """
    out, before = [], 1.0
    for p in per_position:
        out.append(round(p / before, 4) if before > 0 else None)
        before = p
    return out


def goals(heads: dict) -> dict:
    """The issue's acceptance numbers from the best head of each method (the one its goal measures).

    EAGLE-3 is ranked by AL at K=3 and P-EAGLE by AL at K=7, the K of each goal.

    >>> h = {"e": {"method": "eagle3", "acceptance": {3: {"AL": 2.0, "per_position": [0.6, 0.4, 0.0]},
    ...                                               7: {"AL": 2.1, "per_position": [0.6] * 7}}},
    ...      "p1": {"method": "peagle", "acceptance": {3: {"AL": 2.1, "per_position": [0.6] * 3},
    ...                                                7: {"AL": 2.2, "per_position": [0.6] * 7}}},
    ...      "p4": {"method": "peagle", "acceptance": {3: {"AL": 2.2, "per_position": [0.7] * 3},
    ...                                                7: {"AL": 2.7, "per_position": [0.7] * 7}}}}
    >>> g = goals(h)
    >>> g["peagle_head"], g["peagle_AL_at_K7"], g["peagle_AL_at_K7_met"], g["eagle3_AL_at_K3_met"]
    ('p4', 2.7, True, False)
    >>> round(g["peagle_AL_gain_K3_to_K7"], 3)
    0.5
    >>> g["peagle_conditional_at_K7"][:3]
    [0.7, 1.0, 1.0]
    """
    def al(name, k):
        return ((heads.get(name) or {}).get("acceptance") or {}).get(k, {}).get("AL")

    def best(method, k):
        names = [n for n, h in heads.items() if h.get("method") == method]
        return max(names, key=lambda n: al(n, k) or 0.0, default=None)

    e3, pe = best("eagle3", 3), best("peagle", 7)
    out = {"eagle3_head": e3, "peagle_head": pe,
           "eagle3_AL_at_K3": al(e3, 3), "peagle_AL_at_K7": al(pe, 7),
           "eagle3_AL_at_K7": al(e3, 7), "peagle_AL_at_K3": al(pe, 3)}
    for m, name in (("eagle3", e3), ("peagle", pe)):
        a3, a7 = al(name, 3), al(name, 7)
        out[f"{m}_AL_gain_K3_to_K7"] = a7 - a3 if a3 is not None and a7 is not None else None
        acc = (heads.get(name) or {}).get("acceptance") or {}
        out[f"{m}_per_position_at_K7"] = pos = (acc.get(7) or {}).get("per_position")
        out[f"{m}_conditional_at_K7"] = conditional_acceptance(pos) if pos else None
    for key, goal in GOALS.items():
        out[f"{key}_goal"] = goal
        out[f"{key}_met"] = out[key] is not None and out[key] >= goal
    e7, p7 = out["eagle3_AL_at_K7"], out["peagle_AL_at_K7"]
    out["peagle_over_eagle3_AL_at_K7"] = p7 / e7 if e7 and p7 else None
    return out


def depth_study(summaries: list[Path]) -> dict:
    """P-EAGLE heads of different depths trained side by side: layers, steps, tokens, AL per K.

    >>> depth_study([])
    {}
    """
    out = {}
    for f in summaries:
        s = json.loads(Path(f).read_text())
        e = head_entry(s)
        out[f"{s.get('num_hidden_layers')}-layer"] = {k: e[k] for k in ("num_hidden_layers", "steps", "wall_s", "tokens",
                                                                       "tokens_per_s", "heldout_loss", "heldout_depth_acc",
                                                                       "acceptance", "command", "eval_command")}
    return out


def training_results(ship: Path | str, depth: list[Path] = (), depth_choice: Path | None = None) -> dict:
    """Gather ``ship/heads/*/summary.json``, ``ship/data/card.json`` and ``ship/throughput.json``.

    Args:
        ship: the packaged session folder.
        depth: summaries of a depth study (P-EAGLE heads of several depths, same budget each).
        depth_choice: ``depth_choice.json`` of ``scripts/gpu/depth_bench_h200.sh`` (depths ranked by TPS).
    """
    ship = Path(ship)
    heads = {p.parent.name: head_entry(json.loads(p.read_text())) for p in sorted(ship.glob("heads/*/summary.json"))}
    if not heads:
        raise ValueError(f"{ship}: no heads/*/summary.json (export heads with `peagle-lab train-eval` first)")
    out = {"heads": heads, "goals": goals(heads)}
    card = ship / "data" / "card.json"
    if card.is_file():
        c = json.loads(card.read_text())
        out["data"] = {k: c.get(k) for k in ("splits", "timings_s", "throughput", "world_size", "seed", "config")
                       if k in c}
    bench = ship / "throughput.json"
    if bench.is_file():
        b = json.loads(bench.read_text())
        out["throughput"] = [{k: r.get(k) for k in ("method", "tokens_per_s", "step_ms_median", "mfu",
                                                     "achieved_tflops", "peak_memory_gib", "split_ms")}
                             for r in b.get("results", [])]
    if depth:
        out["depth_study"] = depth_study(list(depth))
    if depth_choice is not None:
        out.setdefault("depth_study", {})["by_tps"] = json.loads(Path(depth_choice).read_text())
    stages = ship / "stage_seconds.json"
    if stages.is_file():
        out["stage_seconds"] = json.loads(stages.read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m peagle_lab.train.report", description=__doc__.splitlines()[0])
    p.add_argument("ship", help="folder with heads/*/summary.json (and data/card.json, throughput.json)")
    p.add_argument("--out", required=True)
    p.add_argument("--depth", nargs="*", default=[], help="summary.json files of a depth study")
    p.add_argument("--depth-choice", default=None, help="depth_choice.json of scripts/gpu/depth_bench_h200.sh")
    args = p.parse_args(argv)
    from ..models.checkpoints import write_json

    res = training_results(args.ship, [Path(d) for d in args.depth], args.depth_choice)
    write_json(Path(args.out), res)
    print(json.dumps(res["goals"], indent=2))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
