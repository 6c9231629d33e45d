"""The sweep: planning, aggregation, skipping rules, and a tiny end-to-end run of the CLI."""
from __future__ import annotations

import csv
import json
import sys

import pytest

from peagle_lab.bench.cli import main as bench_main
from peagle_lab.bench.schema import read_json
from peagle_lab.bench.sweep import Cell, SweepConfig, cell_row, measure_cell, plan_cells, run_sweep
from peagle_lab.bench.workloads import HashTokenizer, load_workload
from peagle_lab.config import SpecConfig
from peagle_lab.engine import GenerationResult, Metrics, SpecDecoder, StepTrace
from peagle_lab.testing import tiny_drafter, tiny_target

RUN_INFO = {"device": "test", "torch": "x", "command": "x", "commit": None, "date": "x"}


def test_full_plan_is_the_issue_grid():
    cfg = SweepConfig()
    cells = plan_cells(cfg)
    main = 3 * 7 * (1 + 3 + 3)  # workloads × c × (baseline + EAGLE-3 K∈{3,5,7} + P-EAGLE K∈{3,5,7})
    extra = 3 * 2 * 2 * 5  # workloads × c∈{1,64} × methods × K∈{1,2,4,6,8}
    assert len(cells) == len(set(cells)) == main + extra
    assert cells[0] == Cell("chat", "baseline", 0, 1) and cells[main].k == 1
    assert {c.k for c in cells} == {0, *range(1, 9)}


def test_prompts_per_cell_are_whole_batches():
    cfg = SweepConfig(min_prompts=4)
    assert [cfg.num_prompts(c) for c in (1, 2, 3, 4, 8, 64)] == [4, 4, 6, 4, 8, 64]


@pytest.mark.parametrize("kw, message", [
    (dict(methods=("medusa",)), "methods"), (dict(ks=(0,)), "K"), (dict(ks=()), "ks is empty"),
    (dict(concurrencies=()), "concurrencies"), (dict(temperature=-1), "temperature"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(long_context_tokens=(10, 5)), "long_context_tokens"),
    (dict(time_budget_s=0), "time_budget_s"), (dict(workloads=("poems",)), "workloads"),
    (dict(repeats=0), "repeats"),
])
def test_bad_configs_raise_value_errors(kw, message):
    with pytest.raises(ValueError, match=message):
        SweepConfig(**kw)


def _result(tokens_per_request, steps, drafts, accepted, per_pos, prefill_s, decode_s, c=2):
    m = Metrics("peagle", 3, c, len(steps), drafts, drafts * 3, accepted, per_pos, tokens_per_request * c,
                prefill_s, decode_s)
    return GenerationResult([[0] * tokens_per_request] * c, m, steps)


def test_cell_row_aggregates_batches_and_takes_medians_of_drafting_steps():
    s = lambda v, p, d, f=1: StepTrace(0, v, p, d, (0,), f)  # noqa: E731
    a = _result(9, [s(3.0, 0.4, 0.5), s(5.0, 0.6, 0.7), s(4.0, 0.0, 0.0, f=0)], 4, 4, (3, 1, 0), 0.01, 0.03)
    b = _result(9, [s(4.0, 0.5, 0.6), s(4.0, 0.0, 0.0, f=0)], 2, 2, (1, 1, 0), 0.01, 0.02)
    row = cell_row(Cell("chat", "peagle", 3, 2), [a, b], SweepConfig(max_new_tokens=9))
    assert row.output_tokens == 36 and row.num_prompts == 4 and row.num_steps == 5
    assert row.tps == pytest.approx(36 / 0.07)
    assert row.tpot_ms == pytest.approx(1000 * 0.05 / 16)  # 8 decode tokens per request per batch
    assert row.acceptance_length == pytest.approx(1 + 6 / 6)
    assert row.per_position_acceptance == pytest.approx([4 / 6, 2 / 6, 0.0])
    assert row.verify_ms == 4.0  # median of all steps
    assert (row.prep_ms, row.draft_ms) == (0.5, 0.6)  # last steps draft nothing and are left out


def _tiny():
    target = tiny_target()
    return target, HashTokenizer(target.config.vocab_size), {m: tiny_drafter(target, m) for m in ("eagle3", "peagle")}


# The draft-batch kernels have their own parity tests; interpreting them here only costs time.
TORCH_KERNELS = ["--kernel-backend", "torch"]


