"""decode_attention: the split-KV kernel against its reference on ragged batches, the engine's use of it, validation."""
from __future__ import annotations

import math
import os
from unittest import mock

import torch

# The interpreter must be chosen before triton is imported (see test_kernels_fill_draft_hidden.py).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from peagle_lab.config import SpecConfig  # noqa: E402
from peagle_lab.engine import SpecDecoder, decode_attention_fn  # noqa: E402
from peagle_lab.kernels import decode_attention as da  # noqa: E402
from peagle_lab.models.kv_cache import attention_mask, read_kv  # noqa: E402
from peagle_lab.testing import tiny_drafter, tiny_target  # noqa: E402

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
TARGETS = [
    pytest.param("cpu", torch.float32, id="cpu-float32-interpreted", marks=pytest.mark.skipif(
        not INTERPRETING, reason="CUDA present: the interpreter is off, the cuda cases run")),
    pytest.param("cuda", torch.float32, id="cuda-float32", marks=pytest.mark.gpu),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16", marks=pytest.mark.gpu),
]
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}

# (c, nh, nkv, T, S, hd, window, num_splits): SmolLM2's 9 over 3 heads, MHA, other groupings,
# T = 1 (plain), K + 1 (verify), 17 (the largest decode shape), one and several key splits, and
# tiles that need less than the default pipelining to fit a GPU's shared memory (head dim 128 with
# 4 × 17 = 68 rows, head dim 256).
CASES = [
    (3, 9, 3, 8, 150, 64, None, None),
    (2, 9, 3, 1, 200, 64, None, 3),
    (1, 9, 3, 17, 130, 64, None, 1),
    (4, 4, 4, 1, 300, 16, None, 2),
    (1, 6, 2, 5, 257, 32, 40, 4),
    (5, 8, 2, 3, 64, 16, 7, None),
    (2, 32, 8, 17, 300, 128, None, 2),
    (2, 4, 2, 4, 260, 256, None, None),
]


