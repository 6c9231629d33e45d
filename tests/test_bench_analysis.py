"""Best-K selection, method ratios, pooled acceptance and the goals, on hand-made rows."""
from __future__ import annotations

import pytest

from dataclasses import replace

from peagle_lab.bench.analysis import best_k, check_goals, pooled_acceptance, ratios, rows_busy, step_split
from peagle_lab.bench.schema import BenchResult, BenchRow

RUN_INFO = {"device": "test", "torch": "x", "command": "x", "commit": None, "date": "x"}


def row(method, k, c, tps, workload="chat", drafts=0, accepted=(), source="peagle_lab", tpot=4.0, step=5.0):
    acc = sum(accepted)
    return BenchRow(method, k, c, workload, 0.0, tps, tpot, 1 + acc / drafts if drafts else 1.0,
                    [a / drafts for a in accepted] if drafts else [], drafts, acc, 3.0, 0.5, 1.0, 1000,
                    source=source, step_ms=step)


def test_best_k_takes_the_fastest_k_per_method_concurrency_and_workload():
    rows = [row("eagle3", 3, 1, 100.0), row("eagle3", 5, 1, 130.0), row("eagle3", 7, 1, 120.0),
            row("eagle3", 3, 64, 900.0), row("eagle3", 5, 64, 800.0),
            row("peagle", 5, 1, 150.0), row("peagle", 7, 1, 150.0),  # a tie: the smaller K wins
            row("eagle3", 7, 1, 999.0, workload="code"), row("baseline", 0, 1, 80.0),
            row("baseline", 0, 1, 5000.0, source="transformers")]  # another source never competes
    best = best_k(rows)
    assert {key: r.k for key, r in best.items()} == {
        ("chat", 0.0, "eagle3", 1): 5, ("chat", 0.0, "eagle3", 64): 3, ("chat", 0.0, "peagle", 1): 5,
        ("code", 0.0, "eagle3", 1): 7, ("chat", 0.0, "baseline", 1): 0}
    assert best[("chat", 0.0, "baseline", 1)].tps == 80.0
    assert best_k(rows, source="transformers")[("chat", 0.0, "baseline", 1)].tps == 5000.0


def test_ratios_compare_best_k_rows_where_both_methods_ran():
    rows = [row("eagle3", 3, 1, 100.0), row("eagle3", 5, 1, 120.0), row("peagle", 7, 1, 180.0),
            row("peagle", 7, 8, 400.0)]  # no EAGLE-3 at c=8: no ratio there
    (r,) = ratios(rows)
    assert (r.concurrency, r.numerator.k, r.denominator.k) == (1, 7, 5)
    assert r.ratio == pytest.approx(1.5)


def test_pooled_acceptance_weights_cells_by_their_drafts():
    rows = [row("peagle", 2, 1, 1.0, drafts=10, accepted=(10, 10)),
            row("peagle", 2, 8, 1.0, drafts=30, accepted=(0, 0)), row("baseline", 0, 1, 1.0)]
    (a,) = pooled_acceptance(rows)
    assert a.num_drafts == 40 and a.acceptance_length == pytest.approx(1.5)
    assert a.per_position == pytest.approx((0.25, 0.25))


def test_goals_report_pass_miss_and_missing_with_evidence():
    rows = [row("eagle3", 5, 1, 100.0, "chat"), row("peagle", 5, 1, 160.0, "chat"),  # 1.6×: pass
            row("eagle3", 5, 1, 100.0, "code"), row("peagle", 5, 1, 120.0, "code"),  # 1.2×: miss
            row("baseline", 0, 1, 50.0, "code", tpot=3.0),  # P-EAGLE/plain on code: 2.4×
            row("baseline", 0, 1, 40.0, "code", source="transformers", tpot=3.6),
            row("baseline", 0, 1, 60.0, "chat", tpot=1.5, step=1.25),  # the plain step: 1.25 ms, pass
            row("baseline", 0, 1, 50.0, "chat", source="transformers", tpot=2.7),  # 1.8× ours: miss at 2×
            row("peagle", 7, 1, 150.0, "chat", step=1.6),  # P-EAGLE K = 7 step 1.6 ms: miss at 1.5
            row("eagle3", 3, 1, 100.0, "long"), row("peagle", 3, 1, 100.0, "long")]  # long: no ratio goal
    goals = {g.name: g for g in check_goals(BenchResult(RUN_INFO, {}, rows))}
    assert goals["P-EAGLE/EAGLE-3 TPS, c=1, chat"].passed is True
    miss = goals["P-EAGLE/EAGLE-3 TPS, c=1, code"]
    assert miss.passed is False and miss.measured == pytest.approx(1.2) and miss.bound == "≥ 1.3×"
    assert "short by 8%" in miss.detail and "verify 3.00" in miss.detail  # the step split as evidence
    assert goals["P-EAGLE/EAGLE-3 TPS, c=64, chat"].passed is None
    assert not any("long" in name for name in goals)
    assert goals["P-EAGLE/baseline TPS, c=1, code"].measured == pytest.approx(2.4)
    ref_code = goals["transformers/our baseline TPOT, c=1, code"]
    ref_chat = goals["transformers/our baseline TPOT, c=1, chat"]
    assert ref_code.measured == pytest.approx(1.2) and ref_code.passed is True  # ≥ 1× off the headline cell
    assert ref_chat.measured == pytest.approx(1.8) and ref_chat.passed is False and ref_chat.target == 2.0
    plain, k7 = goals["plain step, c=1, chat"], goals["P-EAGLE K=7 step, c=1, chat"]
    assert plain.passed is True and plain.value() == "1.25 ms" and plain.bound == "≤ 1.3 ms"
    assert k7.passed is False and k7.measured == pytest.approx(1.6)
    assert goals["plain step, c=64, chat"].passed is None


def test_rows_busy_is_the_share_of_row_steps_whose_request_was_still_decoding():
    """A batch of 4 whose requests need 10, 10, 10 and 30 steps runs 30 steps: 60 of 120 row-steps busy.
    The step split says so at c > 1 (the c = 64 ratio goals' evidence); at c = 1 it stays silent."""
    spec = replace(row("peagle", 4, 4, 100.0, drafts=60, accepted=(30, 20, 10, 5)), num_steps=30)
    assert rows_busy(spec) == pytest.approx(0.5)
    assert step_split(spec).endswith("rows busy 50% (30 steps)")
    # plain decoding: the prefill makes each request's first token, every step one more per busy row
    plain = replace(row("baseline", 0, 4, 100.0), output_tokens=4 * 33, num_prompts=4, num_steps=32)
    assert rows_busy(plain) == pytest.approx(1.0)
    ragged = replace(plain, output_tokens=4 + 32 + 3 * 8, num_steps=32)  # one request of 33 tokens, three of 9
    assert rows_busy(ragged) == pytest.approx((32 + 3 * 8) / (4 * 32))
    alone = replace(spec, concurrency=1)
    assert "rows busy" not in step_split(alone)
    assert rows_busy(replace(spec, num_steps=None)) is None
    assert rows_busy(replace(plain, num_prompts=None)) is None
