"""Attention of a decode step's few queries over the KV cache: split-KV, grouped-query, one read of K/V.

A decode step attends T ≤ 17 query tokens a request (T = 1 plain, K + 1 verifying, R drafting)
over the request's whole cache block of S positions, with a boolean mask (causal by position,
the cache's valid length, a drafter's window). Profiled on the H200 (``scripts/gpu/
verify_profile_gpu.py``), PyTorch's SDPA sends T > 1 with a mask to cuDNN's prefill kernel: one
thread block per (request, query head) walks all S keys in turn. On a 6,000-token prompt at c = 1
that is 9 blocks for a 132-SM GPU, 108 µs a layer, 3.8 ms of a 4.6 ms verify step; at c = 64
on chat prompts 54 µs a layer. The kernel here:

```
 grid: (request × K/V head, split)            query rows of one program: the REP query heads
                                              that share the K/V head × the T tokens
 split 0      split 1      split 2            row = r·T + t  (head j·REP + r, token t)
 [keys 0..n)  [n..2n)      [2n..S)
    │            │            │               each program: online softmax over its keys,
    ▼            ▼            ▼               skipping key blocks the mask rules out entirely
 (acc, max, sum) per row and split  ──►  combine kernel: out = Σ acc·e^(m−M) / Σ l·e^(m−M)
```

* K/V are read once per (request, K/V head), not once per query head;
* splits give the GPU enough programs at small c and long S (about two per SM);
* masked-out key blocks (past the request's length, outside a window) cost only the mask load.

A query row that may see no key at all (padding) gets zeros (SDPA would give NaN there; such
rows are never sampled). ``decode_attention_ref`` is the spec; ``decode_attention`` picks
between it and the kernels; ``decode_attention_op`` is the same kernels as a ``torch.library``
custom op, which ``torch.compile`` and CUDA graphs take as one opaque call (the engine's path).
"""
from __future__ import annotations

import functools
import math

import torch

from ..models.llama import attend
from .backend import resolve, triton

if triton is not None:
    import triton.language as tl

__all__ = ["MAX_ROWS", "decode_attention", "decode_attention_op", "decode_attention_ref", "multi_query_attention"]

MAX_ROWS = 128  # REP·T query rows of one program (SmolLM2: 3 × 17 = 51 at most)
BLOCK_N = 64  # keys per loop step
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check_inputs(q, k, v, mask) -> tuple[int, int, int, int, int, int]:
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
    if len({t.device for t in (q, k, v, mask)}) != 1:
        raise ValueError(f"q, k, v and mask must be on one device, got "
                         f"{sorted({str(t.device) for t in (q, k, v, mask)})}")
    return c, nh, nkv, T, S, hd