def test_cells_over_the_budgets_are_skipped_with_reasons():
    target, tok, drafters = _tiny()
    need = max(p.num_tokens for p in load_workload("chat", 2, 0, tok)) + 4 + 2 + 1  # prompt + new + K + 1
    cfg = SweepConfig(workloads=("chat",), ks=(2,), extra_ks=(), concurrencies=(1, 2), max_new_tokens=4,
                      min_prompts=2, reference=False, max_batch_tokens=need, kernel_backend="torch")
    res = run_sweep(target, tok, drafters, cfg, run_info=RUN_INFO, progress=False)
    assert {r.concurrency for r in res.rows} == {1}  # c=2 needs twice the KV block
    assert {s.concurrency for s in res.skipped} == {2} and "max_batch_tokens" in res.skipped[0].reason
    cfg = SweepConfig(workloads=("chat",), ks=(2,), extra_ks=(), concurrencies=(1,), max_new_tokens=4,
                      reference=False, time_budget_s=1e-9, kernel_backend="torch")
    res = run_sweep(target, tok, drafters, cfg, run_info=RUN_INFO, progress=False)
    assert not res.rows and len(res.skipped) == 3 and "time budget" in res.skipped[0].reason


def test_tiny_end_to_end_writes_json_csv_html_with_every_cell(tmp_path, capsys):
    out = tmp_path / "bench"
    assert bench_main(["--tiny", "--out", str(out), "--no-progress", *TORCH_KERNELS]) == 0
    res = read_json(out / "bench.json")
    planned = plan_cells(SweepConfig(workloads=("chat", "code", "long"), concurrencies=(1, 2), ks=(2,),
                                     extra_ks=(3,), extra_ks_at=(2,)))
    ours = {(r.workload, r.method, r.k, r.concurrency) for r in res.rows if r.source == "peagle_lab"}
    assert ours == {(c.workload, c.method, c.k, c.concurrency) for c in planned} and not res.skipped
    refs = [r for r in res.rows if r.source == "transformers"]
    assert {(r.workload, r.concurrency) for r in refs} == {("chat", 1), ("code", 1)}
    assert all(r.agreement == 1.0 for r in refs)  # float32 on the CPU: the same greedy tokens as ours
    mine = [r for r in res.rows if r.source == "peagle_lab"]
    assert all(0 < r.extra["first_draft_ms"] < r.prefill_ms for r in mine if r.k)  # the prefill's draft share
    assert all("first_draft_ms" not in r.extra for r in mine if not r.k)
    assert res.config["ignore_eos"] is False  # the default: answers stop at EOS, at most 8 tokens here
    assert all(0 < r.output_tokens <= r.num_prompts * 8 for r in res.rows)
    assert res.run_info["command"].startswith("python -m peagle_lab.bench.cli --tiny")
    assert res.config["kernel_backend"] == "torch"
    assert res.config["heads"] == {"eagle3": "random (tiny)", "peagle": "random (tiny)"}
    with open(out / "bench.csv") as f:
        assert len(list(csv.DictReader(f))) == len(res.rows)
    html = (out / "report.html").read_text()
    assert "<script src='plotly.min.js'>" in html and "Goals" in html and html.count("plotly-graph-div") >= 9
    assert (out / "plotly.min.js").stat().st_size > 1_000_000
    printed = capsys.readouterr().out
    assert "P-EAGLE tok/s" in printed and "reference: transformers static cache, chat, c=1" in printed
    json.loads((out / "bench.json").read_text())  # plain JSON, readable without peagle_lab


def test_the_sweep_runs_without_plotly(tmp_path, capsys, monkeypatch):
    """The H200 image has no plotly: JSON and CSV are written, the HTML is left for later."""
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.delitem(sys.modules, "peagle_lab.bench.plots", raising=False)
    out = tmp_path / "bench"
    argv = ["--tiny", "--workloads", "chat", "-c", "1", "--extra-k", "--no-reference", "--out", str(out),
            *TORCH_KERNELS]
    assert bench_main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["bench.csv", "bench.json"]
    assert "plotly is not installed" in capsys.readouterr().out


