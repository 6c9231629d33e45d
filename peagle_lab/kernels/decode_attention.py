"""Attention of a decode step's few queries over the KV cache: split-KV, grouped-query, one read of K/V.

A decode step attends T ≤ 17 query tokens a request (T = 1 plain, K + 1 verifying, R drafting)
over the request's cache block of S positions, with a boolean mask (causal by position, the
cache's valid length, a drafter's window). Profiled on the H200 (``scripts/gpu/
verify_profile_gpu.py``), PyTorch's SDPA sends T > 1 with a mask to cuDNN's prefill kernel: one
thread block per (request, query head) walks all S keys in turn. On a 6,000-token prompt at c = 1
that is 9 blocks for a 132-SM GPU, 108 µs a layer, 3.8 ms of a 4.6 ms verify step; at c = 64
on chat prompts 54 µs a layer. The kernel here:

```
 grid: (request × K/V head, split)            query rows of one program: the REP query heads
                                              that share the K/V head × the T tokens
 keys 0 ............................ kv_len[b] ...... S     row = r·T + t  (head j·REP + r, token t)
      [ split 0 ][ split 1 ][ split 2 ]        (never read)
          │          │          │             each program: online softmax over its share of the
          ▼          ▼          ▼             request's valid keys, K/V blocks in flight
 (acc, max, sum) per row and split  ──►  combine kernel: out = Σ acc·e^(m−M) / Σ l·e^(m−M)
                                         (one split: the split kernel writes the output itself)
```

* K/V are read once per (request, K/V head), not once per query head;
* ``kv_len[b]`` bounds the keys a request's programs walk (the engine passes its positions'
  maximum + 1: the cache block is sized for the longest request the engine has seen, so most
  of it may lie past a request's end), and the splits share out ``[0, kv_len[b])``, so ragged
  requests keep every split busy;
* splits give the GPU about one program per SM at small c or long caches; at large c one split
  a (request, K/V head) is enough, and then no combine kernel runs;
* the key loop is software-pipelined (``NUM_STAGES`` blocks in flight); a key block no query row
  may see (a drafter's window) is loaded predicated off, not skipped by a branch, which would
  stop the pipelining;
* a (request, K/V head)'s query rows go out in 16-row tiles, one a program, where the GPU has
  programs to spare (``row_tiles_for``).

Tried and dropped: merging the splits in the last split program to finish (an atomic count per
row group, no combine launch) measured slower in a CUDA graph on the H200, 7.5 against 6.9 µs a
call at c = 1, T = 1 (``docs/results/h200/decode_attention/2026-12-02-d555a23/row_tiles.json``, ``fused=0`` is today's).

A query row that may see no key at all (padding) gets zeros (SDPA would give NaN there; such
rows are never sampled). ``decode_attention_ref`` is the spec; ``decode_attention`` picks
between it and the kernels; ``decode_attention_op`` is the same kernels as a ``torch.library``
custom op, which ``torch.compile`` and CUDA graphs take as one opaque call (the engine's path).
"""
from __future__ import annotations

import functools
import math

import torch

from ..models.kv_cache import attend
from .backend import interpreted, resolve, triton

if triton is not None:
    import triton.language as tl

__all__ = ["MAX_ROWS", "decode_attention", "decode_attention_op", "decode_attention_ref", "multi_query_attention",
           "programs_wanted", "row_tiles", "row_tiles_for", "tile_rows"]

