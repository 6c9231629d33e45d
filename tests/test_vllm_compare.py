"""vllm-compare without vLLM: output agreement, the float32 check at first differences, the
summary tables, saved runner results, and the document our schema accepts (or refuses)."""
from __future__ import annotations

import argparse
import json

import pytest
import torch

from peagle_lab.bench.schema import SchemaError, validate_result
from peagle_lab.integrations.vllm_bench import rows_from_result
from peagle_lab.integrations.vllm_compare import (
    add_arguments, build_document, check_args, comparison_table, divergence_margins, first_difference,
    load_vllm_results, output_agreement, same_text_cells, same_text_table, summarize, within_table,
)
from peagle_lab.integrations.vllm_runner import engine_settings, wave_prompts
from peagle_lab.provenance import run_info
from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.testing import tiny_drafter, tiny_target


def args_for(*argv):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def runner_result(method: str, k: int, outputs: dict, tps: float = 100.0, accepted: int = 10, drafts: int = 8,
                  steps: int = 20) -> dict:
    """A runner result document as vllm_runner.py writes it, one engine, waves per (workload, c)."""
    waves = []
    for (w, c), outs in outputs.items():
        n = sum(len(o) for o in outs)
        per_pos = [min(drafts, accepted)] + [max(accepted - drafts, 0)] + [0] * max(k - 2, 0) if k else []
        waves.append({"workload": w, "concurrency": c, "num_prompts": len(outs), "wall_s": n / tps,
                      "output_tokens": n, "outputs": outs,
                      "counters": {"num_drafts": drafts if k else 0, "num_draft_tokens": drafts * k,
                                   "num_accepted_tokens": accepted if k else 0,
                                   "accepted_per_position": per_pos[:k], "engine_steps": steps}})
    name = f"{method}-k{k}" if k else method
    return {"versions": {"vllm": "0.24.0", "torch": "2.11.0"}, "device": "cuda (NVIDIA H200)", "runs": [{
        "name": name, "method": method, "k": k, "startup_s": 40.0, "warmup_s": 1.0,
        "settings": {"model_runner": "v1" if method == "peagle" else "v2"},
        "parallel_drafting": method == "peagle", "waves": waves}]}


# ------------------------------------------------------------------ agreement

def test_first_difference_counts_a_shorter_output():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_output_agreement_rates():
    a = output_agreement([[1, 2, 3, 4], [5, 6], [7]], [[1, 2, 9, 4], [5, 6], [7]])
    assert a["equal_rate"] == pytest.approx(2 / 3)
    assert a["token_agreement"] == pytest.approx((2 + 2 + 1) / 7)
    assert a["first_differences"] == [{"request": 0, "position": 2}]


def test_output_agreement_refuses_different_prompt_lists():
    with pytest.raises(ValueError, match="2 outputs against 1"):
        output_agreement([[1], [2]], [[1]])


def test_divergence_margins_report_the_float32_logit_gap():
    target = tiny_target()
    prompt = [3, 5, 7]
    ids = torch.tensor([prompt])
    with torch.no_grad():
        logits = target(ids, torch.arange(3)[None], return_taps=False).logits[0, -1]
    top2 = torch.topk(logits, 2).indices.tolist()
    ours, theirs = [[top2[0], 1]], [[top2[1], 1]]
    [m] = divergence_margins(target, [prompt], ours, theirs, [{"request": 0, "position": 0}])
    assert (m["rank_ours"], m["rank_vllm"]) == (0, 1)
    assert m["gap"] == pytest.approx(float(logits[top2[0]] - logits[top2[1]]), abs=1e-5)
    assert m["gap"] > 0