def _ragged(c, nh, nkv, T, S, hd, window, dtype, device, seed):
    """Random q/k/v and a cache-style mask: request i holds lens[i] positions, its T queries the last ones."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(c, nh, T, hd, generator=g).to(device, dtype)
    k = torch.randn(c, nkv, S, hd, generator=g).to(device, dtype)
    v = torch.randn(c, nkv, S, hd, generator=g).to(device, dtype)
    lens = torch.randint(T, S + 1, (c,), generator=g)
    positions = (lens[:, None] - T + torch.arange(T)).to(device)
    mask = attention_mask(positions, torch.arange(S, device=device).expand(c, -1), window=window)
    return q, k, v, mask


def test_the_reference_is_sdpa_with_grouped_heads():
    q, k, v, mask = _ragged(3, 9, 3, 4, 90, 32, None, torch.float32, "cpu", 0)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(da.decode_attention_ref(q, k, v, mask), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device,dtype", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "c{}-h{}-kv{}-T{}-S{}-d{}-w{}-s{}".format(*c))
def test_kernel_matches_the_reference_on_ragged_batches(device, dtype, case):
    c, nh, nkv, T, S, hd, window, splits = case
    for seed in range(2):
        q, k, v, mask = _ragged(c, nh, nkv, T, S, hd, window, dtype, device, seed)
        got = da.decode_attention(q, k, v, mask, backend="triton", num_splits=splits)
        want = da.decode_attention_ref(q, k, v, mask)
        assert got.dtype == dtype and got.shape == q.shape
        torch.testing.assert_close(got.float(), want.float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("device,dtype", TARGETS)
def test_kernel_reads_strided_cache_views_and_zeroes_rows_that_see_nothing(device, dtype):
    """K/V as the engine hands them over (views of a flat cache); padding rows see no key."""
    c, nh, nkv, T, max_len, hd = 3, 9, 3, 4, 320, 64
    g = torch.Generator().manual_seed(5)
    k_cache = torch.randn(c * max_len + 1, nkv, hd, generator=g).to(device, dtype)
    v_cache = torch.randn(c * max_len + 1, nkv, hd, generator=g).to(device, dtype)
    k, v = read_kv(k_cache, v_cache, c, max_len)
    assert not k.is_contiguous()
    q = torch.randn(c, nh, T, hd, generator=g).to(device, dtype)
    positions = torch.tensor([[40, 41, 42, 43], [0, 1, 2, 3], [290, 291, 292, 293]], device=device)
    valid = torch.ones(c, max_len, dtype=torch.bool, device=device)
    valid[1] = False  # request 1 is padding: none of its queries may see anything
    mask = attention_mask(positions, torch.arange(max_len, device=device).expand(c, -1), valid)
    got = da.decode_attention(q, k, v, mask, backend="triton", num_splits=2)
    torch.testing.assert_close(got.float(), da.decode_attention_ref(q, k, v, mask).float(),
                               atol=TOL[dtype], rtol=TOL[dtype])
    assert torch.count_nonzero(got[1]) == 0 and torch.count_nonzero(got[0]) > 0


def test_num_splits_give_a_gpu_enough_programs_and_no_split_without_a_key_block():
    assert da.num_splits_for(1, 3, 6144, "cpu") == 3  # 8 programs wanted in the interpreter
    assert da.num_splits_for(1, 1, 6144, "cpu") == 8
    assert da.num_splits_for(64, 3, 6144, "cpu") == 1  # one split: no combine kernel
    assert da.num_splits_for(1, 1, 300, "cpu") == da.num_splits_for(1, 1, 257, "cpu") == 3  # 3 key blocks
    assert da.num_splits_for(1, 1, da.BLOCK_N, "cpu") == 1
    if not INTERPRETING:
        return
    for S, splits in ((1, 3), (127, 1), (128, 2), (129, 8), (257, 2), (1000, 5)):  # more splits than key blocks too
        q, k, v, mask = _ragged(1, 2, 1, 1, S, 16, None, torch.float32, "cpu", S)
        got = da.decode_attention(q, k, v, mask, backend="triton", num_splits=splits)
        torch.testing.assert_close(got, da.decode_attention_ref(q, k, v, mask), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("device,dtype", TARGETS)
@pytest.mark.parametrize("tiles", [1, 2, 4])
def test_row_tiles_match_the_reference(device, dtype, tiles):
    """A K/V head's query rows cut into tiles, one a program (the rows past REP·T in the last tile
    masked off), with one split and several, give the same attention."""
    if device == "cpu" and not INTERPRETING:
        pytest.skip("the interpreter is off here")
    for seed, (c, T, splits, window) in enumerate(((3, 6, 3, None), (2, 8, 1, 50), (1, 17, 2, None))):
        q, k, v, mask = _ragged(c, 9, 3, T, 300, 32, window, dtype, device, seed)
        kv_len = torch.full((c,), 280, dtype=torch.int32, device=device) if seed == 2 else None
        want = da.decode_attention_ref(q, k, v, mask, kv_len)
        got = da._launch(q, k, v, mask, kv_len, splits, row_tiles=tiles)
        torch.testing.assert_close(got.float(), want.float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_rows_go_out_in_tiles_where_programs_are_spare():
    # 8 programs wanted in the interpreter: 18 rows of one K/V head go out as 2 tiles at c = 1 (6
    # programs), not at c = 2 (12); 15 rows fit one 16-row tile
    assert [da.row_tiles_for(c, 3, rows, "cpu") for c, rows in ((1, 18), (2, 18), (1, 15))] == [2, 1, 1]
    assert da.row_tiles_for(1, 1, 51, "cpu") == 4
    if not INTERPRETING:
        return
    launched = []
    real = da._decode_attention_split_kernel

    class Grid:  # records the split kernel's grid: (row groups, splits)
        def __getitem__(self, grid):
            launched.append(grid)
            return real[grid]

    q, k, v, mask = _ragged(1, 9, 3, 6, 300, 32, None, torch.float32, "cpu", 3)
    with mock.patch.object(da, "_decode_attention_split_kernel", Grid()):
        got = da._launch(q, k, v, mask, None, None)
    assert launched[0][0] == 1 * 3 * 2  # c · nkv · 2 tiles
    torch.testing.assert_close(got, da.decode_attention_ref(q, k, v, mask), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("device,dtype", TARGETS)
@pytest.mark.parametrize("splits", [1, 3])
def test_kernel_reads_no_key_past_kv_len(device, dtype, splits):
    """Each request's keys end at kv_len[b] (0 included: a request with no key gets zeros), and the
    kernel never loads past it: NaNs written there change nothing."""
    c, nh, nkv, T, S, hd = 4, 9, 3, 3, 300, 32
    q, k, v, mask = _ragged(c, nh, nkv, T, S, hd, None, dtype, device, 11)
    kv_len = torch.tensor([S, 130, 0, 65], dtype=torch.int32, device=device)
    want = da.decode_attention_ref(q, k, v, mask, kv_len)
    past = torch.arange(S, device=device) >= kv_len[:, None].long()  # [c, S]
    k_bad = k.masked_fill(past[:, None, :, None], float("nan"))
    v_bad = v.masked_fill(past[:, None, :, None], float("nan"))
    got = da.decode_attention(q, k_bad, v_bad, mask, kv_len, backend="triton", num_splits=splits)
    torch.testing.assert_close(got.float(), want.float(), atol=TOL[dtype], rtol=TOL[dtype])
    assert torch.count_nonzero(got[2]) == 0 and torch.count_nonzero(got[1]) > 0
    # a strided kv_len (every other entry of a longer tensor) reads the same
    spaced = torch.stack([kv_len, torch.full_like(kv_len, -7)], 1).flatten()[::2]
    assert not spaced.is_contiguous()
    torch.testing.assert_close(da.decode_attention(q, k_bad, v_bad, mask, spaced, backend="triton",
                                                   num_splits=splits), got)
    # the reference hides those keys the way the mask does
    limited = mask & ~past[:, None, None, :]
    torch.testing.assert_close(want, da.decode_attention_ref(q, k, v, limited))


def test_tiles_shrink_to_fit_the_gpus_shared_memory_and_sdpa_takes_what_never_fits(monkeypatch):
    """_tunings keeps SmolLM2's shapes at the measured defaults on an H200 (232,448 bytes a program),
    pipelines less for bigger tiles, and gives up where nothing fits; then the op takes SDPA and
    decode_attention says why."""
    h200, a100 = 232448, 166912
    cuda = torch.device("cuda")
    monkeypatch.setattr(da, "_shared_memory", lambda device: h200)
    assert da._tunings(cuda, 2, 64, 64) == (da.BLOCK_N, da.NUM_STAGES, da.NUM_STAGES)  # SmolLM2, T <= 17
    assert da._tunings(cuda, 2, 128, 128) == (da.BLOCK_N, 2, da.NUM_STAGES)  # 4 × 17 rows, head dim 128
    assert da._tunings(cuda, 2, 128, 256) == (64, 1, 1)
    monkeypatch.setattr(da, "_shared_memory", lambda device: a100)
    assert da._tunings(cuda, 4, 128, 256) is None
    # the interpreter takes CPU tensors; without it (a CUDA machine) the triton backend wants CUDA ones
    device = "cpu" if INTERPRETING else "cuda"
    q, k, v, mask = _ragged(2, 32, 4, 9, 70, 64, None, torch.float32, device, 3)  # 8 × 9 = 72 rows
    monkeypatch.setattr(da, "_shared_memory", lambda device: 20000)
    with pytest.raises(ValueError, match="72 rows of head_dim=64 in torch.float32: even 32-key blocks need more"):
        da.decode_attention(q, k, v, mask, backend="triton")
    if INTERPRETING:
        with mock.patch.object(da, "_launch", side_effect=AssertionError("the kernel ran")):
            got = torch.ops.peagle_lab.decode_attention.default(q, k, v, mask)
        torch.testing.assert_close(got, da.decode_attention_ref(q, k, v, mask), atol=1e-5, rtol=1e-5)


def test_the_engine_context_bounds_the_keys_by_the_positions():
    """make_context hands the decode attention kv_len = the largest position + 1 of each request
    (padding rows at position 0 do not lower it), and only when a decode attention is set."""
    from peagle_lab.models.kv_cache import KVCache
    from peagle_lab.models.llama import make_context

    cache = KVCache.allocate(1, 2, 64, 1, 16, torch.float32, "cpu")
    positions = torch.tensor([[5, 6, 7, 0], [60, 61, 62, 63]])
    assert make_context(positions, cache, torch.zeros_like(positions)).kv_len is None
    cache.decode_attention = da.decode_attention_ref
    ctx = make_context(positions, cache, torch.zeros_like(positions))
    assert torch.equal(ctx.kv_len, torch.tensor([8, 64], dtype=torch.int32))
    assert ctx.layer(0).kv_len is ctx.kv_len
    # every key the mask shows lies below kv_len
    keys = torch.arange(64)
    assert not (ctx.mask[:, 0] & (keys >= ctx.kv_len[:, None, None])).any()


@pytest.mark.parametrize("bad,match", [
    (lambda q, k, v, m: (q[0], k, v, m), "q must be a 4-D float tensor"),
    (lambda q, k, v, m: (q.long(), k, v, m), "q must be a 4-D float tensor"),
    (lambda q, k, v, m: (q, k[:, :, :5], v, m), "k and v must be"),
    (lambda q, k, v, m: (q, k.double(), v.double(), m), "share one dtype"),
    (lambda q, k, v, m: (q[:, :8], k, v, m), "8 heads must be a multiple of k's 3"),
    (lambda q, k, v, m: (q, k, v, m.float()), "mask must be a bool tensor"),
    (lambda q, k, v, m: (q, k, v, m[:, :, :1]), r"mask must be a bool tensor \[c, 1, T, S\] = \[2, 1, 4, 40\]"),
    (lambda q, k, v, m: (q, k, v, m, torch.tensor([3, 4, 5])), r"kv_len must be an int32 or int64 tensor \[c\] = \[2\]"),
    (lambda q, k, v, m: (q, k, v, m, torch.tensor([3.0, 4.0])), "dtype torch.float32"),
    (lambda q, k, v, m: (q, k, v, m, [3, 4]), "got list"),
])
def test_bad_inputs_name_the_value_and_what_was_expected(bad, match):
    args = bad(*_ragged(2, 9, 3, 4, 40, 16, None, torch.float32, "cpu", 0))
    with pytest.raises(ValueError, match=match):
        da.decode_attention(*args, backend="torch")


def test_shapes_the_kernel_does_not_take_are_refused_clearly():
    q, k, v, mask = _ragged(1, 9, 3, 4, 40, 24, None, torch.float32, "cpu", 0)
    with pytest.raises(ValueError, match="head_dim=24: expected a power of two"):
        da.decode_attention(q, k, v, mask, backend="torch")
    q, k, v, mask = _ragged(1, 32, 1, 5, 40, 16, None, torch.float32, "cpu", 0)
    da.decode_attention(q, k, v, mask, backend="torch")  # the reference takes any number of rows
    if INTERPRETING:
        with pytest.raises(ValueError, match="32 query heads per K/V head × T=5 tokens = 160 rows"):
            da.decode_attention(q, k, v, mask, backend="triton")
    q, k, v, mask = _ragged(1, 9, 3, 4, 40, 16, None, torch.float32, "cpu", 0)
    with pytest.raises(ValueError, match="num_splits=0"):
        da.decode_attention(q, k, v, mask, backend="torch", num_splits=0)


@pytest.mark.skipif(not INTERPRETING, reason="the op's SDPA fallback, checked where the interpreter runs")
def test_the_op_takes_sdpa_for_more_rows_than_one_program_holds():
    q, k, v, mask = _ragged(2, 32, 1, 5, 40, 16, None, torch.float32, "cpu", 0)
    torch.testing.assert_close(torch.ops.peagle_lab.decode_attention.default(q, k, v, mask),
                               da.decode_attention_ref(q, k, v, mask), atol=1e-5, rtol=1e-5)


def test_spec_config_and_the_engine_choose_the_attention():
    with pytest.raises(ValueError, match="decode_attention='flash' is not one of 'auto', 'triton', 'sdpa'"):
        SpecConfig(decode_attention="flash")
    cpu = torch.device("cpu")
    assert decode_attention_fn("auto", cpu) is None and decode_attention_fn("sdpa", cpu) is None
    if INTERPRETING:
        assert decode_attention_fn("triton", cpu) is torch.ops.peagle_lab.decode_attention.default
    if torch.cuda.is_available():
        auto = decode_attention_fn("auto", torch.device("cuda"))
        assert auto.func is da.multi_query_attention
        assert auto.keywords == {"programs": torch.cuda.get_device_properties(0).multi_processor_count}


@pytest.mark.skipif(not INTERPRETING, reason="the routing checked where the interpreter runs")
@pytest.mark.parametrize("compiled", [False, True])
def test_auto_takes_the_kernel_for_several_queries_and_sdpa_for_one_at_large_c(compiled):
    """SpecConfig.decode_attention="auto" on CUDA: T > 1 through the kernel at any c; T = 1 through the
    kernel while c·nkv programs leave SMs spare (here 8, the engine binds the GPU's count) on cache
    blocks up to T1_KERNEL_MAX_KEYS, through SDPA otherwise, also when traced by torch.compile inside kv_cache.attend (as the engine's compiled layers
    call it)."""
    import functools

    from peagle_lab.models.kv_cache import attend

    fn = torch.compile(attend, fullgraph=True, dynamic=True) if compiled else attend
    auto = functools.partial(da.multi_query_attention, programs=8)
    calls = []
    real = da._launch

    def counting(q, *args):
        calls.append((q.shape[0], q.shape[2]))
        return real(q, *args)

    with mock.patch.object(da, "_launch", counting):
        # 3 K/V heads: 6 programs, then 9; a block longer than T1_KERNEL_MAX_KEYS goes to SDPA at T = 1
        for c, T, S in ((2, 1, 80), (3, 1, 80), (2, 3, 80), (3, 3, 80), (1, 1, da.T1_KERNEL_MAX_KEYS + 1)):
            q, k, v, mask = _ragged(c, 9, 3, T, S, 16, None, torch.float32, "cpu", T)
            got = fn(q, k, v, mask, auto)
            torch.testing.assert_close(got, da.decode_attention_ref(q, k, v, mask), atol=2e-5, rtol=2e-5)
    assert calls == [(2, 1), (2, 3), (3, 3)]


@pytest.mark.skipif(not INTERPRETING, reason="the engine on a CPU through the interpreted kernel")
@pytest.mark.parametrize("method", ["peagle", "eagle3"])
def test_engine_with_the_kernel_is_lossless_and_really_calls_it(method):
    """Float32 speculative output through the kernel equals plain greedy output (through SDPA)."""
    target = tiny_target()
    drafter = tiny_drafter(target, method, num_hidden_layers=2 if method == "peagle" else 1)
    prompts = [[1, 5, 7, 9, 3], [4, 4, 2], list(range(8, 30))]
    plain = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=10, decode_attention="sdpa"))
    want = plain.generate(prompts, eos_token_ids=()).tokens
    calls = []
    real = da._launch

    def counting(q, k, v, mask, kv_len, *args):
        calls.append(tuple(q.shape))
        bounded.append(kv_len is not None and bool((kv_len < k.shape[2]).any()))
        return real(q, k, v, mask, kv_len, *args)

    bounded = []
    cfg = SpecConfig(method=method, num_speculative_tokens=3, max_new_tokens=10, decode_attention="triton",
                     compile="off")
    with mock.patch.object(da, "_launch", counting):
        got = SpecDecoder(target, drafter, cfg).generate(prompts, eos_token_ids=()).tokens
    assert got == want
    assert {shape[2] for shape in calls} >= {4}  # verify steps (T = K + 1) went through the kernel
    assert len(calls) >= 10 * target.config.num_hidden_layers / 3
    assert any(bounded)  # the engine passed kv_len, shorter than the cache block


def test_scale_is_sdpa_default():
    """The kernel and the reference scale scores by 1/sqrt(head_dim), SDPA's default."""
    q = torch.ones(1, 1, 1, 16)
    k = torch.zeros(1, 1, 2, 16)
    k[0, 0, 0] = 1.0
    v = torch.eye(2).view(1, 1, 2, 2).repeat(1, 1, 1, 8)
    mask = torch.ones(1, 1, 1, 2, dtype=torch.bool)
    w0 = 1 / (1 + math.exp(-16 / math.sqrt(16)))  # softmax of scores (4, 0)
    assert da.decode_attention_ref(q, k, v, mask)[0, 0, 0, 0].item() == pytest.approx(w0, abs=1e-6)
