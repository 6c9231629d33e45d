"""The one backend resolver every fused kernel asks (peagle_lab.kernels.backend)."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.kernels import backend
from peagle_lab.kernels.fill_draft_hidden import fill_draft_hidden
from peagle_lab.kernels.prepare_draft_inputs import prepare_draft_inputs
from peagle_lab.kernels.verify import verify_greedy

needs_interpreter = pytest.mark.skipif(not backend.interpreted(), reason="Triton's interpreter is off here")


@pytest.mark.parametrize("bad", ["cuda", "Triton", "", None])
def test_unknown_backends_are_refused_by_name(bad):
    with pytest.raises(ValueError, match=f"backend={bad!r}: expected 'auto', 'torch' or 'triton'"):
        backend.resolve(bad, "cpu")


def test_torch_is_the_reference_everywhere():
    assert backend.resolve("torch", "cpu") == "torch"
    assert backend.resolve("torch", torch.device("meta")) == "torch"


def test_triton_refuses_a_device_it_cannot_run_on():
    with pytest.raises(ValueError, match="tensors on meta: expected CUDA tensors, or CPU tensors"):
        backend.resolve("triton", "meta")
    assert backend.resolve("auto", "meta") == "torch"
    assert not backend.runs_here("meta")


@needs_interpreter
def test_auto_runs_the_interpreted_kernels_on_a_cpu():
    assert backend.resolve("auto", "cpu") == backend.resolve("triton", "cpu") == "triton"
    assert backend.runs_here("cpu")


@needs_interpreter
def test_every_wrapper_asks_the_resolver(monkeypatch):
    import peagle_lab.kernels.fill_draft_hidden as fdh
    import peagle_lab.kernels.prepare_draft_inputs as pdi
    import peagle_lab.kernels.verify as kv

    asked = []
    for module in (pdi, fdh, kv):
        monkeypatch.setattr(module, "resolve", lambda b, d, _real=backend.resolve: asked.append(b) or _real(b, d))
    ids = torch.tensor([[5, 6, 7]])
    prepare_draft_inputs(ids, torch.tensor([[0, 1, 2]]), torch.tensor([1]), torch.tensor([8]),
                         num_speculative_tokens=2, mask_token_id=9, max_len=16, backend="triton")
    fill_draft_hidden(torch.ones(2, 4), torch.tensor([0, -1]), torch.tensor([False, True]), torch.zeros(4),
                      backend="auto")
    verify_greedy(torch.randn(1, 3, 11), torch.zeros(1, 2, dtype=torch.int64), backend="torch")
    assert asked == ["triton", "auto", "torch"]
