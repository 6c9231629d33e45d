"""The scale lab (peagle_lab.bench.scale): tiny shapes on the CPU; the numbers come from the GPU."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, replace

import pytest
import torch

from peagle_lab import hardware
from peagle_lab.bench import scale, scale_costs
from peagle_lab.bench.scale_moe import MoELayer, measure_moe
from peagle_lab.cli import main as cli_main


@pytest.fixture(scope="module")
def tiny_doc():
    grid = replace(scale.TINY_GRID, shapes=("smollm2-135m", "gpt-oss-20b"), ks=(1, 3), depths=(1, 2),
                   concurrency={"smollm2-135m": (1, 4), "gpt-oss-20b": (1, 4)}, new_tokens=4)
    return scale.run_scale(grid, log=lambda line: None)


def test_every_cell_is_measured_with_its_parts(tiny_doc):
    rows = tiny_doc["rows"]
    # smollm2 whole (eagle3 + peagle d1, d2) and eagle3 at 2 and 4 layers; gpt-oss at 4 layers (3 runs) + eagle3 at 2
    assert len(rows) == (5 + 4) * 2 * 2
    assert not tiny_doc["skipped"] and not tiny_doc["errors"]
    for r in rows:
        assert r["verify_ms"] > 0 and r["draft_ms"] > 0 and r["step_ms"] > 0
        assert r["host_ms"] >= 0
        assert r["steps"] >= 3  # random heads accept ~nothing: a token a step
    assert {r["layers"] for r in rows if r["shape"] == "smollm2-135m"} == {30, 2, 4}
    assert {r["layers"] for r in rows if r["shape"] == "gpt-oss-20b"} == {2, 4}


def test_full_depth_costs_scale_verify_per_layer(tiny_doc):
    costs = {(c["shape"], c["method"], c["depth"], c["k"], c["concurrency"]): c for c in tiny_doc["costs"]}
    rows = {(r["shape"], r["layers"], r["method"], r["depth"], r["k"], r["concurrency"]): r for r in tiny_doc["rows"]}
    c = costs[("gpt-oss-20b", "peagle", 2, 3, 4)]
    r4, e2, e4 = rows[("gpt-oss-20b", 4, "peagle", 2, 3, 4)], rows[("gpt-oss-20b", 2, "eagle3", 1, 3, 4)], \
        rows[("gpt-oss-20b", 4, "eagle3", 1, 3, 4)]
    slope = (e4["verify_ms"] - e2["verify_ms"]) / 2
    assert c["scaled"] and math.isclose(c["verify_ms"], r4["verify_ms"] + 20 * slope)
    assert math.isclose(c["step_ms"] - c["verify_ms"], r4["step_ms"] - r4["verify_ms"])
    whole = costs[("smollm2-135m", "eagle3", 1, 1, 1)]  # measured whole: as measured
    assert not whole["scaled"] and whole["verify_ms"] == rows[("smollm2-135m", 30, "eagle3", 1, 1, 1)]["verify_ms"]


def test_layer_check_compares_the_rule_with_the_whole_model(tiny_doc):
    check = tiny_doc["layer_check"]
    assert {(c["k"], c["concurrency"]) for c in check} == {(1, 1), (3, 1), (1, 4), (3, 4)}
    assert all(c["shape"] == "smollm2-135m" and math.isfinite(c["error"]) for c in check)


def test_step_costs_interpolate_linearly_in_k(tiny_doc):
    k1 = scale.step_costs(tiny_doc, "gpt-oss-20b", "eagle3", 1, 1)
    k3 = scale.step_costs(tiny_doc, "gpt-oss-20b", "eagle3", 3, 1)
    k2 = scale.step_costs(tiny_doc, "gpt-oss-20b", "eagle3", 2, 1)
    assert math.isclose(k2["step_ms"], (k1["step_ms"] + k3["step_ms"]) / 2)
    k5 = scale.step_costs(tiny_doc, "gpt-oss-20b", "eagle3", 5, 1)  # past the end: the last two
    assert math.isclose(k5["draft_ms"], k3["draft_ms"] + (k3["draft_ms"] - k1["draft_ms"]))
    with pytest.raises(ValueError, match="c=2"):
        scale.step_costs(tiny_doc, "gpt-oss-20b", "peagle", 3, 2, depth=2)
    with pytest.raises(ValueError, match="llama-3.1-8b"):
        scale.step_costs(tiny_doc, "llama-3.1-8b", "peagle", 3, 1)


def test_moe_variant_adds_the_experts_per_layer(tiny_doc):
    moe = {r["tokens"]: r["moe_extra_ms"] for r in tiny_doc["moe"]["gpt-oss-20b"]}
    plain = scale.step_costs(tiny_doc, "gpt-oss-20b", "peagle", 3, 4, depth=1)
    routed = scale.step_costs(tiny_doc, "gpt-oss-20b+moe", "peagle", 3, 4, depth=1)
    assert math.isclose(routed["verify_ms"] - plain["verify_ms"], 24 * moe[16])


def test_expert_bound_moe_costs_the_experts_read(tiny_doc):
    bound = scale_costs.expert_bound_moe(tiny_doc)
    shape = tiny_doc["shapes"]["gpt-oss-20b"]
    rows = {r["tokens"]: r for r in bound["moe"]["gpt-oss-20b"]}
    assert rows[1]["moe_extra_ms"] == pytest.approx(0.0)  # one token reads top_k experts: the dense stand-in
    read = scale.expected_experts(scale.SHAPES["gpt-oss-20b"], 16)
    assert rows[16]["moe_ms"] == pytest.approx(rows[16]["dense_ms"] * read / shape["top_k"])
    plain = scale.step_costs(bound, "gpt-oss-20b", "peagle", 3, 4, depth=1)
    routed = scale.step_costs(bound, "gpt-oss-20b+moe", "peagle", 3, 4, depth=1)
    assert routed["verify_ms"] - plain["verify_ms"] == pytest.approx(24 * rows[16]["moe_extra_ms"])
    assert len(bound["costs"]) == len(tiny_doc["costs"])


def test_carried_to_scales_the_memory_bound_parts_by_bandwidth(tiny_doc):
    with pytest.raises(ValueError, match="presets"):
        scale_costs.carried_to(tiny_doc, "B200")
    h100 = {**tiny_doc, "device": "NVIDIA H100 80GB HBM3"}
    assert hardware.preset_of(h100["device"]) == "H100"
    ratio = 3.35 / 8.0  # the H100's and the B200's datasheet bandwidths (peagle_lab.hardware)
    for drafter in (True, False):
        b200 = scale_costs.carried_to(h100, "B200", drafter=drafter)
        for old, new in zip(h100["costs"], b200["costs"]):
            assert new["verify_ms"] == pytest.approx(old["verify_ms"] * ratio)
            assert new["draft_ms"] == pytest.approx(old["draft_ms"] * (ratio if drafter else 1.0))
            assert (new["prep_ms"], new["host_ms"]) == (old["prep_ms"], old["host_ms"])
            assert new["step_ms"] - new["verify_ms"] - new["draft_ms"] == pytest.approx(
                old["step_ms"] - old["verify_ms"] - old["draft_ms"])  # the rest of the step stays
        assert b200["device"].startswith("B200 (projected")


def test_step_costs_at_rows_interpolate_between_concurrencies(tiny_doc):
    c1, c4 = (scale.step_costs(tiny_doc, "gpt-oss-20b", "eagle3", 3, c) for c in (1, 4))
    mid = scale_costs.step_costs_at_rows(tiny_doc, "gpt-oss-20b", "eagle3", 3, 2.5)
    assert mid["step_ms"] == pytest.approx((c1["step_ms"] + c4["step_ms"]) / 2)
    past = scale_costs.step_costs_at_rows(tiny_doc, "gpt-oss-20b", "eagle3", 3, 9.0)  # the nearest measured c
    assert past == pytest.approx({p: c4[p] for p in scale_costs.PARTS})


def test_moe_layer_equals_a_loop_over_tokens_and_their_experts():
    torch.manual_seed(0)
    layer = MoELayer(hidden=16, intermediate=8, experts=6, top_k=2)
    x = torch.randn(5, 16)
    w, idx = torch.topk(x @ layer.router.t(), 2, dim=-1)
    w = torch.softmax(w, dim=-1)
    ref = torch.zeros_like(x)
    for t in range(5):
        for j in range(2):
            e = idx[t, j]
            gate, up = (x[t] @ layer.gate_up[e]).chunk(2)
            ref[t] += w[t, j] * ((torch.nn.functional.silu(gate) * up) @ layer.down[e])
    torch.testing.assert_close(layer(x), ref, rtol=1e-5, atol=1e-5)


def test_measure_moe_reports_both_layers():
    cfg = scale.tiny_config(scale.SHAPES["gpt-oss-20b"].config, 1)
    rows = measure_moe(cfg, 8, 4, 16, [1, 8], torch.device("cpu"), torch.float32)
    assert [r["tokens"] for r in rows] == [1, 8]
    assert all(r["moe_ms"] > 0 and r["dense_ms"] > 0 and r["moe_extra_ms"] == r["moe_ms"] - r["dense_ms"] for r in rows)


def test_expected_experts():
    oss = scale.SHAPES["gpt-oss-20b"]
    assert scale.expected_experts(oss, 1) == pytest.approx(4.0)
    assert scale.expected_experts(oss, 10_000) == pytest.approx(32.0)
    assert scale.expected_experts(scale.SHAPES["llama-3.1-8b"], 8) == 0.0


def test_shapes_match_their_published_configs():
    s = scale.SHAPES
    assert s["gpt-oss-20b"].active_mlp == 4 * 2880 and s["gpt-oss-20b"].config.num_hidden_layers == 24
    assert s["qwen3-coder-30b-a3b"].config.qk_norm and s["qwen3-coder-30b-a3b"].active_mlp == 8 * 768
    assert s["llama-3.1-8b"].config.head_dim == 128 and s["smollm2-135m"].config.hidden_size == 576


def test_grid_rejects_bad_values():
    with pytest.raises(ValueError, match="unknown shapes"):
        replace(scale.TINY_GRID, shapes=("gpt-5",))
    with pytest.raises(ValueError, match="ks="):
        replace(scale.TINY_GRID, ks=(0, 3))
    with pytest.raises(ValueError, match="layers="):
        replace(scale.TINY_GRID, layers=(4, 2))
    for bad in ((20, 10), (0, 10), (100, 40000)):
        with pytest.raises(ValueError, match=r"prompt_range=\(%d, %d\): expected 1 <= LO <= HI <= 32768" % bad):
            replace(scale.TINY_GRID, prompt_range=bad)
    for bad in (-1, 1):  # TINY_GRID measures c = 1: no row to spare for a stand-in
        with pytest.raises(ValueError, match=r"short_rows=%d: expected 0 to 0, fewer than the smallest c" % bad):
            replace(scale.TINY_GRID, short_rows=bad)


def test_a_ragged_grid_draws_each_requests_prompt_seeded():
    grid = replace(scale.TINY_GRID, prompt_range=(50, 1450))
    lengths = scale.prompt_lengths(grid, 64, torch.Generator().manual_seed(6401))
    assert lengths == scale.prompt_lengths(grid, 64, torch.Generator().manual_seed(6401))  # seeded, as the prompts
    assert 50 <= min(lengths) < 300 and 1200 < max(lengths) <= 1450 and len(set(lengths)) > 32
    assert grid.prompt_tokens == 750 and scale_costs.step_context({"grid": asdict(grid)}) == 750.0 + grid.new_tokens / 2
    assert scale_costs.prompt_range({"grid": asdict(grid)}) == (50, 1450)
    assert scale_costs.prompt_range({"grid": asdict(scale.TINY_GRID)}) is None  # uniform, as runs without the key
    assert scale.prompt_lengths(scale.TINY_GRID, 3, torch.Generator()) == [12, 12, 12]


def test_short_rows_stand_in_for_a_continuous_batchs_idle_rows():
    grid = replace(scale.TINY_GRID, prompt_range=(50, 1450), short_rows=2, concurrency={"smollm2-135m": (4, 64)},
                   shapes=("smollm2-135m",))
    ragged = scale.prompt_lengths(replace(grid, short_rows=0), 4, torch.Generator().manual_seed(1))
    assert scale.prompt_lengths(grid, 4, torch.Generator().manual_seed(1)) == ragged[:2] + [1, 1]
    assert scale.prompt_lengths(replace(grid, prompt_range=None, prompt_tokens=12), 4, torch.Generator()) == [12, 12, 1, 1]
    doc = {"grid": asdict(grid)}
    assert scale_costs.short_rows(doc) == 2 and scale_costs.short_rows({"grid": asdict(scale.TINY_GRID)}) == 0
    mean, longest = scale_costs.cell_contexts(doc, {"k": 1, "concurrency": 64})  # drawn again, two rows at 1 token
    full, top = scale_costs.cell_contexts({"grid": asdict(replace(grid, short_rows=0))}, {"k": 1, "concurrency": 64})
    assert longest == top and mean < full


def test_command_line_writes_json_with_run_info(tmp_path):
    out = tmp_path / "scale.json"
    assert cli_main(["scale", "--tiny", "--shapes", "llama-3.2-1b", "-k", "2", "--depths", "1",
                     "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["device"].startswith("CPU") and doc["command"].startswith("peagle-lab scale")
    assert {r["shape"] for r in doc["costs"]} == {"llama-3.2-1b"}
    assert doc["grid"]["ks"] == [2]


def test_gpu_script_rehearses_on_the_cpu(tmp_path):
    """scripts/gpu/scale_lab_gpu.sh with --tiny: the command the GPU runs, on tiny shapes."""
    import os
    import subprocess
    import sys

    from peagle_lab.provenance import REPO

    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
           "SCALE_FLAGS": "--tiny --shapes llama-3.2-1b -k 1 --depths 1"}
    out = subprocess.run(["bash", str(REPO / "scripts/gpu/scale_lab_gpu.sh")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads((tmp_path / "scale.json").read_text())
    assert {r["shape"] for r in doc["rows"]} == {"llama-3.2-1b"} and doc["costs"]
    assert "scale lab took" in (tmp_path / "scale.log").read_text()


def test_command_line_runs_a_ragged_batch(tmp_path, capsys):
    out = tmp_path / "scale.json"
    assert cli_main(["scale", "--tiny", "--shapes", "llama-3.2-1b", "-k", "1", "--depths", "1", "-c", "3",
                     "--prompt-range", "4", "20", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["grid"]["prompt_range"] == [4, 20] and doc["grid"]["prompt_tokens"] == 12 and doc["costs"]
    assert scale_costs.step_context(doc) == 12.0 + doc["grid"]["new_tokens"] / 2
    # each cell records its steps' contexts; the runs that did not record them get the same from their grid
    for r in doc["costs"]:
        bare = {f: v for f, v in r.items() if f not in scale_costs.CONTEXTS}
        assert scale_costs.cell_contexts(doc, bare) == pytest.approx((r["mean_context"], r["longest_context"]))
        assert 4 < r["mean_context"] < r["longest_context"] <= 20 + doc["grid"]["new_tokens"] / 2
    with pytest.raises(SystemExit):
        scale.main(["--tiny", "--prompt-tokens", "40", "--prompt-range", "4", "20", "--out", str(out)])
    assert "not allowed with argument --prompt-tokens" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"prompt_range=\(20, 4\)"):
        scale.main(["--tiny", "--prompt-range", "20", "4", "--out", str(out)])


def test_command_line_runs_short_rows_beside_a_ragged_batch(tmp_path):
    out = tmp_path / "scale.json"
    assert cli_main(["scale", "--tiny", "--shapes", "llama-3.2-1b", "-k", "1", "--depths", "1", "-c", "4",
                     "--prompt-range", "16", "20", "--short-rows", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["grid"]["short_rows"] == 2 and doc["costs"]
    half = doc["grid"]["new_tokens"] / 2
    for r in doc["costs"]:  # two rows of 16-20 tokens and two of 1 token: the mean falls, the longest stays
        assert r["mean_context"] < (16 + 20) / 2 / 2 + 1 + half and 16 + half <= r["longest_context"] <= 20 + half
    with pytest.raises(ValueError, match=r"short_rows=4: expected 0 to 3"):
        scale.main(["--tiny", "--shapes", "llama-3.2-1b", "-c", "4", "--short-rows", "4", "--out", str(out)])


def _fit_runs(a: float, b: float, c: float, noise=(0.0, 0.0, 0.0, 0.0, 0.0)) -> list[dict]:
    """Three uniform runs (mean = longest) and two ragged ones at c = 64, K 1 and 4, whose step is a + b·mean +
    c·longest (times K), with ``noise`` (ms) on each run's step."""
    contexts = [(172, 172), (332, 332), (652, 652), (312, 562), (762, 1462)]

    def run(i: int, mean: float, longest: float) -> dict:
        costs = [{"shape": "s", "method": "eagle3", "depth": 1, "k": k, "concurrency": 64, "mean_context": mean,
                  "longest_context": longest, **{p: k * (a + b * mean + c * longest) + noise[i]
                                                 for p in scale_costs.PARTS}} for k in (1, 4)]
        return {"grid": {"prompt_tokens": mean, "new_tokens": 0}, "costs": costs, "file": f"run{i}"}

    return [run(i, *ctx) for i, ctx in enumerate(contexts)]


