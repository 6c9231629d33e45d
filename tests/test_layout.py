"""The slot-by-slot description of the drafter batch, and the toy / random batches."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.kernels.prepare_draft_inputs import prepare_draft_inputs_ref
from peagle_lab.lab.layout import (
    compare_draft_inputs, describe_draft_batch, format_draft_batch, layout_toy_batch, random_decode_batch,
    toy_decode_batch,
)


def test_toy_batch_is_the_design_worked_example():
    batch = toy_decode_batch([2, 3], k=3)
    assert torch.equal(batch.token_ids, torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]]))
    assert torch.equal(batch.positions, torch.tensor([[5, 6, 7, 8], [10, 11, 12, 13]]))
    assert torch.equal(batch.bonus_tokens, torch.tensor([100, 200]))
    d = batch.layout(3, mask_token_id=99, max_len=64, backend="torch")
    assert d.input_ids.tolist() == [11, 12, 100, 99, 99, 0, 21, 22, 23, 200, 99, 99]
    assert d.positions.tolist() == [5, 6, 7, 8, 9, 0, 10, 11, 12, 13, 14, 15]


def test_describe_kinds_and_sources():
    rows = describe_draft_batch(layout_toy_batch([2, 3], k=3, backend="torch"))
    #          request 0: ctx ctx bonus mask mask pad | request 1: ctx ctx ctx bonus mask mask
    assert [r.kind for r in rows] == ["context", "context", "bonus", "mask", "mask", "padding",
                                      "context", "context", "context", "bonus", "mask", "mask"]
    assert [r.hidden_label for r in rows[:6]] == ["target row 0", "target row 1", "target row 2",
                                                  "shared_hidden", "shared_hidden", "zeros"]
    assert [r.row for r in rows if r.sampled] == [2, 3, 4, 9, 10, 11]
    assert rows[5].slot_mapping == -1 and rows[5].position == 0
    assert (rows[7].request, rows[7].slot) == (1, 1)


def test_describe_k1_has_no_mask_slots():
    rows = describe_draft_batch(layout_toy_batch([0, 1], k=1, backend="torch"))
    assert [r.kind for r in rows] == ["bonus", "padding", "context", "bonus"]


def test_format_uses_token_text():
    text = format_draft_batch(layout_toy_batch([1], k=2, backend="torch"), token_text=lambda t: f"<{t}>")
    assert "'<100>'" in text and text.splitlines()[0].startswith("req slot kind")


@pytest.mark.parametrize("accepted, k", [([], 3), ([4], 3), ([-1], 3), ([1], 0)])
def test_toy_batch_rejects_bad_values(accepted, k):
    with pytest.raises(ValueError):
        toy_decode_batch(accepted, k)


def test_random_batch_is_seeded_and_ragged():
    a, b = random_decode_batch(16, 4, seed=3), random_decode_batch(16, 4, seed=3)
    assert torch.equal(a.token_ids, b.token_ids) and torch.equal(a.num_accepted, b.num_accepted)
    assert a.num_accepted.unique().numel() > 1
    assert torch.equal(a.positions[:, 1:] - a.positions[:, :-1], torch.ones(16, 4, dtype=torch.long))


def test_compare_reports_each_field():
    batch = random_decode_batch(3, 2, seed=1)
    d = batch.layout(2, mask_token_id=7, max_len=2000, backend="torch")
    e = prepare_draft_inputs_ref(batch.token_ids, batch.positions, batch.num_accepted, batch.bonus_tokens,
                                 num_speculative_tokens=2, mask_token_id=8, max_len=2000)
    same = compare_draft_inputs(d, e)
    assert same == {"input_ids": False, "positions": True, "slot_mapping": True, "is_masked": True,
                    "hidden_mapping": True, "sample_indices": True}


def test_kernel_parity_counts_every_field():
    from peagle_lab.lab.layout import kernel_parity

    out = kernel_parity(4, max_c=3, max_k=4, hidden_size=16, backend="triton")  # interpreted on CPU
    assert set(out) == {"input_ids", "positions", "slot_mapping", "is_masked", "hidden_mapping",
                        "sample_indices", "hidden"}
    assert all(v == "identical in 4/4 batches" for v in out.values())


def test_time_draft_batch_reports_each_backend():
    from peagle_lab.lab.layout import time_draft_batch

    t = time_draft_batch(2, 3, backends=("torch",), hidden_size=32, repeats=3, device="cpu")
    assert list(t) == ["torch"] and t["torch"] > 0


def test_triton_runs_here_follows_the_interpreter():
    from peagle_lab.kernels import backend
    from peagle_lab.lab.layout import triton_runs_here

    assert triton_runs_here("cpu") == backend.interpreted()
    if backend.triton is not None and not torch.cuda.is_available():
        assert triton_runs_here("cpu")  # conftest set TRITON_INTERPRET=1 before triton was imported
