"""The checks of notebooks 5 and 6: P-EAGLE's speed-up at equal acceptance, and which head weakens with depth.

Each check compares the answer with the worked solution in :mod:`peagle_lab.lab.exercises` and the
committed measurements (the newest answer-length sweep, the shipped heads' ``summary.json``). How a check
answers, and how the notebooks call it, is :mod:`peagle_lab.lab.checks`'s to say; the shared machinery is
:mod:`peagle_lab.lab.checks_base`.
"""
from __future__ import annotations

import math

from . import exercises
from .checks_base import STUB, call_answer, correct

__all__ = ["check_speedup_at_equal_acceptance", "check_weakest_depth"]


# ---------------------------------------------------------------- notebook 5
SWEEP_NAME = "the answer-length sweep"  # where the check's measured rows come from (predict.answer_sweep)
CHECK_CELL = ("code", 1, 7)  # the (workload, c, K) the correct: line reports (code: HumanEval prompts)


def _sweep_rows():
    """Pairs of (P-EAGLE, EAGLE-3) rows of the newest committed answer-length sweep (``predict.answer_sweep``:
    answers decoded to EOS) at the same (workload, c, K), as namespaces."""
    from types import SimpleNamespace as Row

    from .predict import answer_sweep

    try:
        doc, _ = answer_sweep()
    except ValueError:  # an installed package without the repository's docs: the check's own rows suffice
        return []
    rows = {}
    for r in doc["rows"]:
        if r["method"] in ("peagle", "eagle3") and r.get("verify_ms") is not None:
            rows.setdefault((r["workload"], r["concurrency"], r["k"]), {})[r["method"]] = Row(**r)
    return [(cell, pair["peagle"], pair["eagle3"]) for cell, pair in sorted(rows.items()) if len(pair) == 2]


def _speedup_hint(got: float, p, e) -> str:
    """Why ``got`` is not P-EAGLE's speed-up at equal acceptance for rows ``p``, ``e``."""
    want = exercises.speedup_at_equal_acceptance(p, e)
    if math.isclose(got, 1 / want, rel_tol=1e-3):
        return ("that is EAGLE-3 over P-EAGLE: at equal acceptance both yield the same tokens per step, so TPS goes "
                "as 1 / step time; divide EAGLE-3's step by P-EAGLE's")
    if math.isclose(got, e.draft_ms / p.draft_ms, rel_tol=1e-6):
        return ("that compares the drafting alone; every step of both methods also pays the target's verify pass "
                "and the draft-batch preparation, which dilute the cheaper drafting")
    al = getattr(p, "acceptance_length", None), getattr(e, "acceptance_length", None)
    if all(al) and math.isclose(got, (al[0] / p.step_ms) / (al[1] / e.step_ms), rel_tol=1e-6):
        return ("that is the measured ratio, acceptance included; at equal acceptance both heads yield the same "
                "tokens per step, so the acceptance lengths cancel and only the step times remain")
    return (f"expected {want:.3f}: a step costs the verify pass + prep_ms + draft_ms (either method's verify time, "
            "or their mean: both verify the same K + 1 tokens)")


def check_speedup_at_equal_acceptance(speedup_at_equal_acceptance) -> None:
    """Check ``speedup_at_equal_acceptance(peagle_row, eagle3_row)``: P-EAGLE ÷ EAGLE-3 TPS at equal AL.

    Any sound verify convention passes (``exercises.speedup_conventions``: the mean of the two
    verify times, each row's own, either row's for both, or the whole step). Tried on rows of
    its own and on every (workload, c, K) of the newest committed answer-length sweep.

    >>> _ = check_speedup_at_equal_acceptance(exercises.speedup_at_equal_acceptance)  # doctest: +ELLIPSIS
    correct: at equal acceptance P-EAGLE would reach ...x EAGLE-3's tokens/s at c = 1, K = 7 on code ...
    """
    from types import SimpleNamespace as Row

    cases = [(("own", 1, 4), Row(verify_ms=10.0, prep_ms=0.5, draft_ms=2.0), Row(verify_ms=10.0, prep_ms=0.5, draft_ms=7.5)),
             (("own", 1, 4), Row(verify_ms=2.0, prep_ms=0.0, draft_ms=0.4), Row(verify_ms=2.2, prep_ms=0.1, draft_ms=1.6))]
    sweep = _sweep_rows()
    for cell, p, e in sweep + cases:  # the sweep's rows first: they have acceptance, so every hint can fire
        got = call_answer(speedup_at_equal_acceptance, p, e)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise AssertionError(f"return one number (P-EAGLE's TPS over EAGLE-3's), got {type(got).__name__}")
        ok = exercises.speedup_conventions(p, e).values()
        if not min(ok) * (1 - 1e-6) <= got <= max(ok) * (1 + 1e-6):
            where = "the check's own rows" if cell[0] == "own" else f"{SWEEP_NAME}, {cell[0]}, c = {cell[1]}, K = {cell[2]}"
            raise AssertionError(f"{where}: yours is {got:.3f}; {_speedup_hint(got, p, e)}")
    at = next(((p, e) for cell, p, e in sweep if cell == CHECK_CELL), None)
    if at is None:
        correct("P-EAGLE's speed-up at equal acceptance is right on the check's rows")
        return
    got = call_answer(speedup_at_equal_acceptance, *at)
    w, c, k = CHECK_CELL
    correct(f"at equal acceptance P-EAGLE would reach {got:.2f}x EAGLE-3's tokens/s at c = {c}, K = {k} on {w} "
             f"(drafting {at[0].draft_ms:.2f} against {at[1].draft_ms:.2f} ms); right on all {len(sweep)} cells "
             f"of {SWEEP_NAME}")