MAX_ROWS = 128  # REP·T query rows of one program (SmolLM2: 3 × 17 = 51 at most)
BLOCK_N = 128  # keys per loop step
NUM_STAGES = 3  # key blocks in flight in the compiled key loop
MAX_SPLITS = 32  # the combine kernel walks the splits one by one
T1_KERNEL_MAX_KEYS = 4096  # multi_query_attention: longer cache blocks take SDPA for one query token
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check_inputs(q, k, v, mask, kv_len=None) -> tuple[int, int, int, int, int, int]:
    """Validate shapes, dtypes and devices; return ``(c, nh, nkv, T, S, hd)``."""
    for name, t in (("q", q), ("k", k), ("v", v), ("mask", mask)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 4 or q.dtype not in _DTYPES:
        raise ValueError(f"q must be a 4-D float tensor [c, nh, T, hd] (float16, bfloat16 or float32), "
                         f"got shape {list(q.shape)} and dtype {q.dtype}")
    c, nh, T, hd = q.shape
    if k.dim() != 4 or k.shape[0] != c or k.shape[3] != hd or tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"k and v must be [c, nkv, S, hd] = [{c}, nkv, S, {hd}] alike, got "
                         f"{list(k.shape)} and {list(v.shape)}")
    nkv, S = k.shape[1], k.shape[2]
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if nkv < 1 or nh % nkv:
        raise ValueError(f"q's {nh} heads must be a multiple of k's {nkv} K/V heads")
    if tuple(mask.shape) != (c, 1, T, S) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor [c, 1, T, S] = [{c}, 1, {T}, {S}], got shape "
                         f"{list(mask.shape)} and dtype {mask.dtype}")
    if hd < 16 or hd & (hd - 1):
        raise ValueError(f"head_dim={hd}: expected a power of two >= 16")
    tensors = (q, k, v, mask)
    if kv_len is not None:
        if not isinstance(kv_len, torch.Tensor) or tuple(kv_len.shape) != (c,) \
                or kv_len.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"kv_len must be an int32 or int64 tensor [c] = [{c}], got "
                             f"{type(kv_len).__name__ if not isinstance(kv_len, torch.Tensor) else f'shape {list(kv_len.shape)} and dtype {kv_len.dtype}'}")
        tensors += (kv_len,)
    if len({t.device for t in tensors}) != 1:
        raise ValueError(f"q, k, v, mask and kv_len must be on one device, got "
                         f"{sorted({str(t.device) for t in tensors})}")
    return c, nh, nkv, T, S, hd


def _within(mask: torch.Tensor, kv_len: torch.Tensor | None) -> torch.Tensor:
    """``mask`` [c, 1, T, S] with the keys at or past ``kv_len[b]`` hidden (None: ``mask`` itself)."""
    if kv_len is None:
        return mask
    keys = torch.arange(mask.shape[-1], device=mask.device)
    return mask & (keys < kv_len[:, None, None, None])