def test_the_context_fit_recovers_its_coefficients_and_reports_residuals():
    runs = _fit_runs(1.0, 0.0008, 0.0006)
    fit = scale_costs.context_fit(runs, "s", "eagle3", 1, 64)
    assert fit["coef"]["step_ms"] == pytest.approx((1.0, 0.0008, 0.0006))
    assert [p["file"] for p in fit["points"]] == [f"run{i}" for i in range(5)]
    assert max(abs(p["residual"]) for p in fit["points"]) < 1e-9
    # K between the fitted ones: linear; the step at (mean 300, longest 1024) of the coefficients, K = 2.5 times
    got = scale_costs.step_costs_fit(runs, "s", "eagle3", 2, 64, 300, 1024)["step_ms"]
    assert got == pytest.approx(2 * (1.0 + 0.0008 * 300 + 0.0006 * 1024))
    noisy = scale_costs.context_fit(_fit_runs(1.0, 0.0008, 0.0006, (0.01, -0.01, 0.0, 0.02, -0.01)), "s", "eagle3",
                                    1, 64)
    residuals = [p["residual"] for p in noisy["points"]]
    assert sum(residuals) == pytest.approx(0.0, abs=1e-9) and 0 < max(map(abs, residuals)) < 0.02


def test_the_context_fit_needs_a_ragged_run():
    uniform = _fit_runs(1.0, 0.001, 0.0)[:3]  # mean = longest everywhere: b and c cannot be told apart
    with pytest.raises(ValueError, match=r"K=1 c=64: 3 runs' cells do not fit"):
        scale_costs.context_fit(uniform, "s", "eagle3", 1, 64)
    with pytest.raises(ValueError, match="no K whose runs fit"):
        scale_costs.step_costs_fit(uniform, "s", "eagle3", 1, 64, 300, 600)
