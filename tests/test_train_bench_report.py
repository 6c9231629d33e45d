"""The training throughput benchmark and the session report: real runs, real documents."""
from __future__ import annotations

import json

import pytest

from peagle_lab.train import bench
from peagle_lab.train.report import GOALS, training_results


def test_bench_writes_throughput_with_provenance(tmp_path):
    out = tmp_path / "throughput.json"
    assert bench.main(["--tiny", "--device", "cpu", "--out", str(out), "--batch-size", "2", "--row-len", "64",
                       "--steps", "2", "--warmup", "1", "--draft-vocab-size", "64", "--methods", "peagle,eagle3",
                       "--peagle-k-train", "3", "--eagle3-k-train", "3"]) == 0
    doc = json.loads(out.read_text())
    assert {"device", "torch", "command", "commit", "date"} <= doc.keys()
    assert [r["method"] for r in doc["results"]] == ["peagle", "eagle3"]
    for r in doc["results"]:
        assert r["tokens_per_s"] > 0 and r["step_ms_median"] > 0 and len(r["step_ms_all"]) == 2
        assert r["model_tflops_per_step"] > 0 and r["mfu"] is None  # no data-sheet peak for a CPU
        assert set(r["split_ms"]) == {"target_ms", "inputs_ms", "full_step_ms", "drafter_and_optimizer_ms"}
    peagle, eagle3 = doc["results"]
    assert eagle3["drafter_rows_per_step"] == 2 * 3 * 64  # every anchor of every TTT step
    assert peagle["drafter_rows_per_step"] < eagle3["drafter_rows_per_step"]  # COD thins the deep depths


def test_bench_cod_ratio_sets_the_deep_depths_work(tmp_path):
    def peagle_rows(*cod):
        out = tmp_path / f"cod-{'-'.join(cod) or 'default'}.json"
        assert bench.main(["--tiny", "--device", "cpu", "--out", str(out), "--batch-size", "2", "--row-len", "64",
                           "--steps", "1", "--warmup", "1", "--draft-vocab-size", "64", "--methods", "peagle",
                           "--peagle-k-train", "4", *cod]) == 0
        (row,) = json.loads(out.read_text())["results"]
        assert "oom" not in row
        return row

    default, every, floor = peagle_rows(), peagle_rows("--cod-ratio", "1.0"), peagle_rows("--cod-ratio-min", "0.5")
    assert (default["cod_ratio"], default["cod_ratio_min"]) == (0.7, 0.2)
    assert (every["cod_ratio"], floor["cod_ratio_min"]) == (1.0, 0.5)
    # every depth of every labelled anchor: more drafter rows than COD's thinned depths, at most K per token
    assert default["drafter_rows_per_step"] < floor["drafter_rows_per_step"] < every["drafter_rows_per_step"]
    assert every["drafter_rows_per_step"] <= 2 * 4 * 64


def test_bench_rejects_a_cod_ratio_out_of_range(tmp_path, capsys):
    rc = bench.main(["--tiny", "--device", "cpu", "--out", str(tmp_path / "x.json"), "--methods", "peagle",
                     "--batch-size", "2", "--row-len", "64", "--cod-ratio", "1.5"])
    assert rc != 0 and "cod_ratio=1.5 is out of range" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_peak_flops_lookup():
    assert bench.peak_flops("NVIDIA H200") == 989e12 and bench.peak_flops("cpu") is None


def _summary(method, als):
    return {"method": method, "num_hidden_layers": 1, "steps": 10, "tokens": 1000, "cumulative": {"tokens": 3000},
            "acceptance": [{"k": k, "acceptance_length": al, "per_position_acceptance": [0.5] * k, "tps": 1.0,
                            "num_prompts": 4} for k, al in als.items()],
            "curve": [{"step": 10, "tokens": 1000, "loss": 2.0, "depth_acc": [0.5, 0.3]}]}


def test_report_states_the_goals_against_what_was_measured(tmp_path):
    for name, method, als in (("eagle3", "eagle3", {3: 2.3, 7: 2.5}), ("peagle", "peagle", {3: 2.2, 7: 2.4})):
        (tmp_path / "heads" / name).mkdir(parents=True)
        (tmp_path / "heads" / name / "summary.json").write_text(json.dumps(_summary(method, als)))
    res = training_results(tmp_path)
    g = res["goals"]
    assert g["eagle3_AL_at_K3"] == 2.3 and g["eagle3_AL_at_K3_met"] is (2.3 >= GOALS["eagle3_AL_at_K3"])
    assert g["peagle_AL_at_K7"] == 2.4 and g["peagle_AL_at_K7_met"] is False
    assert g["peagle_AL_gain_K3_to_K7"] == pytest.approx(0.2) and g["eagle3_AL_gain_K3_to_K7"] == pytest.approx(0.2)
    assert res["heads"]["peagle"]["cumulative_tokens"] == 3000 and res["heads"]["eagle3"]["curve"][0]["step"] == 10
    # per-position acceptance is cumulative; the conditional rates divide each by the one before
    assert g["peagle_per_position_at_K7"] == [0.5] * 7 and g["peagle_conditional_at_K7"] == [0.5] + [1.0] * 6
    with pytest.raises(ValueError, match="no heads"):
        training_results(tmp_path / "empty")