# ---------------------------------------------------------------- notebook 6
def check_weakest_depth(head, depth, reason) -> None:
    """Check the prediction: which shipped head's held-out agreement falls most with depth, its weakest depth, and why.

    Checked against the shipped heads' ``summary.json`` (``exercises.shipped_depth_agreement``);
    ``reason`` is a key of ``exercises.DEPTH_REASONS``.

    >>> _ = check_weakest_depth("peagle", 7, "a")  # doctest: +ELLIPSIS
    correct: P-EAGLE's agreement falls from 0.84 at depth 0 to 0.48 at depth 7, EAGLE-3's only from 0.80 to 0.76: ...
    >>> _ = check_weakest_depth("peagle", 7, "c")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    AssertionError: distance alone does not explain it: EAGLE-3's depth 6 also predicts 7 tokens ahead ...
    """
    acc = exercises.shipped_depth_agreement()
    want_head, want_depth, _ = exercises.weakest_depth(acc)
    if head is None or depth is None or reason is None:
        raise AssertionError(STUB)
    p, e = acc["peagle"], acc["eagle3"]
    if head not in acc:
        raise AssertionError(f"head should be 'eagle3' or 'peagle', got {head!r}")
    if head != want_head:
        raise AssertionError(f"EAGLE-3 drafts one token a pass and feeds each draft back: its depth d sees the d "
                             "tokens drafted before it, in training (training-time test) as at inference. So its "
                             f"agreement falls only from {e[0]:.2f} at depth 0 to {min(e):.2f}. Which head's deeper "
                             "slots know no more than its first?")
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth < len(p):
        raise AssertionError(f"depth should be a whole number from 0 to {len(p) - 1}, got {depth!r}")
    if depth != want_depth:
        first = ("depth 0 is the one slot fed the target's own hidden state of the token before it: it agrees most"
                 if depth == 0 else f"depth {depth} agrees {p[depth]:.2f}, not the least")
        raise AssertionError(f"{first}. Each deeper P-EAGLE slot is given the same mask embedding and shared_hidden "
                             "as the one before, yet must guess one token further ahead")
    if reason not in exercises.DEPTH_REASONS:
        raise AssertionError(f"reason should be one of {sorted(exercises.DEPTH_REASONS)}, got {reason!r}")
    if reason == "b":
        import json

        from ..heads import HEADS_DIR

        curve = json.loads((HEADS_DIR / "peagle" / "summary.json").read_text())["curve"]
        a, z = curve[0], curve[-1]
        raise AssertionError(f"COD does train the deep depths on fewer positions (at least r_min = 20 % of them), but "
                             f"fewer examples slow learning, they do not cap it: over the shipped head's last "
                             f"{(z['tokens'] - a['tokens']) / 1e6:.0f} M training tokens its depth-{want_depth} agreement "
                             f"moved from {a['depth_acc'][want_depth]:.3f} to {z['depth_acc'][want_depth]:.3f}, still far "
                             f"under depth 0's {z['depth_acc'][0]:.2f}. Look at what a deep slot is given as input")
    if reason == "c":
        raise AssertionError(f"distance alone does not explain it: EAGLE-3's depth {len(e) - 1} also predicts "
                             f"{len(e)} tokens ahead of the last verified one and still agrees {e[-1]:.2f}. What "
                             "does its slot see that P-EAGLE's does not?")
    correct(f"P-EAGLE's agreement falls from {p[0]:.2f} at depth 0 to {p[want_depth]:.2f} at depth {want_depth}, "
             f"EAGLE-3's only from {e[0]:.2f} to {min(e):.2f}: {exercises.DEPTH_REASONS['a']}, which EAGLE-3's "
             "slot sees")

