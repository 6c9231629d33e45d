"""Parity of the fused verify kernels with their PyTorch reference on ragged random batches."""
from __future__ import annotations

import os

import torch  # importing torch does not import triton

# Triton decides between compiler and CPU interpreter once, when @triton.jit runs, i.e.
# when peagle_lab.kernels.verify is first imported; so the switch has to be set before
# that import (and before triton's). Without CUDA the interpreter is the only way to run
# the kernels; with CUDA we keep them compiled, because that is what the gpu tests check.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from unittest import mock  # noqa: E402

import pytest  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytest.importorskip("triton")

from peagle_lab.kernels import backend  # noqa: E402
from peagle_lab.kernels import verify as kv  # noqa: E402
from peagle_lab.verify import VerifyResult, sample_verify_noise  # noqa: E402

FIELDS = ("num_accepted", "output_tokens", "next_tokens", "is_bonus", "accepted_per_position")
LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
PROB_DTYPES = (torch.float32, torch.bfloat16, torch.float64)

needs_interpreter = pytest.mark.skipif(
    not backend.interpreted(),
    reason="kernels are compiled for CUDA in this process; the gpu twin runs them")


def assert_same(a: VerifyResult, b: VerifyResult) -> None:
    for field in FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype, field
        assert torch.equal(x, y), field


def accepted_prefix(c: int, K: int, g: torch.Generator) -> torch.Tensor:
    """``# [c]`` target acceptance counts; every value 0..K occurs once c >= K+1."""
    return (torch.arange(c) + torch.randint(0, K + 1, (1,), generator=g)) % (K + 1)


# Hypothesis draws the batch shape and a seed; torch draws the tensors from that seed, so
# a failing example replays exactly. block_v < V forces the multi-block argmax path.
batches = dict(c=st.integers(1, 64), K=st.integers(1, 16), V=st.integers(7, 300),
               block_v=st.sampled_from([64, 1024]), seed=st.integers(0, 2**31 - 1))


def check_greedy(c, K, V, block_v, seed, dtype, device):
    g = torch.Generator().manual_seed(seed)
    # Small integer logits: exact in every dtype, and full of ties across blocks.
    logits = torch.randint(-3, 4, (c, K + 1, V), generator=g).to(dtype)
    target_argmax = logits.argmax(dim=-1)                                 # [c, K+1]
    n = accepted_prefix(c, K, g)
    # Copy the target's choice for the first n slots, then something else at slot n.
    wrong = (target_argmax[:, :K] + torch.randint(1, V, (c, K), generator=g)) % V
    drafts = torch.where(torch.arange(K) < n[:, None], target_argmax[:, :K], wrong)
    ref = kv.verify_greedy(logits, drafts, backend="torch")
    assert torch.equal(ref.num_accepted, n)
    with mock.patch.object(kv, "_MAX_BLOCK_V", block_v):
        out = kv.verify_greedy(logits.to(device), drafts.to(device), backend="triton")
    assert_same(ref, to_cpu(out))


def check_rejection(c, K, V, block_v, seed, dtype, device):
    g = torch.Generator().manual_seed(seed)
    target = torch.softmax(3 * torch.randn(c, K + 1, V, generator=g), dim=-1)
    draft = torch.softmax(3 * torch.randn(c, K, V, generator=g), dim=-1)
    drafts = torch.multinomial(draft.reshape(-1, V), 1, generator=g).reshape(c, K)
    uniform, noise = sample_verify_noise(c, K, V, g)
    # Steer each request to a chosen acceptance count: uniform 0 passes any positive
    # ratio, and at slot n the draft with the smallest ratio meets the largest uniform.
    n = accepted_prefix(c, K, g)
    col = torch.arange(K)
    worst = (target[:, :K] / draft).argmin(dim=-1)                        # [c, K]
    drafts = torch.where(col == n[:, None], worst, drafts)
    uniform = torch.where(col < n[:, None], 0.0, uniform)
    uniform = torch.where(col == n[:, None], 1 - 2**-24, uniform)
    # Edges. A ratio exactly equal to its uniform must reject (strict <).
    edge = torch.rand(c, generator=g)
    ratio = target[:, :K].gather(2, drafts[..., None]).squeeze(2) / draft.gather(
        2, drafts[..., None]).squeeze(2)
    uniform = torch.where((edge < 0.15)[:, None], ratio.clamp(max=1 - 2**-24), uniform)
    # Probabilities on a grid of 1/8 and quantised noise make ties in the exponential
    # races that only the lowest-id rule settles.
    tied = edge > 0.5
    noise = torch.where(tied[:, None], noise.mul(2).ceil(), noise)
    target = torch.where(tied[:, None, None], target.mul(8).round().add(1) / 8, target)
    draft = torch.where(tied[:, None, None], draft.mul(8).round().add(1) / 8, draft)
    # A target below its draft everywhere has a zero residual: the fallback to the target.
    fallback = (edge > 0.85)[:, None, None]
    target = torch.where(fallback, 0.5 * target, target)
    draft = torch.where(fallback, 2 * target[:, :K], draft)
    target, draft = target.to(dtype), draft.to(dtype)
    ref = kv.verify_rejection(target, draft, drafts, uniform, noise, backend="torch")
    with mock.patch.object(kv, "_MAX_BLOCK_V", block_v):
        out = kv.verify_rejection(*(t.to(device) for t in (target, draft, drafts,
                                                           uniform, noise)),
                                  backend="triton")
    assert_same(ref, to_cpu(out))
    return ref