def test_draft_window_and_eager_prefill_flags_reach_the_run(tmp_path):
    out = tmp_path / "bench"
    argv = ["--tiny", "--workloads", "chat", "-c", "1", "-k", "2", "--extra-k", "--no-reference", "--out", str(out),
            "--no-progress", *TORCH_KERNELS]
    assert bench_main([*argv, "--draft-window", "3", "--eager-prefill", "--continuous", "2", "--refill-divisor", "8",
                       "--repeats", "2"]) == 0
    res = read_json(out / "bench.json")
    assert res.config["draft_window"] == {"eagle3": 3, "peagle": 3} and res.config["prefill_graphs"] is False
    assert res.config["repeats"] == 2 and all(len(r.extra["tps_runs"]) == 2 for r in res.rows)
    assert (res.config["continuous"], res.config["refill_divisor"]) == (2, 8)
    assert res.config["first_draft_graphs"] is True and res.config["decode_attention"] == "auto"
    assert bench_main([*argv, "--prefill-graphs", "--eager-first-draft", "--decode-attention", "sdpa"]) == 0
    res = read_json(out / "bench.json")
    assert res.config["prefill_graphs"] is True and res.config["first_draft_graphs"] is False
    assert res.config["decode_attention"] == "sdpa"
    with pytest.raises(SystemExit):
        bench_main([*argv, "--first-draft-graphs", "--eager-first-draft"])
    assert bench_main([*argv, "--draft-window", "none"]) == 0
    res = read_json(out / "bench.json")
    assert res.config["draft_window"] == {"eagle3": None, "peagle": None} and res.config["prefill_graphs"] == "auto"