def decode_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                         kv_len: torch.Tensor | None = None) -> torch.Tensor:
    """Grouped-query attention of ``q`` [c, nh, T, hd] over ``k``/``v`` [c, nkv, S, hd] (PyTorch).

    ``mask`` [c, 1, T, S] bool: True where a query may see a key. ``kv_len`` [c] (optional): request
    b's keys at index ``kv_len[b]`` and past it are hidden too. Scores and softmax in float32,
    scale 1/sqrt(hd) (SDPA's default); query head h reads K/V head h // (nh / nkv); a row that may
    see no key gets zeros. Returns q's shape and dtype.

    >>> q = torch.ones(1, 2, 1, 16); k = torch.zeros(1, 1, 3, 16)
    >>> v = torch.arange(3.0).view(1, 1, 3, 1).expand(1, 1, 3, 16)
    >>> mask = torch.tensor([True, True, True]).view(1, 1, 1, 3)
    >>> decode_attention_ref(q, k, v, mask)[0, :, 0, 0]  # keys 0, 1, 2, equal scores: (0 + 1 + 2) / 3
    tensor([1., 1.])
    >>> decode_attention_ref(q, k, v, mask, torch.tensor([2]))[0, :, 0, 0]  # keys 0 and 1: (0 + 1) / 2
    tensor([0.5000, 0.5000])
    """
    _, nh, nkv, _, _, hd = _check_inputs(q, k, v, mask, kv_len)
    rep = nh // nkv
    kf = k.float().repeat_interleave(rep, 1)
    vf = v.float().repeat_interleave(rep, 1)
    scores = (q.float() @ kf.transpose(-1, -2)) / math.sqrt(hd)
    scores = scores.masked_fill(~_within(mask, kv_len), float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # all-masked rows: NaN → 0
    return (probs @ vf).to(q.dtype)


if triton is not None:

    @triton.jit
    def _rows(T, tile, REP: tl.constexpr, BLOCK_M: tl.constexpr):
        """A program's query rows: row = r·T + t is query head j·REP + r at token t; tile i holds rows
        i·BLOCK_M .. (i + 1)·BLOCK_M − 1 of the REP·T."""
        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        return rows // T, rows % T, rows < REP * T

    @triton.jit
    def _attend_block(n0, hi, q, t, row_ok, m_i, l_i, acc, k_row, v_row, mask_row, sk_s, sk_d, sv_s, sv_d,
                      sm_t, sm_s, sm_scale,
                      BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, PRECISION: tl.constexpr):
        """One step of the online softmax: keys ``n0 .. n0 + BLOCK_N`` (those below ``hi``)."""
        keys = n0 + tl.arange(0, BLOCK_N)
        key_ok = keys < hi
        d = tl.arange(0, HEAD_DIM)
        seen = tl.load(mask_row + t[:, None] * sm_t + keys[None, :] * sm_s,
                       mask=row_ok[:, None] & key_ok[None, :], other=0) != 0
        # A block no row may see reads no K/V: its loads are predicated off (a branch here would
        # stop the loop's software pipelining).
        load_ok = key_ok & (tl.max(tl.max(seen.to(tl.int32), 1), 0) > 0)
        kb = tl.load(k_row + keys[:, None] * sk_s + d[None, :] * sk_d, mask=load_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(kb), input_precision=PRECISION) * sm_scale
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw nothing yet
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        vb = tl.load(v_row + keys[:, None] * sv_s + d[None, :] * sv_d, mask=load_ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vb.dtype), vb, input_precision=PRECISION)
        return m_new, l_i, acc

    @triton.jit
    def _decode_attention_split_kernel(
        q_ptr, k_ptr, v_ptr, mask_ptr, kv_len_ptr,  # [c, nh, T, hd], [c, nkv, S, hd] ×2, [c, 1, T, S] bool, [c]
        acc_ptr, ml_ptr, out_ptr,  # outputs: partials [c·nkv·tiles, splits, BLOCK_M, hd] and [.., BLOCK_M, 2]
                                   # float32; or (SINGLE) out [c, nh, T, hd] in q's dtype
        T, S, NKV, TILES, sm_scale,
        sq_c, sq_h, sq_t, sq_d, sk_c, sk_h, sk_s, sk_d, sv_c, sv_h, sv_s, sv_d, sm_c, sm_t, sm_s,
        so_c, so_h, so_t, so_d,
        REP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
        PRECISION: tl.constexpr, SINGLE: tl.constexpr, PIPELINE: tl.constexpr, NUM_STAGES: tl.constexpr,
    ):
        pid = tl.program_id(0)  # (request · NKV + K/V head) · TILES + row tile
        split = tl.program_id(1)
        b = (pid // (NKV * TILES)).to(tl.int64)
        j = (pid // TILES) % NKV
        r, t, row_ok = _rows(T, pid % TILES, REP, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(q_ptr + b * sq_c + (j * REP + r)[:, None] * sq_h + t[:, None] * sq_t + d[None, :] * sq_d,
                    mask=row_ok[:, None], other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        # This split's share of the request's keys [0, kv_len), in whole key blocks.
        kv_len = tl.maximum(tl.minimum(tl.load(kv_len_ptr + b), S), 0)
        share = tl.cdiv(tl.cdiv(kv_len, BLOCK_N), tl.num_programs(1)) * BLOCK_N
        lo = split * share
        hi = tl.minimum(lo + share, kv_len)
        k_row, v_row, mask_row = k_ptr + b * sk_c + j * sk_h, v_ptr + b * sv_c + j * sv_h, mask_ptr + b * sm_c
        if PIPELINE:
            for n0 in tl.range(lo, hi, BLOCK_N, num_stages=NUM_STAGES):
                m_i, l_i, acc = _attend_block(n0, hi, q, t, row_ok, m_i, l_i, acc, k_row, v_row, mask_row,
                                              sk_s, sk_d, sv_s, sv_d, sm_t, sm_s, sm_scale,
                                              BLOCK_N, HEAD_DIM, PRECISION)
        else:  # Triton's interpreter cannot take a runtime range bound (see verify.py): the same steps
            n0 = lo
            while n0 < hi:
                m_i, l_i, acc = _attend_block(n0, hi, q, t, row_ok, m_i, l_i, acc, k_row, v_row, mask_row,
                                              sk_s, sk_d, sv_s, sv_d, sm_t, sm_s, sm_scale,
                                              BLOCK_N, HEAD_DIM, PRECISION)
                n0 += BLOCK_N
        if SINGLE:  # one split: normalise here, no combine kernel
            out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # a row that saw no key: zeros
            tl.store(out_ptr + b * so_c + (j * REP + r)[:, None] * so_h + t[:, None] * so_t + d[None, :] * so_d,
                     out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
        else:
            part = (pid * tl.num_programs(1) + split).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
            tl.store(acc_ptr + part[:, None] * HEAD_DIM + d[None, :], acc)
            tl.store(ml_ptr + part * 2, m_i)
            tl.store(ml_ptr + part * 2 + 1, l_i)

    @triton.jit
    def _merge_split(pid, s, num_splits, m, l_sum, acc, acc_ptr, ml_ptr,
                     BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
        """Fold split ``s``'s partial (acc, max, sum) into the running one."""
        part = (pid * num_splits + s).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        m_s = tl.load(ml_ptr + part * 2)
        l_s = tl.load(ml_ptr + part * 2 + 1)
        m_new = tl.maximum(m, m_s)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        w_old, w_s = tl.exp(m - m_use), tl.exp(m_s - m_use)
        l_sum = l_sum * w_old + l_s * w_s
        d = tl.arange(0, HEAD_DIM)
        acc = acc * w_old[:, None] + tl.load(acc_ptr + part[:, None] * HEAD_DIM + d[None, :]) * w_s[:, None]
        return m_new, l_sum, acc

    @triton.jit
    def _decode_attention_combine_kernel(
        acc_ptr, ml_ptr, out_ptr,  # the split kernel's partials; out [c, nh, T, hd] in q's dtype
        T, NKV, TILES, num_splits, so_c, so_h, so_t, so_d,
        REP: tl.constexpr, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr,
        PIPELINE: tl.constexpr, NUM_STAGES: tl.constexpr,
    ):
        pid = tl.program_id(0)  # (request · NKV + K/V head) · TILES + row tile
        b = (pid // (NKV * TILES)).to(tl.int64)
        j = (pid // TILES) % NKV
        r, t, row_ok = _rows(T, pid % TILES, REP, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_sum = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        if PIPELINE:
            for s in tl.range(0, num_splits, num_stages=NUM_STAGES):
                m, l_sum, acc = _merge_split(pid, s, num_splits, m, l_sum, acc, acc_ptr, ml_ptr, BLOCK_M, HEAD_DIM)
        else:
            s = 0
            while s < num_splits:
                m, l_sum, acc = _merge_split(pid, s, num_splits, m, l_sum, acc, acc_ptr, ml_ptr, BLOCK_M, HEAD_DIM)
                s += 1
        out = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]  # a row that saw no key: zeros
        tl.store(out_ptr + b * so_c + (j * REP + r)[:, None] * so_h + t[:, None] * so_t + d[None, :] * so_d,
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


@functools.cache
def _programs_wanted(device: torch.device) -> int:
    """About one program per SM on a GPU; a fixed 8 in the interpreter (several splits get tested)."""
    if device.type != "cuda":
        return 8
    return torch.cuda.get_device_properties(device).multi_processor_count


def num_splits_for(c: int, nkv: int, S: int, device: torch.device | str) -> int:
    """How many splits share each (request, K/V head)'s keys: about one program per SM, no more
    splits than key blocks in S, at most ``MAX_SPLITS``.

    >>> num_splits_for(1, 3, 6000, "cpu"), num_splits_for(64, 3, 6000, "cpu"), num_splits_for(1, 3, 100, "cpu")
    (3, 1, 1)
    """
    blocks = -(-S // BLOCK_N)  # ceil(S / BLOCK_N), like triton.cdiv (this runs without Triton too)
    wanted = -(-_programs_wanted(torch.device(device)) // max(c * nkv, 1))
    return max(1, min(wanted, MAX_SPLITS, blocks))


@functools.cache
def _shared_memory(device: torch.device) -> int | None:
    """The shared memory one program may use on ``device`` (bytes, Triton's own limit); None off CUDA."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]


_SHARED_SLACK = 4096  # bytes for barriers and reductions beside the tiles


@functools.cache  # the op asks twice a call (may it run, then how); the answer is fixed per shape
def _tunings(device: torch.device, itemsize: int, block_m: int, hd: int) -> tuple[int, int, int] | None:
    """``(block_n, stages, combine_stages)``: the defaults where they fit the device's shared memory;
    None where even 32-key blocks without pipelining do not (float32 with head dim 256 and 65-128 rows
    on an A100), and SDPA must take the call.

    The split kernel keeps ``stages`` K and V tiles of ``block_n × hd`` in flight plus one float32 tile of
    ``block_m × max(block_n, hd)``; the combine kernel ``stages`` float32 partials of ``block_m × hd``.
    These estimates are upper bounds of what Triton 3.6 compiled for sm_90 at every size tried (head dim
    64-256, 16-128 rows, bf16 and float32). SmolLM2's shapes (head dim 64, at most 64 rows) keep 128-key
    blocks and three stages; a head dim of 128 with 65-128 rows, or of 256, needs less on an H200.
    """
    limit = _shared_memory(device)
    if limit is None:  # the interpreter: no shared memory to run out of
        return BLOCK_N, NUM_STAGES, NUM_STAGES
    fits = [(n, st) for n, st in ((BLOCK_N, NUM_STAGES), (BLOCK_N, 2), (64, 2), (64, 1), (32, 1))
            if st * 2 * n * hd * itemsize + block_m * max(n, hd) * 4 + _SHARED_SLACK <= limit]
    if not fits:
        return None
    combine = next((st for st in (NUM_STAGES, 2) if st * block_m * hd * 4 + _SHARED_SLACK <= limit), 1)
    return (*fits[0], combine)


def _block_m(q: torch.Tensor, k: torch.Tensor) -> int:
    """A program's tile rows when a (request, K/V head)'s query rows stay one tile (:func:`tile_rows`)."""
    return tile_rows(_rows_per_program(q, k))


def tile_rows(rows: int, tiles: int = 1) -> int:
    """The rows of the tile a program computes: its share of a (request, K/V head)'s ``rows`` query rows cut into
    ``tiles`` tiles, padded to a power of two, at least 16 (for ``tl.dot``).

    >>> [tile_rows(3 * (k + 1)) for k in (3, 4, 5, 8)], tile_rows(18, 2)  # SmolLM2: 3 query heads a K/V head
    ([16, 16, 32, 32], 16)
    """
    return max(16, triton.next_power_of_2(-(-rows // tiles)))


def _runs_on_this_gpu(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether the kernel takes these shapes: at most ``MAX_ROWS`` rows a program, within shared memory."""
    return _rows_per_program(q, k) <= MAX_ROWS and \
        _tunings(q.device, q.element_size(), _block_m(q, k), q.shape[-1]) is not None


def _rows_per_program(q: torch.Tensor, k: torch.Tensor) -> int:
    """Query rows of one (request, K/V head): the query heads that share the K/V head × the T tokens."""
    return (q.shape[1] // k.shape[1]) * q.shape[2]


def row_tiles_for(c: int, nkv: int, rows: int, device: torch.device | str) -> int:
    """How many 16-row tiles a (request, K/V head)'s query rows are cut into: one tile a program.

    A 32-row tile costs a program more than a 16-row one (on the H200 the split kernel took 5.8 against
    4.7 µs at c = 1 and T = 6 against T = 5, SmolLM2's 3 query heads a K/V head), so where the GPU has
    programs to spare the rows go out in tiles of 16, each reading the keys again (cheap while c is
    small); where it has none (c·nkv·tiles above one program an SM) they stay one tile. The call in
    30 graphed layers (``docs/results/h200/decode_attention/2026-12-02-d555a23/row_tiles.json``), one tile against 16-row
    tiles at c = 1 on a 640-position block: 8.7 against 7.3 µs at T = 6, 8.8 against 7.4 at T = 8,
    11.9 against 7.3 at T = 14 (P-EAGLE's K = 7 drafter rows); 15.5 against 13.2 at T = 8 on 7744
    positions. At c = 8, T = 8 (48 programs) 9.9 against 10.4: about level.

    >>> row_tiles_for(1, 3, 18, "cpu"), row_tiles_for(1, 3, 15, "cpu"), row_tiles_for(64, 3, 24, "cpu")
    (2, 1, 1)
    """
    return row_tiles(c, nkv, rows, _programs_wanted(torch.device(device)))


def row_tiles(c: int, nkv: int, rows: int, programs: int) -> int:
    """:func:`row_tiles_for`'s rule on a GPU that runs ``programs`` programs at once (one an SM): 16-row tiles
    while c × ``nkv`` × tiles programs fit, else one tile.

    >>> row_tiles(1, 3, 18, 132), row_tiles(64, 3, 18, 132)  # an H100 has 132 SMs
    (2, 1)
    """
    tiles = -(-rows // 16)
    return tiles if tiles > 1 and c * nkv * tiles <= programs else 1


def _launch(q, k, v, mask, kv_len, num_splits: int | None, *, block_n: int | None = None,
            num_stages: int | None = None, num_warps: int = 8, row_tiles: int | None = None) -> torch.Tensor:
    """Run the kernels. ``block_n`` / ``num_stages`` override :func:`_tunings` and ``row_tiles``
    :func:`row_tiles_for` (for ``scripts/gpu/decode_attention_gpu.py``'s sweep of variants)."""
    c, nh, T, hd = q.shape
    nkv, S = k.shape[1], k.shape[2]
    rep = nh // nkv
    out = torch.empty_like(q)
    if out.numel() == 0:
        return out
    if kv_len is None:
        kv_len = torch.full((c,), S, dtype=torch.int32, device=q.device)
    kv_len = kv_len.contiguous()  # the kernel reads kv_len[b] at offset b
    rows = _rows_per_program(q, k)
    tiles = row_tiles or row_tiles_for(c, nkv, rows, q.device)
    block_m = tile_rows(rows, tiles)
    fit_n, fit_stages, combine_stages = _tunings(q.device, q.element_size(), block_m, hd)
    block_n, num_stages = block_n or fit_n, num_stages or fit_stages
    groups = c * nkv * tiles  # row groups: (request, K/V head, row tile)
    splits = min(num_splits or num_splits_for(c * tiles, nkv, S, q.device), triton.cdiv(S, block_n))
    single = splits == 1
    if single:  # the partials are never written: any float32 pointer will do
        acc = ml = torch.empty(1, dtype=torch.float32, device=q.device)
    else:
        acc = torch.empty(groups, splits, block_m, hd, dtype=torch.float32, device=q.device)
        ml = torch.empty(groups, splits, block_m, 2, dtype=torch.float32, device=q.device)
    pipeline = not interpreted()
    mask8 = mask.view(torch.uint8)  # Triton takes bool pointers as int1; bytes load the same bits
    _decode_attention_split_kernel[(groups, splits)](
        q, k, v, mask8, kv_len, acc, ml, out, T, S, nkv, tiles, 1.0 / math.sqrt(hd),
        *q.stride(), *k.stride(), *v.stride(), mask8.stride(0), mask8.stride(2), mask8.stride(3), *out.stride(),
        REP=rep, BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=hd,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", SINGLE=single, PIPELINE=pipeline,
        NUM_STAGES=num_stages, num_warps=num_warps)
    if not single:
        _decode_attention_combine_kernel[(groups,)](
            acc, ml, out, T, nkv, tiles, splits, *out.stride(), REP=rep, BLOCK_M=block_m, HEAD_DIM=hd,
            PIPELINE=pipeline, NUM_STAGES=combine_stages, num_warps=4)
    return out


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     kv_len: torch.Tensor | None = None, *, backend: str = "auto",
                     num_splits: int | None = None) -> torch.Tensor:
    """Grouped-query attention of a decode step's queries: the kernels, or the reference.

    Args:
        q, k, v, mask, kv_len: as in :func:`decode_attention_ref` (k/v may be strided views of a
            cache; the kernels read no key at or past ``kv_len[b]``).
        backend: "triton", "torch", or "auto" (compiled Triton for CUDA tensors, the reference
            for CPU tensors; see :mod:`peagle_lab.kernels.backend`).
        num_splits: key ranges per (request, K/V head); None picks :func:`num_splits_for`.

    Returns:
        ``[c, nh, T, hd]`` in q's dtype: equal to the reference up to float rounding (the order
        of the sums differs), zeros for rows that may see no key.

    Raises:
        ValueError: on a wrong shape, dtype or device mix, a bad ``num_splits``, a backend that
            cannot run here, or (the kernel) more than ``MAX_ROWS`` query rows per K/V head.
    """
    _check_inputs(q, k, v, mask, kv_len)
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"num_splits={num_splits!r}: expected a positive int or None")
    if resolve(backend, q.device) == "torch":
        return decode_attention_ref(q, k, v, mask, kv_len)
    rows = _rows_per_program(q, k)
    if rows > MAX_ROWS:
        raise ValueError(f"{q.shape[1] // k.shape[1]} query heads per K/V head × T={q.shape[2]} tokens = {rows} "
                         f"rows: the kernel takes at most {MAX_ROWS} (a decode step; use backend='torch' or SDPA)")
    if not _runs_on_this_gpu(q, k):
        raise ValueError(f"{rows} rows of head_dim={q.shape[-1]} in {q.dtype}: even 32-key blocks need more shared "
                         f"memory than {q.device} has ({_shared_memory(q.device)} bytes); use backend='torch' or SDPA")
    return _launch(q, k, v, mask, kv_len, num_splits)


if triton is not None:

    @torch.library.custom_op("peagle_lab::decode_attention", mutates_args=())
    def decode_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                            kv_len: torch.Tensor | None = None) -> torch.Tensor:
        """:func:`decode_attention` with the kernels, as one op that ``torch.compile`` does not trace into.

        More than ``MAX_ROWS`` query rows per K/V head (a model with many query heads per K/V head), or
        tiles too large for the GPU's shared memory, take SDPA instead, so the op serves any decode shape.
        """
        _check_inputs(q, k, v, mask, kv_len)
        if not _runs_on_this_gpu(q, k):
            return attend(q, k, v, _within(mask, kv_len))  # the model's own path: SDPA
        return _launch(q, k, v, mask, kv_len, None)

    @decode_attention_op.register_fake
    def _(q, k, v, mask, kv_len=None):
        return torch.empty_like(q)
else:  # pragma: no cover - Triton ships Linux wheels only
    decode_attention_op = None


def programs_wanted(device: torch.device | str) -> int:
    """About one program per SM (the multiprocessor count) on a GPU; 8 in the interpreter."""
    return _programs_wanted(torch.device(device))


def multi_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                          kv_len: torch.Tensor | None = None, *, programs: int | None = None) -> torch.Tensor:
    """The kernel for every decode call but one query token a request at large c, which SDPA takes.

    ``SpecConfig.decode_attention="auto"`` on CUDA (the engine binds ``programs``, the GPU's SM count,
    so the compiled layers see a plain int; None reads it from q's device).

    * T > 1: the kernel. Measured on the H200 (the K sweep and the long-prompt sweep each
      beside SDPA, ``docs/results/h200/decode_attention/``): every speculative cell ran faster
      through it, most of all on long prompts.
    * T = 1 while c·nkv ≤ ``programs``: the kernel, whose key splits give a few requests one program an
      SM. The call alone (``scripts/gpu/decode_attention_gpu.py --shapes``, H200,
      ``docs/results/h200/decode_attention/2026-12-02-d555a23/row_tiles.json``) read 6.9 against SDPA's 10.4 µs at c = 1
      on a 640-position block, 8.0 against 13.0 at c = 8, 10.5 against 14.6 at c = 16, 13.6 against
      14.4 at c = 32; level on longer blocks (12.7 against 12.5 at c = 1 on 4096, 27.2 against 27.6
      at c = 32 on 2048).
    * T = 1 at larger c, or on a cache block longer than ``T1_KERNEL_MAX_KEYS``: SDPA (cuDNN's decode
      kernel), which one split per (request, K/V head) does not beat: 17.6 against 18.2 µs at c = 64 on
      640 positions (34.9 against 43.5 on 2048, ``t1_shapes.json`` beside it); and whose own key
      splits win on long blocks: 13.5 against 15.1 µs at c = 1 and 25.2 against 29.2 at c = 8 on 7744
      (``decode_attention_kernel_507773e.json``).

    SDPA takes the mask alone: the engine's ``kv_len`` (its positions' maximum + 1) hides no key
    that its causal mask shows, and one op fewer a layer keeps T = 1 steps short.
    """
    if programs is None:
        programs = programs_wanted(q.device)
    if q.shape[2] == 1 and (q.shape[0] * k.shape[1] > programs or k.shape[2] > T1_KERNEL_MAX_KEYS):
        return attend(q, k, v, mask)  # the model's own path: SDPA
    return torch.ops.peagle_lab.decode_attention.default(q, k, v, mask, kv_len)