def to_cpu(r: VerifyResult) -> VerifyResult:
    """Bring a result back to the CPU for comparison with the reference."""
    return VerifyResult(**{f: getattr(r, f).cpu() for f in FIELDS})


@needs_interpreter
@given(**batches, dtype=st.sampled_from(LOGIT_DTYPES))
def test_greedy_parity(c, K, V, block_v, seed, dtype):
    check_greedy(c, K, V, block_v, seed, dtype, "cpu")


@needs_interpreter
@pytest.mark.parametrize("c,K,dtype", [(1, 1, torch.float32), (1, 3, torch.bfloat16), (2, 1, torch.float64)])
def test_greedy_parity_with_rows_split_into_chunks(c, K, dtype):
    """Few rows: each row's argmax is split over chunks, whose winners the second stage merges
    (the small integer logits tie across chunks, where the earliest chunk must win)."""
    s, chunk = kv.argmax_chunks(c * (K + 1), 300, 64, kv.programs_wanted("cpu"))
    assert s > 1 and chunk < 300
    for seed in range(4):
        check_greedy(c, K, 300, 64, seed, dtype, "cpu")


@given(rows=st.integers(1, 600), v=st.integers(1, 70000), block_v=st.sampled_from([16, 64, 1024]),
       programs=st.integers(1, 200))
def test_argmax_chunks_cover_each_row_once(rows, v, block_v, programs):
    s, chunk = kv.argmax_chunks(rows, v, block_v, programs)
    assert 1 <= s <= kv.MAX_ARGMAX_CHUNKS and chunk % block_v == 0
    assert (s - 1) * chunk < v <= s * chunk  # every chunk holds logits, together all of them
    assert s == 1 or rows * s <= programs


@needs_interpreter
@given(**batches, dtype=st.sampled_from(PROB_DTYPES))
def test_rejection_parity(c, K, V, block_v, seed, dtype):
    check_rejection(c, K, V, block_v, seed, dtype, "cpu")


@needs_interpreter
def test_rejection_parity_covers_all_counts():
    # the steering above really produces every acceptance count, bonus included
    ref = check_rejection(c=40, K=7, V=50, block_v=16, seed=3, dtype=torch.float32,
                          device="cpu")
    assert set(ref.num_accepted.tolist()) == set(range(8))


def test_backend_choice():
    logits = torch.randn(2, 3, 11)
    drafts = torch.zeros(2, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match="backend='cuda': expected 'auto', 'torch' or"):
        kv.verify_greedy(logits, drafts, backend="cuda")
    assert backend.resolve("torch", logits.device) == "torch"
    # auto is the reference on a CPU (the interpreter checks bits, it is not fast)
    assert backend.resolve("auto", logits.device) == "torch"
    assert_same(kv.verify_greedy(logits, drafts), kv.verify_greedy_ref(logits, drafts))


@pytest.mark.gpu
@given(**batches, dtype=st.sampled_from(LOGIT_DTYPES))
def test_greedy_parity_gpu(c, K, V, block_v, seed, dtype):
    check_greedy(c, K, V, block_v, seed, dtype, "cuda")


@pytest.mark.gpu
@given(**batches, dtype=st.sampled_from(PROB_DTYPES))
def test_rejection_parity_gpu(c, K, V, block_v, seed, dtype):
    check_rejection(c, K, V, block_v, seed, dtype, "cuda")


@pytest.mark.gpu
def test_parity_gpu_large_vocab():
    # SmolLM2's vocabulary and a realistic batch: many blocks per row, compiled kernels
    for seed in range(3):
        check_greedy(64, 7, 49152, 1024, seed, torch.bfloat16, "cuda")
        check_rejection(64, 7, 49152, 1024, seed, torch.float32, "cuda")
