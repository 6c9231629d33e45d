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
def test_auto_is_the_reference_on_a_cpu_and_triton_the_interpreter():
    assert backend.resolve("auto", "cpu") == "torch"  # the interpreter checks bits; it is not fast
    assert backend.resolve("triton", "cpu") == "triton"
    assert backend.runs_here("cpu")


@pytest.mark.skipif(backend.triton is None, reason="Triton is not installed here")
@pytest.mark.parametrize("preset, interpreting", [(None, True), ("0", False), ("1", True)])
def test_a_gpu_less_process_gets_the_interpreter_without_a_preamble(preset, interpreting):
    """A fresh process with no CUDA device and no TRITON_INTERPRET: importing peagle_lab is enough."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if preset is not None:
        env["TRITON_INTERPRET"] = preset
    code = ("from peagle_lab.kernels import backend, prepare_draft_inputs as pdi; import torch\n"
            "print(backend.interpreted(), backend.runs_here('cpu'))\n"
            "if backend.interpreted():\n"
            "    args = (torch.tensor([[5, 6, 7]]), torch.tensor([[0, 1, 2]]), torch.tensor([1]), torch.tensor([8]))\n"
            "    kw = dict(num_speculative_tokens=2, mask_token_id=9, max_len=16)\n"
            "    out, ref = pdi.prepare_draft_inputs(*args, **kw, backend='triton'), pdi.prepare_draft_inputs_ref(*args, **kw)\n"
            "    print(out.input_ids.tolist() == ref.input_ids.tolist(), out.input_ids.tolist())\n")
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split("\n")
    assert got[0] == f"{interpreting} {interpreting}"
    if interpreting:
        assert got[1].startswith("True [6, 8, 9")


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