def test_same_text_al_of_vllm_outputs_that_our_engine_produced_is_ours():
    # vLLM's "outputs" and counters here are our own engine's: the same-text AL must match them exactly,
    # and counters that accepted nothing (vLLM AL 1) must show up as a ratio equal to our AL
    target = tiny_target(seed=2, vocab_size=6, eos_token_id=None)
    drafter = tiny_drafter(target, "peagle", seed=4)
    prompts = [[1, 2, 3], [4], [5, 0, 5, 0]]
    own = SpecDecoder(target, drafter, SpecConfig(method="peagle", num_speculative_tokens=3, max_new_tokens=20)
                      ).generate(prompts, eos_token_ids=())
    m = own.metrics
    vres = runner_result("peagle", 3, {("chat", 1): own.tokens}, accepted=m.num_accepted_tokens, drafts=m.num_drafts)
    halved = runner_result("peagle", 3, {("chat", 1): own.tokens}, accepted=0, drafts=m.num_drafts)
    logs = []
    [x] = same_text_cells(vres, {"chat": prompts}, target, {"peagle": drafter}, batch=2, log=logs.append)
    assert m.num_accepted_tokens > 0 and x["al_ratio"] == pytest.approx(1.0) and x["al_within_3pct"]
    assert (x["requests"], x["concurrency"], x["k"]) == (3, 1, 3) and "AL vLLM" in logs[0]
    [y] = same_text_cells(halved, {"chat": prompts}, target, {"peagle": drafter}, log=logs.append)
    assert y["al_vllm"] == 1.0 and y["al_ratio"] == pytest.approx(m.acceptance_length) and not y["al_within_3pct"]
    assert "| chat | peagle | 3 | 1 | 3 |" in same_text_table([x])
    # outputs of unequal length in one batch: that cell fails with the reason, the others still run
    ragged = runner_result("peagle", 3, {("chat", 1): [own.tokens[0], own.tokens[1][:5], own.tokens[2]],
                                         ("chat", 2): own.tokens})
    bad, good = same_text_cells(ragged, {"chat": prompts}, target, {"peagle": drafter}, batch=2, log=logs.append)
    assert "output lengths" in bad["error"] and not bad["al_within_3pct"] and "al_ratio" in good
    assert "failed" in same_text_table([bad, good])


# ------------------------------------------------------------------ rows and tables

def test_rows_from_result_take_the_wave_set_workload_and_steps():
    res = runner_result("peagle", 3, {("chat", 1): [[1] * 16, [2] * 16], ("code", 8): [[3] * 16] * 8})
    rows = rows_from_result(res, "", 0.0, 16, 0, "cmd", "abc")
    assert [(r["workload"], r["concurrency"], r["num_prompts"]) for r in rows] == [("chat", 1, 2), ("code", 8, 8)]
    assert rows[0]["num_steps"] == 20 and rows[0]["step_ms"] == pytest.approx(1000 * 32 / 100 / 20)
    assert rows[0]["acceptance_length"] == pytest.approx(1 + 10 / 8)


def _both_engines(tps_ours: dict, tps_vllm: dict, al: float = 2.0) -> list[dict]:
    rows = []
    for engine, tps in (("vllm", tps_vllm), ("peagle_lab", tps_ours)):
        for (m, k), v in tps.items():
            rows.append({"engine": engine, "source": engine, "workload": "chat", "method": m, "k": k, "concurrency": 1,
                         "temperature": 0.0, "tps": v, "tpot_ms": 1.0, "acceptance_length": 1.0 if m == "baseline" else al,
                         "per_position_acceptance": [], "num_drafts": 0, "num_accepted_tokens": 0, "verify_ms": None,
                         "prep_ms": None, "draft_ms": None, "output_tokens": 128, "step_ms": 1.0})
    return rows


