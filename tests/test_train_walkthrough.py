"""The small training experiments of notebooks 3 and 6 (peagle_lab.lab.train_walkthrough)."""
from __future__ import annotations

import pytest

from peagle_lab.bench.archive import latest
from peagle_lab.train.cod import CODConfig
from peagle_lab.lab.train_walkthrough import partition_gradient_check, partition_sizes, shipped_head_acceptance, tiny_setup


def test_partitioned_gradients_equal_the_single_pass():
    out = partition_gradient_check((2, 3))
    assert set(out) == {1, 2, 3}
    for S in (2, 3):
        assert out[S]["loss_rel_error"] < 1e-4 and out[S]["max_grad_rel_error"] < 1e-4
        assert out[S]["elements_computed"] > out[1]["elements_computed"]  # recomputed context


def test_the_mask_is_restored_after_a_replacement():
    from peagle_lab.train import peagle

    original = peagle.chain_mask
    with pytest.raises(RuntimeError):
        partition_gradient_check((2,), mask=lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    assert peagle.chain_mask is original


def test_partition_sizes_shrink_the_largest_segment():
    sizes = partition_sizes(600, (1, 2, 4), cod=CODConfig(6, 0.7, 0.2))
    assert sizes[1]["largest"] == sizes[1]["computed"]
    assert sizes[4]["largest"] < sizes[2]["largest"] < sizes[1]["largest"]
    assert sizes[4]["computed"] > sizes[2]["computed"] > sizes[1]["computed"]


def test_tiny_setup_is_seeded_and_split():
    a, b = tiny_setup(64, 8), tiny_setup(64, 8)
    assert len(a.train) == 56 and len(a.heldout) == 8
    assert [e.input_ids for e in a.train] == [e.input_ids for e in b.train]
    assert a.vocab.vocab_size == a.target.config.vocab_size and 2 in a.vocab.draft_to_target.tolist()
    with pytest.raises(ValueError):
        tiny_setup(8, 8)


def test_shipped_head_acceptance_reads_the_committed_results():
    import json

    path = latest("h200", "training") / "results.json"
    heads = shipped_head_acceptance(json.loads(path.read_text()))
    for name, reports in heads.items():
        assert [r.k for r in reports] == sorted(r.k for r in reports)
        for r in reports:
            assert len(r.per_position_acceptance) == r.k
            assert r.acceptance_length == pytest.approx(1 + sum(r.per_position_acceptance), abs=2e-3)
