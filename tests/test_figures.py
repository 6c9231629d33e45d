"""Figures draw what their result objects hold (peagle_lab.lab.figures)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from peagle_lab.bench.archive import latest
from peagle_lab.lab import figures
from peagle_lab.engine import StepTrace
from peagle_lab.kernels.fill_draft_hidden import fill_draft_hidden_ref
from peagle_lab.lab.layout import SLOT_KINDS, layout_toy_batch
from peagle_lab.verify import verify_greedy

ROOT = Path(__file__).resolve().parents[1]
C, B, M, P = (SLOT_KINDS.index(k) for k in ("context", "bonus", "mask", "padding"))


def test_draft_batch_figure_cells():
    fig = figures.draft_batch_figure(layout_toy_batch([2, 3], k=3, backend="torch"))
    heat = fig.data[0]
    assert heat.type == "heatmap"
    assert [list(r) for r in heat.z] == [[C, C, B, M, M, P], [C, C, C, B, M, M]]
    assert heat.text[0][2] == "100<br>p7" and heat.text[0][3] == "MASK<br>p8" and heat.text[1][0] == "21<br>p10"
    assert "hidden: shared_hidden" in heat.hovertext[0][3] and "kv slot: -1" in heat.hovertext[0][5]
    assert [t.name for t in fig.data[1:]] == list(SLOT_KINDS)
    assert list(heat.x) == list(range(6))


def test_draft_batch_figure_last_slots_window():
    fig = figures.draft_batch_figure(layout_toy_batch([2, 3], k=3, backend="torch"), last_slots=2)
    heat = fig.data[0]
    assert list(heat.x) == [4, 5] and [list(r) for r in heat.z] == [[M, P], [M, M]]
    assert "the last 2 of 6" in fig.layout.xaxis.title.text


def test_draft_batch_figure_token_text_and_title():
    fig = figures.draft_batch_figure(layout_toy_batch([0], k=1, backend="torch"), token_text=lambda t: "x",
                                     title="hello")
    assert fig.layout.title.text == "hello"
    assert fig.data[0].text[0][0] == "'x'<br>p5"


def test_draft_batch_table_columns():
    fig = figures.draft_batch_table(layout_toy_batch([2, 3], k=3, backend="torch"))
    table = fig.data[0]
    header = list(table.header.values)
    cols = dict(zip(header, table.cells.values))
    assert header[:4] == ["row", "request", "slot", "kind"]
    assert list(cols["kind"])[:6] == ["context", "context", "bonus", "mask", "mask", "padding"]
    assert list(cols["kv slot"])[5] == -1 and list(cols["sampled"]).count(True) == 6


def test_draft_hidden_figure_shows_the_fill():
    d = layout_toy_batch([1, 0], k=2, backend="torch")
    hidden = torch.arange(24.0).view(6, 4)
    shared = torch.full((4,), -5.0)
    out = fill_draft_hidden_ref(hidden, d.hidden_mapping, d.is_masked, shared)
    heat = figures.draft_hidden_figure(out, d).data[0]
    assert [list(r) for r in heat.z] == out.tolist()
    assert heat.y[2] == "0/2 mask: shared_hidden" and heat.y[3].endswith("padding: zeros")


def test_taps_figure_rms_per_layer():
    taps = torch.zeros(2, 6)
    taps[0, :2] = 3.0  # token 0, layer a: rms 3
    taps[1, 4:] = 4.0  # token 1, layer c: rms 4
    fig = figures.taps_figure(taps, (2, 15, 27), tokens=[7, 7], token_text=lambda t: "a")
    heat = fig.data[0]
    assert [list(r) for r in heat.customdata] == [[3.0, 0.0], [0.0, 0.0], [0.0, 4.0]]
    assert heat.z[0][0] == pytest.approx(0.4771, abs=1e-4) and heat.z[1][0] == -6.0  # log10, zeros clamped
    assert list(heat.y) == ["layer 2", "layer 15", "layer 27"] and list(heat.x) == ["0 'a'", "1 'a'"]


def test_step_timeline_bars():
    traces = {"eagle3": StepTrace(0, 10.0, 1.0, 8.0, (0,), 4),
              "peagle": [StepTrace(i, 10.0 + i, 1.0, 3.0, (1,), 1) for i in range(3)]}
    fig = figures.step_timeline(traces, device="cpu")
    parts = {t.name: t for t in fig.data}
    assert set(parts) == {"verify", "prep", "draft"}
    draft = parts["draft"]
    assert list(draft.y) == ["eagle3"] * 4 + ["peagle"]
    assert list(draft.x) == [2.0, 2.0, 2.0, 2.0, 3.0]
    assert list(draft.base) == [11.0, 13.0, 15.0, 17.0, 12.5]  # peagle: median verify of steps 1, 2
    assert list(parts["verify"].x) == [10.0, 11.5] and list(parts["prep"].base) == [10.0, 11.5]
    assert "cpu" in fig.layout.title.text


def test_verify_outcome_cells():
    # The target would say 7, 3, 5: request 0 drafted 7, 3 (bonus 5); request 1 drafted 7, 4 (recovered 3).
    logits = torch.nn.functional.one_hot(torch.tensor([[7, 3, 5], [7, 3, 5], [7, 3, 5]]), 8).float()
    drafts = torch.tensor([[7, 3], [7, 4], [1, 3]])
    fig = figures.verify_outcome_figure(verify_greedy(logits, drafts), drafts)
    kinds = [[figures.OUTCOME_KINDS[v] for v in row] for row in fig.data[0].z]
    assert kinds == [["accepted", "accepted", "bonus"],
                     ["accepted", "rejected", "recovered"],
                     ["rejected", "discarded", "recovered"]]
    assert [list(r) for r in fig.data[0].text] == [["7", "3", "5"], ["7", "4", "3"], ["1", "3", "7"]]
    assert fig.data[0].y[1] == "request 1 (accepted 1)"


def test_acceptance_figure_traces():
    fig = figures.acceptance_figure([1, 2], [1.5, 1.75], [1.4, 1.8])
    assert [t.name for t in fig.data] == ["predicted", "measured"] and list(fig.data[1].y) == [1.4, 1.8]
    assert len(figures.acceptance_figure([1], [1.5]).data) == 1


def test_kernel_benchmark_figure_from_committed_results():
    results = json.loads((latest("h200", "kernels") / "kernels.json").read_text())
    fig = figures.kernel_benchmark_figure(results, dtype="bf16", mode="graph")
    ref, fused = fig.data
    rows = [r for r in results["rows"] if r["dtype"] == "bf16"]
    assert ref.name == "PyTorch reference" and fused.name == "fused Triton"
    assert list(fused.y) == [r["fused_graph_us"] for r in rows]
    assert list(ref.x) == [f"c={r['c']}, K={r['K']}" for r in rows]
    assert results["device"] in fig.layout.title.text
    with pytest.raises(ValueError, match="dtype"):
        figures.kernel_benchmark_figure(results, dtype="fp8")


# ---------------------------------------------------------------- training figures
def _elements():
    from peagle_lab.train.cod import CODConfig, sample_elements

    return sample_elements(10, torch.arange(10) >= 4, CODConfig(3, 0.7, 0.2), torch.Generator().manual_seed(0))


def test_cod_elements_figure_marks_loss_and_context():
    e = _elements()
    z = [list(r) for r in figures.cod_elements_figure(e).data[0].z]
    assert len(z) == 3 and len(z[0]) == 8  # depths 0..2, anchors 0..7
    loss, ctx = figures.ELEMENT_KINDS.index("loss"), figures.ELEMENT_KINDS.index("no loss")
    assert z[0][:2] == [ctx, ctx] and z[0][2:] == [loss] * 6  # targets a + 2 >= 4 carry a loss
    assert sum(v != 0 for row in z for v in row) == len(e)


def test_chain_mask_figure_is_the_mask():
    from peagle_lab.train.mask import chain_visible

    e = _elements()
    visible = chain_visible(e.anchor, e.depth, e.anchor, e.depth)
    heat = figures.chain_mask_figure(visible, e).data[0]
    assert [list(r) for r in heat.z] == visible.int().tolist()
    assert heat.x[0] == "a0d0" and heat.y[-1] == f"a{int(e.anchor[-1])}d{int(e.depth[-1])}"


def test_segments_figure_one_panel_per_segment():
    from peagle_lab.train.partition import partition

    e = _elements()
    segs = partition(e, 2)
    fig = figures.segments_figure(e, segs)
    heats = [t for t in fig.data if t.type == "heatmap"]
    assert len(heats) == 2
    second = [list(r) for r in heats[1].z]
    ctx = figures.ELEMENT_KINDS.index("no loss")
    assert all(second[0][a] == ctx for a in range(segs[1].lo))  # recomputed context, drawn grey
    assert sum(v != 0 for row in second for v in row) == len(segs[1].index)


def test_partition_sizes_figure_with_and_without_memory():
    sizes = {1: {"largest": 100, "computed": 100}, 2: {"largest": 60, "computed": 120}}
    assert [t.name for t in figures.partition_sizes_figure(sizes).data][:2] == [
        "largest segment (elements)", "elements computed in all"]
    memory = {"device": "GPU X", "results": [{"segments": 2, "peak_allocated_gib": 1.5},
                                             {"segments": 1, "peak_allocated_gib": 3.0},
                                             {"segments": 4, "oom": True}]}
    line = figures.partition_sizes_figure(sizes, memory).data[2]
    assert list(line.x) == ["1", "2"] and list(line.y) == [3.0, 1.5] and "GPU X" in line.name


def test_training_curves_and_acceptance_reports():
    history = [{"step": s, "loss": 5.0 - s, "depth_acc": [0.1 * s, 0.05 * s]} for s in (1, 2, 3)]
    fig = figures.training_curves_figure(history)
    assert list(fig.data[0].y) == [4.0, 3.0, 2.0] and [t.name for t in fig.data] == ["loss", "depth 0", "depth 1"]
    from peagle_lab.lab.train_walkthrough import HeadAcceptance

    reports = {"a": [HeadAcceptance(3, 1.5, (0.4, 0.1, 0.0))], "b": [HeadAcceptance(5, 2.0, (0.5,) * 5)]}
    acc = figures.acceptance_reports_figure(reports, k=3)
    assert len(acc.data) == 1 and acc.data[0].name == "a: AL 1.50" and list(acc.data[0].y) == [0.4, 0.1, 0.0]


def test_figure_mime_bundle_outside_jupyter():
    bundle = figures.figure_mime_bundle(figures.acceptance_figure([1], [1.5], title="t"))
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["y"] == [1.5]
    assert bundle["text/plain"] == "<plotly figure: t>"


def test_training_session_figures_draw_the_committed_results():
    import json

    from peagle_lab.lab.figures import acceptance_vs_k_figure, learning_curve_figure

    results = json.loads((latest("h200", "training") / "results.json").read_text())
    fig = learning_curve_figure(results)
    heads = results["heads"]
    depths = sum(len(h["curve"][0]["depth_acc"]) for h in heads.values())
    assert len(fig.data) == depths  # one line per depth per head
    assert fig.data[0].y[-1] == heads[next(iter(heads))]["curve"][-1]["depth_acc"][0]
    ks = acceptance_vs_k_figure(results)
    assert [t.y[-1] for t in ks.data] == [h["acceptance"][max(h["acceptance"], key=int)]["AL"] for h in heads.values()]


def test_k_scaling_figure_draws_every_k_of_the_committed_sweep():
    import json
    from pathlib import Path

    from peagle_lab.lab.figures import k_scaling_figure

    bench = json.loads((latest("h200", "k_scaling") / "bench.json").read_text())
    fig = k_scaling_figure(bench, "code", (1, 64))
    assert len(fig.data) == 8  # (EAGLE-3, P-EAGLE) × (TPS, drafting time) × two concurrencies
    rows = {(r["method"], r["concurrency"], r["k"]): r for r in bench["rows"] if r["workload"] == "code"}
    tps_c1_peagle = next(t for t in fig.data if t.name == "P-EAGLE" and t.xaxis == "x")
    ks = sorted(k for m, c, k in rows if (m, c) == ("peagle", 1))
    assert len(ks) >= 5 and list(tps_c1_peagle.x) == ks  # every K the sweep measured, in order
    assert list(tps_c1_peagle.y) == [rows[("peagle", 1, k)]["tps"] for k in ks]
    with pytest.raises(ValueError, match="long"):
        k_scaling_figure(bench, "long")


def test_k_scaling_figure_of_the_full_sweep_draws_our_plain_line_not_the_reference():
    import json
    from pathlib import Path

    from peagle_lab.lab.figures import k_scaling_figure

    bench = json.loads((latest("h200", "sweeps") / "bench.json").read_text())
    fig = k_scaling_figure(bench, "chat", (1, 64))
    ours = {r["concurrency"]: r["tps"] for r in bench["rows"] if r["workload"] == "chat"
            and r["method"] == "baseline" and r.get("source", "peagle_lab") == "peagle_lab"}
    assert [s.y0 for s in fig.layout.shapes] == [ours[1], ours[64]]  # the reference row is left out
    ks = sorted(r["k"] for r in bench["rows"] if r["workload"] == "chat" and r["method"] == "eagle3"
                and r["concurrency"] == 64 and r.get("source", "peagle_lab") == "peagle_lab")
    assert list(next(t for t in fig.data if t.name == "EAGLE-3" and t.xaxis == "x2").x) == ks


def test_engines_figure_draws_both_engines_of_the_committed_comparison():
    import json
    from pathlib import Path

    from peagle_lab.lab.figures import engines_figure

    doc = json.loads((latest("h200", "vllm") / "vllm_gpu.json").read_text())
    fig = engines_figure(doc, "code", (1, 64))
    assert [t.name for t in fig.data] == ["vllm", "peagle_lab"] * 2
    rows = {(r["engine"], r["method"], r["k"], r["concurrency"]): r for r in doc["rows"] if r["workload"] == "code"}
    ours_c64 = fig.data[3]
    assert list(ours_c64.x) == ["plain decoding", "EAGLE-3 K=3", "EAGLE-3 K=5", "EAGLE-3 K=7",
                                "P-EAGLE K=3", "P-EAGLE K=5", "P-EAGLE K=7"]
    assert ours_c64.y[4] == rows[("peagle_lab", "peagle", 3, 64)]["tps"]
    assert ours_c64.hovertext[0].startswith("AL 1.00, step")
    with pytest.raises(ValueError, match="long"):
        engines_figure(doc, "long")
    with pytest.raises(ValueError, match=r"concurrencies \[2\]"):
        engines_figure(doc, "chat", (1, 2))