@pytest.mark.parametrize("flags, message", [
    (["--draft-window", "0"], "--draft-window '0' must be a positive int or 'none'"),
    (["--prefill-graphs", "--eager-prefill"], "--prefill-graphs and --eager-prefill exclude each other"),
])
def test_bad_draft_window_or_prefill_flags_are_one_line(tmp_path, capsys, flags, message):
    assert bench_main(["--tiny", *flags, "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"bench: error: {message}\n"


def test_cli_reports_bad_flags_in_one_line(tmp_path, capsys):
    assert bench_main(["--tiny", "-k", "0", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench: error:") and "K=0" in err and err.count("\n") == 1


@pytest.mark.parametrize("method,k", [("baseline", 0), ("peagle", 2)])
def test_every_batch_of_a_cell_is_warmed_before_it_is_timed_for_every_method(method, k):
    # A prompt shape's first prefill is slow; warming only some batches timed plain decoding's
    # other prefills cold while the speculative cells ran warm (an unfair baseline).
    target = tiny_target()
    engine = SpecDecoder(target, tiny_drafter(target, method) if k else None,
                         SpecConfig(method=method, num_speculative_tokens=max(k, 1)))
    calls = []
    real = engine.generate

    def spy(batch, **kw):
        calls.append((tuple(map(tuple, batch)), kw["max_new_tokens"]))
        return real(batch, **kw)

    engine.generate = spy
    prompts = load_workload("chat", 3, tokenizer=HashTokenizer(target.config.vocab_size))
    cfg = SweepConfig(max_new_tokens=12, min_prompts=3)
    row, _ = measure_cell(engine, Cell("chat", method, k, 1), prompts, cfg)
    batches = [(tuple(p.token_ids),) for p in prompts[:3]]
    warm, timed = calls[:3], calls[3:]
    assert [b for b, _ in warm] == batches and all(n < 12 for _, n in warm)  # short, untimed
    assert [b for b, _ in timed] == batches and all(n == 12 for _, n in timed)
    assert row.num_prompts == 3


class _TimedEngine:
    """An engine stand-in whose timed calls take the walls given, one per call, and tag their tokens."""

    warmup_s, compiled = 0.0, False

    def __init__(self, walls):
        self.walls, self.timed = list(walls), 0

    def warm_widths(self, c):
        return []

    def generate(self, batch, max_new_tokens, **kw):
        if max_new_tokens < 9:  # the warm-up
            return _result(max_new_tokens, [], 0, 0, (), 0.0, 1.0, c=len(batch))
        wall = self.walls[self.timed]
        self.timed += 1
        res = _result(max_new_tokens, [], 0, 0, (), wall / 4, 3 * wall / 4, c=len(batch))
        return GenerationResult([[self.timed] * max_new_tokens] * len(batch), res.metrics, res.trace)


def test_repeats_time_a_cell_several_times_and_keep_the_pass_of_median_tps():
    """One noisy pass (a slow prefill) must not set a cell's row: of three passes the median one is kept,
    every pass's TPS is recorded, and the tokens returned are that pass's."""
    prompts = load_workload("chat", 2, tokenizer=HashTokenizer(100))
    cfg = SweepConfig(max_new_tokens=10, min_prompts=2, repeats=3)
    engine = _TimedEngine([0.5, 0.1, 0.2])  # seconds a pass (one batch of 2 at c = 2)
    row, tokens = measure_cell(engine, Cell("chat", "baseline", 0, 2), prompts, cfg)
    assert engine.timed == 3
    assert row.extra["tps_runs"] == [40.0, 200.0, 100.0] and row.tps == pytest.approx(100.0)
    assert tokens == [[3] * 10] * 2  # the third pass's
    two = measure_cell(_TimedEngine([0.5, 0.1]), Cell("chat", "baseline", 0, 2), prompts,
                       SweepConfig(max_new_tokens=10, min_prompts=2, repeats=2))[0]
    assert two.tps == pytest.approx(40.0)  # an even count keeps the lower median
    one = measure_cell(_TimedEngine([0.5]), Cell("chat", "baseline", 0, 2), prompts,
                       SweepConfig(max_new_tokens=10, min_prompts=2))[0]
    assert "tps_runs" not in one.extra and one.tps == pytest.approx(40.0)


def test_continuous_cells_decode_n_times_c_requests_in_one_call_with_prompts_in_turn():
    cfg = SweepConfig(min_prompts=4, continuous=3)
    assert [cfg.num_prompts(c) for c in (1, 2, 8)] == [4, 6, 24]  # c = 1 stays one request at a time
    with pytest.raises(ValueError, match="continuous"):
        SweepConfig(continuous=-1)
    target = tiny_target()
    engine = SpecDecoder(target, tiny_drafter(target, "peagle"), SpecConfig(method="peagle", num_speculative_tokens=2))
    calls = []
    real = engine.generate
    engine.generate = lambda batch, **kw: calls.append((len(batch), kw)) or real(batch, **kw)
    prompts = load_workload("chat", 5, tokenizer=HashTokenizer(target.config.vocab_size))
    row, tokens = measure_cell(engine, Cell("chat", "peagle", 2, 4), prompts, SweepConfig(max_new_tokens=10,
                                                                                          continuous=3))
    # a warm-up that is the timed call itself (its admission groups, so their widths' graphs, are the timed
    # call's), then the timed call; prompts 0-4 taken in turn
    assert [(n, kw["concurrency"], kw["max_new_tokens"]) for n, kw in calls] == [(12, 4, 10), (12, 4, 10)]
    assert row.num_prompts == 12 and row.extra["continuous"] and tokens[5] == tokens[0]  # prompt 0 again
    plain = SpecDecoder(target, None, SpecConfig(method="baseline"))
    assert tokens[:5] == plain.generate([list(p.token_ids) for p in prompts], max_new_tokens=10,
                                        eos_token_ids=()).tokens


def test_a_continuous_sweep_caps_the_prompts_it_loads_at_the_workload_size(tmp_path):
    target = tiny_target()
    cfg = SweepConfig(methods=("baseline", "peagle"), ks=(2,), extra_ks=(), concurrencies=(64,), workloads=("chat",),
                      max_new_tokens=4, min_prompts=4, continuous=2, refill_divisor=8, reference=False,
                      cuda_graphs=False)
    drafters = {"peagle": tiny_drafter(target, "peagle")}
    result = run_sweep(target, HashTokenizer(target.config.vocab_size), drafters, cfg, run_info=RUN_INFO,
                       progress=False)
    assert result.config["prompts"]["chat"]["num"] == 80  # 128 requests from the 80 chat prompts
    assert {r.num_prompts for r in result.rows} == {128}
    assert result.config["refill_divisor"] == 8


def test_tpot_of_a_continuous_call_is_per_row_not_per_call():
    """8 requests of 9 tokens through 2 rows in 64 ms of decoding: each row made 32 decode tokens, 2 ms each."""
    m = Metrics("peagle", 3, 8, 20, 20, 60, 10, (6, 3, 1), 72, 0.01, 0.064)
    row = cell_row(Cell("chat", "peagle", 3, 2), [GenerationResult([[0] * 9] * 8, m, [])], SweepConfig(max_new_tokens=9))
    assert row.tpot_ms == pytest.approx(2.0) and row.num_prompts == 8


def test_answers_stop_at_eos_by_default_and_ignore_eos_is_the_labelled_variant():
    import argparse

    from peagle_lab.bench.cli import add_bench_arguments, sweep_config

    p = argparse.ArgumentParser()
    add_bench_arguments(p)
    full = sweep_config(p.parse_args([]))
    assert (full.ignore_eos, full.max_new_tokens) == (False, 1024)
    assert sweep_config(p.parse_args(["--ignore-eos"])).ignore_eos is True
    # the last flag wins, so a script's --ignore-eos can be overridden after it
    assert sweep_config(p.parse_args(["--ignore-eos", "--stop-at-eos"])).ignore_eos is False
    assert sweep_config(p.parse_args(["--workloads", "humaneval", "mt_bench"])).workloads == ("code", "mt_bench")