def decode_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Grouped-query attention of ``q`` [c, nh, T, hd] over ``k``/``v`` [c, nkv, S, hd] (PyTorch).

    ``mask`` [c, 1, T, S] bool: True where a query may see a key. Scores and softmax in float32,
    scale 1/sqrt(hd) (SDPA's default); query head h reads K/V head h // (nh / nkv); a row that may
    see no key gets zeros. Returns q's shape and dtype.

    >>> q = torch.ones(1, 2, 1, 16); k = torch.zeros(1, 1, 3, 16)
    >>> v = torch.arange(3.0).view(1, 1, 3, 1).expand(1, 1, 3, 16)
    >>> mask = torch.tensor([True, True, False]).view(1, 1, 1, 3)
    >>> decode_attention_ref(q, k, v, mask)[0, :, 0, 0]  # keys 0 and 1, equal scores: (0 + 1) / 2
    tensor([0.5000, 0.5000])
    """
    _, nh, nkv, _, _, hd = _check_inputs(q, k, v, mask)
    rep = nh // nkv
    kf = k.float().repeat_interleave(rep, 1)
    vf = v.float().repeat_interleave(rep, 1)
    scores = (q.float() @ kf.transpose(-1, -2)) / math.sqrt(hd)
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # all-masked rows: NaN → 0
    return (probs @ vf).to(q.dtype)


if triton is not None:

    @triton.jit
    def _rows(T, REP: tl.constexpr, BLOCK_M: tl.constexpr):
        """A program's query rows: row = r·T + t is query head j·REP + r at token t."""
        rows = tl.arange(0, BLOCK_M)
        return rows // T, rows % T, rows < REP * T

    @triton.jit
    def _decode_attention_split_kernel(
        q_ptr, k_ptr, v_ptr, mask_ptr,  # [c, nh, T, hd], [c, nkv, S, hd] ×2, [c, 1, T, S] bool
        acc_ptr, ml_ptr,  # outputs: [c·nkv, splits, BLOCK_M, hd] and [c·nkv, splits, BLOCK_M, 2] float32
        T, S, NKV, keys_per_split, sm_scale,
        sq_c, sq_h, sq_t, sq_d, sk_c, sk_h, sk_s, sk_d, sv_c, sv_h, sv_s, sv_d, sm_c, sm_t, sm_s,
        REP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        pid = tl.program_id(0)  # request · NKV + K/V head
        split = tl.program_id(1)
        b = (pid // NKV).to(tl.int64)
        j = pid % NKV
        r, t, row_ok = _rows(T, REP, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(q_ptr + b * sq_c + (j * REP + r)[:, None] * sq_h + t[:, None] * sq_t + d[None, :] * sq_d,
                    mask=row_ok[:, None], other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        hi = tl.minimum((split + 1) * keys_per_split, S)
        n0 = split * keys_per_split
        # A while loop, not range(): Triton's interpreter cannot take a runtime bound (see verify.py).
        while n0 < hi:
            keys = n0 + tl.arange(0, BLOCK_N)
            key_ok = keys < hi
            seen = tl.load(mask_ptr + b * sm_c + t[:, None] * sm_t + keys[None, :] * sm_s,
                           mask=row_ok[:, None] & key_ok[None, :], other=0) != 0
            if tl.max(tl.max(seen.to(tl.int32), 1), 0) > 0:  # a block no row may see costs no K/V read
                kb = tl.load(k_ptr + b * sk_c + j * sk_h + keys[:, None] * sk_s + d[None, :] * sk_d,
                             mask=key_ok[:, None], other=0.0)
                s = tl.dot(q, tl.trans(kb), input_precision=PRECISION) * sm_scale
                s = tl.where(seen, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw nothing yet
                alpha = tl.exp(m_i - m_use)
                p = tl.exp(s - m_use[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                vb = tl.load(v_ptr + b * sv_c + j * sv_h + keys[:, None] * sv_s + d[None, :] * sv_d,
                             mask=key_ok[:, None], other=0.0)
                acc = acc * alpha[:, None] + tl.dot(p.to(vb.dtype), vb, input_precision=PRECISION)
                m_i = m_new
            n0 += BLOCK_N
        part = (pid * tl.num_programs(1) + split).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        tl.store(acc_ptr + part[:, None] * HEAD_DIM + d[None, :], acc)
        tl.store(ml_ptr + part * 2, m_i)
        tl.store(ml_ptr + part * 2 + 1, l_i)

    @triton.jit
    def _decode_attention_combine_kernel(
        acc_ptr, ml_ptr, out_ptr,  # the split kernel's partials; out [c, nh, T, hd] in q's dtype
        T, NKV, num_splits, so_c, so_h, so_t, so_d,
        REP: tl.constexpr, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr,
    ):
        pid = tl.program_id(0)
        b = (pid // NKV).to(tl.int64)
        j = pid % NKV
        r, t, row_ok = _rows(T, REP, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_sum = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        s = 0
        while s < num_splits:
            part = (pid * num_splits + s).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
            m_s = tl.load(ml_ptr + part * 2)
            l_s = tl.load(ml_ptr + part * 2 + 1)
            m_new = tl.maximum(m, m_s)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            w_old, w_s = tl.exp(m - m_use), tl.exp(m_s - m_use)
            l_sum = l_sum * w_old + l_s * w_s
            acc = acc * w_old[:, None] + tl.load(acc_ptr + part[:, None] * HEAD_DIM + d[None, :]) * w_s[:, None]
            m = m_new
            s += 1
        out = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]  # a row that saw no key: zeros
        tl.store(out_ptr + b * so_c + (j * REP + r)[:, None] * so_h + t[:, None] * so_t + d[None, :] * so_d,
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


@functools.cache
def _programs_wanted(device: torch.device) -> int:
    """About two programs per SM on a GPU; a fixed 8 in the interpreter (several splits get tested)."""
    if device.type != "cuda":
        return 8
    return 2 * torch.cuda.get_device_properties(device).multi_processor_count


def num_splits_for(c: int, nkv: int, S: int, device: torch.device | str) -> int:
    """How many key ranges each (request, K/V head) is split into: enough programs for the GPU,
    at most one key block each.

    >>> num_splits_for(1, 3, 6000, "cpu"), num_splits_for(64, 3, 6000, "cpu"), num_splits_for(1, 3, 50, "cpu")
    (2, 1, 1)
    """
    blocks = -(-S // BLOCK_N)  # ceil(S / BLOCK_N), like triton.cdiv (this runs without Triton too)
    return max(1, min(blocks, _programs_wanted(torch.device(device)) // max(c * nkv, 1)))


def _rows_per_program(q: torch.Tensor, k: torch.Tensor) -> int:
    """Query rows of one program: the query heads that share a K/V head × the T tokens."""
    return (q.shape[1] // k.shape[1]) * q.shape[2]


def _launch(q, k, v, mask, num_splits: int | None) -> torch.Tensor:
    c, nh, T, hd = q.shape
    nkv, S = k.shape[1], k.shape[2]
    rep = nh // nkv
    out = torch.empty_like(q)
    if out.numel() == 0:
        return out
    splits = num_splits or num_splits_for(c, nkv, S, q.device)
    keys_per_split = triton.cdiv(triton.cdiv(S, BLOCK_N), splits) * BLOCK_N  # whole key blocks per split
    splits = triton.cdiv(S, keys_per_split)  # no split left without keys
    block_m = max(16, triton.next_power_of_2(rep * T))
    acc = torch.empty(c * nkv, splits, block_m, hd, dtype=torch.float32, device=q.device)
    ml = torch.empty(c * nkv, splits, block_m, 2, dtype=torch.float32, device=q.device)
    mask8 = mask.view(torch.uint8)  # Triton takes bool pointers as int1; bytes load the same bits
    _decode_attention_split_kernel[(c * nkv, splits)](
        q, k, v, mask8, acc, ml, T, S, nkv, keys_per_split, 1.0 / math.sqrt(hd),
        *q.stride(), *k.stride(), *v.stride(), mask8.stride(0), mask8.stride(2), mask8.stride(3),
        REP=rep, BLOCK_M=block_m, BLOCK_N=BLOCK_N, HEAD_DIM=hd,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", num_warps=4)
    _decode_attention_combine_kernel[(c * nkv,)](
        acc, ml, out, T, nkv, splits, *out.stride(), REP=rep, BLOCK_M=block_m, HEAD_DIM=hd, num_warps=4)
    return out


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, *,
                     backend: str = "auto", num_splits: int | None = None) -> torch.Tensor:
    """Grouped-query attention of a decode step's queries: the kernels, or the reference.

    Args:
        q, k, v, mask: as in :func:`decode_attention_ref` (k/v may be strided views of a cache).
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
    _check_inputs(q, k, v, mask)
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"num_splits={num_splits!r}: expected a positive int or None")
    if resolve(backend, q.device) == "torch":
        return decode_attention_ref(q, k, v, mask)
    rows = _rows_per_program(q, k)
    if rows > MAX_ROWS:
        raise ValueError(f"{q.shape[1] // k.shape[1]} query heads per K/V head × T={q.shape[2]} tokens = {rows} "
                         f"rows: the kernel takes at most {MAX_ROWS} (a decode step; use backend='torch' or SDPA)")
    return _launch(q, k, v, mask, num_splits)


if triton is not None:

    @torch.library.custom_op("peagle_lab::decode_attention", mutates_args=())
    def decode_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """:func:`decode_attention` with the kernels, as one op that ``torch.compile`` does not trace into.

        More than ``MAX_ROWS`` query rows per K/V head (a model with many query heads per K/V head)
        take SDPA instead, so the op serves any decode shape.
        """
        _check_inputs(q, k, v, mask)
        if _rows_per_program(q, k) > MAX_ROWS:
            return attend(q, k, v, mask)  # the model's own path: SDPA
        return _launch(q, k, v, mask, None)

    @decode_attention_op.register_fake
    def _(q, k, v, mask):
        return torch.empty_like(q)
else:  # pragma: no cover - Triton ships Linux wheels only
    decode_attention_op = None


def multi_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The kernel for decode calls of T > 1 query tokens a request, SDPA for T = 1.

    ``SpecConfig.decode_attention="auto"`` on CUDA. Measured on the H200 (4aa32a3, both K sweeps in one
    call): every speculative cell ran faster through the kernel (verify steps 0.1 ms faster at c = 1,
    0.5 ms at c = 64, 2.3 ms on 2k-7k-token prompts), but plain decoding (T = 1), for which SDPA has a
    split-KV decode path of its own (cuDNN's, with a reduction kernel), ran slower through it at c = 64
    (1.53 against 1.46 ms a step on chat) and on long prompts (2.0 against 1.3 ms at c = 1).
    """
    if q.shape[2] == 1:
        return attend(q, k, v, mask)  # the model's own path: SDPA
    return torch.ops.peagle_lab.decode_attention.default(q, k, v, mask)