def test_summarize_ratios_and_best_k():
    rows = _both_engines({("baseline", 0): 600, ("eagle3", 3): 800, ("eagle3", 7): 700, ("peagle", 7): 1000},
                         {("baseline", 0): 400, ("eagle3", 3): 620, ("eagle3", 7): 480, ("peagle", 7): 340})
    s = summarize(rows, {("chat", "peagle", 7, 1): {"equal_rate": 1.0, "token_agreement": 1.0}})
    cell = next(x for x in s["cells"] if (x["method"], x["k"]) == ("peagle", 7))
    assert cell["ours_over_vllm"] == pytest.approx(1000 / 340) and cell["equal_rate"] == 1.0
    within = {x["engine"]: x for x in s["within_engine"]}
    assert within["vllm"]["eagle3_k"] == 3  # each method at its best K
    assert within["vllm"]["peagle_over_eagle3"] == pytest.approx(340 / 620)
    assert within["peagle_lab"]["peagle_over_eagle3"] == pytest.approx(1000 / 800)
    assert "| chat | peagle | 7 | 1 | 340 | 1,000 | 2.94× |" in comparison_table(s)
    assert "| vllm | chat | 1 | 400 | 620 (3) | 340 (7) | 0.55× |" in within_table(s)


# ------------------------------------------------------------------ documents

def _doc(tmp_path, ours_tokens: dict, vres: dict, rows_extra: list | None = None):
    args = args_for("--methods", "baseline", "peagle", "-k", "3", "-c", "1", "--workloads", "chat")
    rows = [{**r, "engine": "vllm"} for r in rows_from_result(vres, "", 0.0, 4, 0, "cmd", "abc")]
    rows += rows_extra or []
    target = tiny_target()
    ids = {"chat": [[3, 5, 7], [4, 6]]}
    return build_document(args, run_info("test"), {"dtype": "bfloat16"}, vres, rows, ids, ours_tokens, lambda: target)


def test_document_of_the_vllm_half_is_partial_and_valid(tmp_path):
    vres = runner_result("peagle", 3, {("chat", 1): [[1, 2, 3, 4], [5, 6, 7, 8]]})
    vres["failed"] = {"baseline": "Engine core initialization failed"}
    doc = _doc(tmp_path, {}, vres)
    validate_result(doc)
    assert doc["comparison"]["status"] == "partial: only vllm"
    assert [(s["method"], s["source"]) for s in doc["skipped"]] == [("baseline", "vllm")]
    assert doc["comparison"]["outputs"]["requests_compared"] == 0


def test_document_compares_outputs_where_both_engines_ran(tmp_path):
    vres = runner_result("peagle", 3, {("chat", 1): [[1, 2, 3, 4], [5, 6, 7, 8]]})
    vres["failed"] = {}
    doc = _doc(tmp_path, {("chat", "peagle", 3, 1): [[1, 2, 3, 4], [5, 9, 7, 8]]}, vres)
    [a] = doc["agreement"].values()
    assert a["equal_rate"] == 0.5 and a["first_differences"] == [{"request": 1, "position": 1}]
    [m] = a["margins"]
    assert {"gap", "rank_ours", "rank_vllm"} <= set(m) and (m["ours"], m["vllm"]) == (9, 6)


def test_a_row_that_breaks_the_schema_is_refused(tmp_path):
    vres = runner_result("peagle", 3, {("chat", 1): [[1, 2, 3, 4]]})
    vres["failed"] = {}
    doc = _doc(tmp_path, {}, vres)
    doc["rows"][0]["acceptance_length"] = 9.0
    with pytest.raises(SchemaError, match="acceptance_length"):
        validate_result(doc)


def test_saved_results_load_and_missing_engines_are_named(tmp_path):
    res = runner_result("eagle3", 3, {("chat", 1): [[1, 2]]})
    (tmp_path / "eagle3-k3.json").write_text(json.dumps(res))
    merged = load_vllm_results(tmp_path, ["eagle3-k3", "peagle-k3"], log=lambda s: None)
    assert [r["name"] for r in merged["runs"]] == ["eagle3-k3"]
    assert "no saved result for peagle-k3" in merged["failed"]["peagle-k3"]
    with pytest.raises(RuntimeError, match="every vLLM engine failed"):
        load_vllm_results(tmp_path, ["peagle-k7"], log=lambda s: None)


# ------------------------------------------------------------------ runner pieces and flags

