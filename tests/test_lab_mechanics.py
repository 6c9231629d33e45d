"""The mechanics drawn in notebooks 2 and 3 (peagle_lab.lab.mechanics), checked for what they claim."""
from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings, strategies as st

from peagle_lab.bench.archive import latest
from peagle_lab.lab import mechanics
from peagle_lab.lab.layout import layout_toy_batch
from peagle_lab.train import CODConfig, chain_visible, partition, sample_elements

MEMORY = latest("h200", "train_memory") / "train_memory.json"


def _elements(length=20, reply_start=6, depths=4, seed=0):
    return sample_elements(length, torch.arange(length) >= reply_start, CODConfig(num_depths=depths),
                           torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ segment masks
def test_segment_masks_are_the_training_masks_of_the_segments():
    e = _elements()
    masks = mechanics.segment_masks(e, partition(e, 3))
    for m in masks:
        idx = m.segment.index
        full = chain_visible(e.anchor, e.depth, e.anchor, e.depth)
        assert torch.equal(m.visible, full[idx][:, idx])  # every query row: the full rule among members


@settings(max_examples=25, deadline=None)
@given(length=st.integers(8, 60), reply_start=st.integers(0, 20), depths=st.integers(1, 6),
       segments=st.integers(1, 6), seed=st.integers(0, 1000))
def test_union_of_segment_masks_is_the_full_mask_on_loss_queries(length, reply_start, depths, segments, seed):
    e = _elements(length, min(reply_start, length - 1), depths, seed)
    masks = mechanics.segment_masks(e, partition(e, segments))
    assert mechanics.segment_masks_agree(e, masks)
    # rebuild the union explicitly: loss rows of every segment, mapped back to element indices
    union = torch.zeros(len(e), len(e), dtype=torch.bool)
    for m in masks:
        idx = m.segment.index
        rows = idx[m.segment.has_loss]
        union[rows[:, None], idx[None, :]] = m.visible[m.segment.has_loss]
    full = chain_visible(e.anchor, e.depth, e.anchor, e.depth)
    assert torch.equal(union[e.has_loss], full[e.has_loss])


def test_a_leaky_mask_would_disagree():
    e = _elements()
    masks = mechanics.segment_masks(e, partition(e, 3))
    m = masks[-1]
    leaky = m.visible.clone()
    leaky[m.segment.has_loss.nonzero()[0, 0], -1] = True  # one loss query sees one more key
    assert not mechanics.segment_masks_agree(e, masks[:-1] + [mechanics.SegmentMask(m.segment, m.anchor, m.depth, leaky)])


# ------------------------------------------------------------------ training memory
def test_training_memory_reproduces_the_blogs_arithmetic():
    rows = {r.label: r for r in mechanics.training_memory(8192, 8, heads=1)}
    full = rows["all 8 depths (no COD)"]
    assert full.positions == 65536
    assert full.score_gib == pytest.approx(8.0) == full.score_gib_per_head  # 65536² bf16 scores: 8 GiB for one head
    assert "8.00" in mechanics.format_training_memory([full])
    cod = CODConfig(num_depths=8)
    assert rows["COD (quotas)"].positions == sum(cod.quota(8190, d) for d in range(8))
    sizes = [rows[f"COD, S = {S} segments (largest)"].positions for S in (2, 4, 8)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] < rows["COD, one pass (a real draw)"].positions


def test_the_measured_peak_memory_falls_with_the_largest_segment():
    """Where the H200 measurement is committed, its peak shrinks with S as the computed rows do."""
    if not MEMORY.exists():
        pytest.skip(f"{MEMORY} is not committed")
    measured = sorted((r for r in json.loads(MEMORY.read_text())["results"] if not r.get("oom")),
                      key=lambda r: r["segments"])
    peaks = [r["peak_allocated_gib"] for r in measured]
    largest = [r["largest_segment_elements"] for r in measured]
    assert peaks == sorted(peaks, reverse=True) and largest == sorted(largest, reverse=True)


# ------------------------------------------------------------------ KV cache, inputs, inference mask
@pytest.mark.parametrize("accepted, k", [([2, 3], 3), ([0, 4, 1], 4), ([1], 1)])
def test_slot_minus_one_writes_no_request_row(accepted, k):
    inputs = layout_toy_batch(accepted, k, max_len=16)
    w = mechanics.kv_write(inputs, 16)
    slots = inputs.slot_mapping
    live = slots[slots >= 0]
    changed = set(w.changed_rows)
    assert changed - {w.trash_slot} == set(live.tolist())  # only the written slots changed
    for r in range(w.trash_slot):
        if r not in changed:
            assert w.after[r] == w.before[r]
    assert torch.equal(w.after[live], w.writer[slots >= 0])  # each slot holds its own row's value
    if (slots < 0).any():  # padding: its write went to the trash row, which no request reads
        assert w.trash_slot in changed and w.after[w.trash_slot] == w.writer[slots < 0][-1]
    else:
        assert w.trash_slot not in changed


def test_slot_inputs_pair_each_token_with_its_hidden_state():
    inputs = layout_toy_batch([2, 3], 3, max_len=16)
    got = [(s.kind, s.embed_label, s.hidden_label) for s in mechanics.slot_inputs(inputs, 0)]
    assert got == [("context", "emb(11)", "h[5]"), ("context", "emb(12)", "h[6]"), ("bonus", "emb(100)", "h[7]"),
                   ("mask", "emb(MASK)", "h_shared"), ("mask", "emb(MASK)", "h_shared"), ("padding", "emb(0)", "0")]
    assert [s.position for s in mechanics.slot_inputs(inputs, 1)] == [10, 11, 12, 13, 14, 15]


def test_inference_mask_is_causal_and_never_shows_padding_keys():
    inputs = layout_toy_batch([2, 3], 3, max_len=16)
    m = mechanics.inference_mask(inputs, 16, 0)
    assert m.positions == [5, 6, 7, 8, 9, 0]
    for row, p in zip(m.visible.tolist(), m.positions):
        assert row == [q <= p for q in range(16)]
    assert m.key_kind[:5] == ["context"] * 5 and m.key_kind[5:10] == ["this pass"] * 5
    # no key at a position nothing was written to is visible to a sampled slot
    sampled = [i for i, k in enumerate(m.kinds) if k in ("bonus", "mask")]
    for i in sampled:
        assert all(m.key_kind[p] != "empty" for p in range(16) if m.visible[i, p])


def test_the_figures_draw():
    pytest.importorskip("plotly")
    from peagle_lab.lab import mechanics_figures as mf

    inputs = layout_toy_batch([2, 3], 3, max_len=16)
    kv = mf.kv_cache_figure(mechanics.kv_write(inputs, 16))
    assert kv.data[0].z[1][-1] == 3 and kv.data[0].z[0][-1] == 0  # trash written after, not before
    assert list(mf.slot_inputs_figure(mechanics.slot_inputs(inputs, 0)).data[0].text[1][3:5]) == ["h_shared"] * 2
    assert mf.inference_mask_figure(mechanics.inference_mask(inputs, 16, 0)).data[0].z[5][0] == 1
    e = _elements()
    assert len(mf.segment_masks_figure(mechanics.segment_masks(e, partition(e, 3))).data) == 3 + 2
    memory = json.loads(MEMORY.read_text()) if MEMORY.exists() else None
    fig = mf.training_memory_figure(mechanics.training_memory(), memory)
    assert fig.data[0].y[0] == pytest.approx(72.0)
