"""fill_draft_hidden: a small table, bit-exact kernel parity on ragged batches, validation."""
from __future__ import annotations

import os
from contextlib import contextmanager
from unittest import mock

import torch

# Triton chooses between compiling and interpreting when a kernel is decorated, that is
# when its module is imported, so this must run before triton and peagle_lab.kernels are
# imported. Without CUDA the interpreter lets CI run the Triton kernels on CPU tensors;
# with CUDA we leave it off so the gpu-marked tests run the compiled kernels.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
from hypothesis import given, strategies as st  # noqa: E402

from peagle_lab.kernels.fill_draft_hidden import fill_draft_hidden, fill_draft_hidden_ref  # noqa: E402
from peagle_lab.kernels.prepare_draft_inputs import (  # noqa: E402
    prepare_draft_inputs,
    prepare_draft_inputs_ref,
)

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16,
         torch.float64: torch.int64}

# (device, backend): the reference, the kernel under the interpreter, the compiled kernel.
TARGETS = [
    pytest.param("cpu", "torch", id="cpu-torch"),
    pytest.param("cpu", "triton", id="cpu-triton-interpreted", marks=pytest.mark.skipif(
        not INTERPRETING, reason="CUDA present: the interpreter is off, cuda-triton runs")),
    pytest.param("cuda", "triton", id="cuda-triton", marks=pytest.mark.gpu),
    pytest.param("cuda", "torch", id="cuda-torch", marks=pytest.mark.gpu),
]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit pattern: equal bits is what "exact copy" means (NaN and -0.0 included)."""
    return t.cpu().view(_BITS[t.dtype])


@contextmanager
def _poisoned_empty():
    """Make torch.empty return NaNs, so an output element the kernel forgets shows up."""
    real = torch.empty

    def poisoned(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan") if t.is_floating_point() else -12345)

    with mock.patch.object(torch, "empty", poisoned):
        yield


# --- one small batch by hand ---------------------------------------------------------------

@pytest.mark.parametrize("device,backend", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_table(dtype, device, backend):
    # Two requests of the DESIGN.md worked example (K=3, T=4, n = 2 and 3), H = 2:
    # target row r of hidden is [r, -r]; shared_hidden is [0.5, -0.0].
    hidden = torch.tensor([[r, -r] for r in range(8)], dtype=dtype)
    mapping = torch.tensor([0, 1, 2, -1, -1, -1, 4, 5, 6, 7, -1, -1])
    masked = torch.tensor([0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1], dtype=torch.bool)
    shared = torch.tensor([0.5, -0.0], dtype=dtype)
    want = torch.tensor([[0, 0], [1, -1], [2, -2], [0.5, -0.0], [0.5, -0.0], [0, 0],
                         [4, -4], [5, -5], [6, -6], [7, -7], [0.5, -0.0], [0.5, -0.0]], dtype=dtype)
    got = fill_draft_hidden(*(t.to(device) for t in (hidden, mapping, masked, shared)), backend=backend)
    assert got.dtype == dtype and got.shape == (12, 2)
    assert torch.equal(_bits(got), _bits(want))  # row 0 is +0.0 (copied), mask rows keep -0.0


# --- random ragged batches -----------------------------------------------------------------

@st.composite
def fills(draw):
    """A draft batch from a random ragged verify/prefill step, with random taps of width H."""
    K = draw(st.integers(1, 16))
    c = draw(st.integers(1, 64))
    T = K + 1 if draw(st.booleans()) else draw(st.integers(1, K + 24))
    n = torch.tensor(draw(st.lists(st.integers(0, T - 1), min_size=c, max_size=c)))
    H = draw(st.integers(1, 160))
    dtype = draw(st.sampled_from(DTYPES))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    d = prepare_draft_inputs_ref(
        torch.zeros(c, T, dtype=torch.int64), torch.arange(T).expand(c, T), n, torch.zeros(c, dtype=torch.int64),
        num_speculative_tokens=K, mask_token_id=1, max_len=1 << 20)
    hidden = torch.randn(c * T, H, generator=g).to(dtype)
    hidden.view(-1)[::7] = -0.0  # signed zeros and NaNs survive only a true copy
    hidden.view(-1)[3::11] = float("nan")
    if draw(st.booleans()):  # a column slice of a wider buffer: strided rows
        hidden = torch.zeros(c * T, 2 * H, dtype=dtype)[:, ::2].copy_(hidden)
    shared = torch.randn(H, generator=g).to(dtype)
    mapping = d.hidden_mapping.to(draw(st.sampled_from([torch.int32, torch.int64])))
    return hidden, mapping, d.is_masked, shared


def _check_definition(out, hidden, mapping, is_masked, shared) -> None:
    """out[r] = hidden[mapping[r]] if mapping[r] >= 0, shared if masked, else zeros; bitwise."""
    mapping = mapping.to(torch.int64)
    has_src = mapping >= 0
    assert out.dtype == hidden.dtype and out.shape == (mapping.numel(), hidden.shape[1])
    assert torch.equal(_bits(out[has_src]), _bits(hidden[mapping[has_src]]))
    mask_rows = is_masked & ~has_src
    assert torch.equal(_bits(out[mask_rows]), _bits(shared).expand(int(mask_rows.sum()), -1))
    assert torch.equal(_bits(out[~has_src & ~is_masked]), torch.zeros_like(_bits(out[~has_src & ~is_masked])))


@given(case=fills())
def test_reference_follows_definition(case):
    _check_definition(fill_draft_hidden_ref(*case), *case)


@pytest.mark.skipif(not INTERPRETING, reason="CUDA present: the interpreter is off, the gpu twin runs")
@given(case=fills())
def test_interpreted_kernel_matches_reference(case):
    with _poisoned_empty():
        got = fill_draft_hidden(*case, backend="triton")
    assert torch.equal(_bits(got), _bits(fill_draft_hidden_ref(*case)))
    _check_definition(got, *case)


@pytest.mark.gpu
@given(case=fills())
def test_compiled_kernel_matches_reference(case):
    got = fill_draft_hidden(*(t.cuda() for t in case), backend="triton")
    assert torch.equal(_bits(got), _bits(fill_draft_hidden_ref(*case)))


@pytest.mark.parametrize("device,backend", TARGETS)
def test_any_mapping_and_precedence(device, backend):
    # The kernel is a general gather: repeated sources, any order, and a row that is both
    # mapped and masked takes its mapped row (the documented precedence).
    hidden = torch.randn(5, 1100)  # H past one 1024-wide column block
    mapping = torch.tensor([4, 4, 0, -1, 2, -1, 3, -1], dtype=torch.int32)
    masked = torch.tensor([0, 1, 0, 1, 0, 0, 0, 1], dtype=torch.bool)
    shared = torch.randn(1100)
    args = [t.to(device) for t in (hidden, mapping, masked, shared)]
    got = fill_draft_hidden(*args, backend=backend)
    assert torch.equal(_bits(got), _bits(fill_draft_hidden_ref(hidden, mapping, masked, shared)))
    _check_definition(got.cpu(), hidden, mapping, masked, shared)


@pytest.mark.parametrize("device,backend", TARGETS)
def test_empty_batch(device, backend):
    got = fill_draft_hidden(torch.zeros(0, 4, device=device), torch.zeros(0, dtype=torch.int64, device=device),
                            torch.zeros(0, dtype=torch.bool, device=device), torch.zeros(4, device=device),
                            backend=backend)
    assert got.shape == (0, 4)


@pytest.mark.gpu
def test_fused_path_replays_in_a_cuda_graph():
    # The engine captures the draft step in a CUDA graph: both kernels must be capturable
    # (no host sync, no allocation that depends on data) and read fresh inputs on replay.
    c, K, T, H = 4, 3, 4, 64
    tokens = torch.randint(0, 1000, (c, T), device="cuda")
    positions = torch.arange(T, device="cuda").expand(c, T).contiguous()
    n = torch.zeros(c, dtype=torch.int64, device="cuda")
    hidden = torch.randn(c * T, H, device="cuda", dtype=torch.bfloat16)
    shared = torch.randn(H, device="cuda", dtype=torch.bfloat16)

    def step():
        di = prepare_draft_inputs(tokens, positions, n, tokens[:, 0], num_speculative_tokens=K,
                                  mask_token_id=7, max_len=64, backend="triton")
        return fill_draft_hidden(hidden, di.hidden_mapping, di.is_masked, shared, backend="triton")

    step()  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    n.copy_(torch.tensor([0, 1, 2, 3]))
    hidden.copy_(torch.randn_like(hidden))
    graph.replay()
    torch.cuda.synchronize()
    d = prepare_draft_inputs_ref(tokens.cpu(), positions.cpu(), n.cpu(), tokens[:, 0].cpu(),
                                 num_speculative_tokens=K, mask_token_id=7, max_len=64)
    want = fill_draft_hidden_ref(hidden.cpu(), d.hidden_mapping, d.is_masked, shared.cpu())
    assert torch.equal(_bits(out), _bits(want))


# --- validation ----------------------------------------------------------------------------

def _good(**over):
    kw = dict(hidden=torch.zeros(8, 4), hidden_mapping=torch.zeros(12, dtype=torch.int64),
              is_masked=torch.zeros(12, dtype=torch.bool), shared_hidden=torch.zeros(4))
    kw.update(over)
    return kw


@pytest.mark.parametrize("over,match", [
    (dict(hidden=torch.zeros(8, 4, dtype=torch.int64)), r"hidden must be a 2-D float .*torch.int64"),
    (dict(hidden=torch.zeros(8)), r"hidden must be a 2-D float .*got shape \[8\]"),
    (dict(hidden_mapping=torch.zeros(12)), r"hidden_mapping must be a 1-D int32 or int64 .*torch.float32"),
    (dict(is_masked=torch.zeros(12, dtype=torch.int64)), r"is_masked must be a bool tensor .*torch.int64"),
    (dict(is_masked=torch.zeros(11, dtype=torch.bool)), r"is_masked .* \[12\] .*got shape \[11\]"),
    (dict(shared_hidden=torch.zeros(5)), r"shared_hidden must be \[H\] = \[4\] .*got shape \[5\]"),
    (dict(shared_hidden=torch.zeros(4, dtype=torch.bfloat16)), r"hidden's dtype torch.float32.*torch.bfloat16"),
    (dict(shared_hidden=[0.0] * 4), r"shared_hidden must be a torch.Tensor, got list"),
    (dict(shared_hidden=torch.zeros(4, device="meta")), r"one device, got \['cpu', 'meta'\]"),
    (dict(backend="fast"), r"backend='fast': expected 'auto', 'torch' or 'triton'"),
])
def test_bad_inputs_raise(over, match):
    with pytest.raises(ValueError, match=match):
        fill_draft_hidden(**_good(**over))