def test_wave_prompts_follow_the_sweep_rule():
    assert len(wave_prompts(list(range(70)), 1, 8)) == 8
    assert len(wave_prompts(list(range(70)), 64, 8)) == 64
    assert len(wave_prompts(list(range(70)), 3, None)) == 70


def test_engine_settings_keep_json_scalars_only():
    class Cfg:
        class scheduler_config:
            async_scheduling = True
            max_num_batched_tokens = 8192

        class compilation_config:
            cudagraph_mode = object()

        use_v2_model_runner = False

    class LLM:
        class llm_engine:
            vllm_config = Cfg

    s = engine_settings(LLM)
    assert s["async_scheduling"] is True and s["model_runner"] == "v1"
    assert isinstance(s["cudagraph_mode"], str) and "dtype" not in s  # missing fields are left out
    json.dumps(s)


@pytest.mark.parametrize("argv, message", [
    (["--gpu-memory-utilization", "1.5"], "expected a share"),
    (["-k", "0"], "-k"),
    (["--min-prompts", "0"], "--min-prompts"),
])
def test_bad_flags_get_clear_errors(argv, message):
    with pytest.raises(ValueError, match=message):
        check_args(args_for(*argv))


def _ours_rows(vres: dict) -> list[dict]:
    """Our engine's rows for the same cells (a copy of vLLM's, re-labelled, with the timed fields)."""
    rows = []
    for r in rows_from_result(vres, "", 0.0, 4, 0, "cmd", "abc"):
        rows.append({**r, "engine": "peagle_lab", "source": "peagle_lab", "verify_ms": 1.0, "prep_ms": 0.1,
                     "draft_ms": 0.2, "tps": r["tps"] * 2})
    return rows


def test_status_is_complete_only_when_every_planned_cell_ran_in_both_engines(tmp_path):
    both = runner_result("peagle", 3, {("chat", 1): [[1, 2, 3, 4], [5, 6, 7, 8]]})
    plain = runner_result("baseline", 0, {("chat", 1): [[1, 2, 3, 4], [5, 6, 7, 8]]})
    vres = {**both, "runs": plain["runs"] + both["runs"], "failed": {}}
    ours = {("chat", "baseline", 0, 1): [[1, 2, 3, 4], [5, 6, 7, 8]], ("chat", "peagle", 3, 1): [[1, 2, 3, 4], [5, 6, 7, 8]]}
    doc = _doc(tmp_path, ours, vres, _ours_rows(vres))
    validate_result(doc)
    assert doc["comparison"]["status"] == "complete"
    assert {(c["method"], c["ours_over_vllm"]) for c in doc["comparison"]["cells"]} == {("baseline", 2.0), ("peagle", 2.0)}
    assert doc["comparison"]["outputs"]["equal_rate"] == 1.0

    # vLLM's P-EAGLE engine failed: its cell is missing, so the comparison is partial, whatever the rest says
    vres_failed = {**vres, "runs": plain["runs"], "failed": {"peagle-k3": "Engine core initialization failed"}}
    doc = _doc(tmp_path, ours, vres_failed, _ours_rows({**vres, "runs": vres["runs"]}))
    assert doc["comparison"]["status"].startswith("partial: 1 of 2 planned cells missing")


def test_repeated_flags_run_each_engine_once():
    args = args_for("-k", "3", "3", "5", "-c", "1", "1", "--workloads", "chat", "chat")
    check_args(args)
    assert (args.ks, args.concurrencies, args.workloads) == ([3, 5], [1], ["chat"])


def test_outputs_of_another_prompt_count_are_reported_not_fatal(tmp_path):
    vres = runner_result("peagle", 3, {("chat", 1): [[1, 2, 3, 4]]})
    vres["failed"] = {}
    doc = _doc(tmp_path, {("chat", "peagle", 3, 1): [[1, 2, 3, 4], [5, 6, 7, 8]]}, vres)
    [a] = doc["agreement"].values()
    assert a["error"] == "2 outputs of ours against 1 of vLLM's" and a["equal_rate"] is None
