"""Fused verify kernels: Triton programs decide each request's accepted drafts.

The spec is :mod:`peagle_lab.verify` (re-exported here as ``verify_greedy_ref`` and
``verify_rejection_ref``). Reading it first is the point: the kernels below make the
same decisions with the same arithmetic, so the two agree bit for bit.

Why fuse? The reference launches a dozen small ops over ``[c, K+1, V]``. Greedy
verification runs in two launches. The first finds each logits row's argmax: a row's
vocabulary is split into ``S`` chunks, one program each, so the c·(K+1)·S programs keep the
GPU busy at every c (a program per request walking its rows in turn starved it at large c;
a program per row left most SMs idle at c = 1, where one program walked SmolLM2's 49,152
logits in 48 serial steps). The second, one program per request, merges each row's chunk
winners and finds the first slot whose draft the target rejects. Rejection sampling is one program per request, which walks its slots
in order, stops at the first rejection and makes one pass over one row of ``V``.

Exactness rules shared with the reference:

- argmax ties go to the lowest id (``torch.argmax`` returns the first maximum; the kernel
  takes ``tie_break_left`` inside a block, keeps an earlier block on equal values, and the
  merge keeps the earliest chunk among equal chunk winners);
- ratios use round-to-nearest division (``div_rn``), which is what PyTorch's ``/`` does
  and what Triton's ``/`` does not promise on GPUs;
- rejection sampling computes in float32, whatever the input dtype.
"""
from __future__ import annotations

import torch

from peagle_lab.verify import VerifyResult, check_greedy_inputs, check_rejection_inputs
from peagle_lab.verify import verify_greedy as verify_greedy_ref
from peagle_lab.verify import verify_rejection as verify_rejection_ref

from .backend import resolve, triton
from .decode_attention import programs_wanted

if triton is not None:
    import triton.language as tl

__all__ = ["verify_greedy", "verify_rejection", "verify_greedy_ref", "verify_rejection_ref"]

_MAX_BLOCK_V = 1024  # vocabulary lanes per loop step; 49152 (SmolLM2) takes 48 steps
MAX_ARGMAX_CHUNKS = 64  # chunks a greedy-verify row's argmax is split into at most


if triton is not None:

    @triton.jit
    def _chunk_argmax(row_ptr, start, stop, BLOCK_V: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
        """``(value, index)`` of the first maximum of ``row_ptr[start:stop]`` (index int64)."""
        best_val = tl.full([], float("-inf"), COMPUTE_DTYPE)
        best_idx = start
        # A while loop, not range(start, stop, BLOCK_V): Triton 3.6's interpreter cannot turn
        # a runtime scalar argument into a range bound under NumPy 2.4.
        while start < stop:
            offs = start + tl.arange(0, BLOCK_V)
            x = tl.load(row_ptr + offs, mask=offs < stop, other=float("-inf")).to(COMPUTE_DTYPE)
            blk_val, blk_idx = tl.max(x, axis=0, return_indices=True,
                                      return_indices_tie_break_left=True)
            # Strictly greater: on equal values the earlier block (lower id) keeps the win.
            better = blk_val > best_val
            best_idx = tl.where(better, start + blk_idx, best_idx)
            best_val = tl.where(better, blk_val, best_val)
            start += BLOCK_V
        return best_val, best_idx

    @triton.jit
    def _write_outputs(
        drafts_ptr, num_accepted_ptr, next_tokens_ptr, output_tokens_ptr,
        req, n, next_token, K, BLOCK_K: tl.constexpr,
    ):
        """Write one request's row of the result.

        output_tokens row (K = 4, n = 2 accepted):

            col:    0     1     2      3    4
                  [ d0,   d1,   next,  -1,  -1 ]
                   col < n      col == n   col > n
        """
        tl.store(num_accepted_ptr + req, n)
        tl.store(next_tokens_ptr + req, next_token)
        cols = tl.arange(0, BLOCK_K)
        drafts = tl.load(drafts_ptr + cols, mask=cols < n, other=-1).to(tl.int64)
        row = tl.where(cols == n, next_token, drafts)
        tl.store(output_tokens_ptr + req * (K + 1) + cols, row, mask=cols < K + 1)

    @triton.jit
    def _argmax_chunks_kernel(
        logits_ptr,   # [rows, V] any float dtype (rows = c * (K+1))
        best_val_ptr,  # [rows, S] COMPUTE_DTYPE, output: each chunk's maximum
        best_idx_ptr,  # [rows, S] int64, output: where it first occurs
        V, CHUNK,      # CHUNK: logits a chunk, a multiple of BLOCK_V
        S: tl.constexpr,
        BLOCK_V: tl.constexpr,
        COMPUTE_DTYPE: tl.constexpr,
    ):
        """Stage 1 of greedy verification: program (row, s) finds chunk s's first maximum.

            row r:  [ chunk 0 | chunk 1 | ... | chunk S-1 ]   (the last one may be short)
                        │          │                 │
            best[r] = [ (v0, i0), (v1, i1), ...,  (vS-1, iS-1) ]
        """
        row = tl.program_id(0).to(tl.int64)
        chunk = tl.program_id(1).to(tl.int64)
        start = chunk * CHUNK
        val, idx = _chunk_argmax(logits_ptr + row * V, start, tl.minimum(start + CHUNK, V),
                                 BLOCK_V, COMPUTE_DTYPE)
        tl.store(best_val_ptr + row * S + chunk, val)
        tl.store(best_idx_ptr + row * S + chunk, idx)

    @triton.jit
    def _accept_greedy_kernel(
        best_val_ptr,        # [c, K+1, S] chunk maxima (stage 1)
        best_idx_ptr,        # [c, K+1, S] int64, their ids
        draft_tokens_ptr,    # [c, K] int32/int64
        num_accepted_ptr,    # [c] int64
        next_tokens_ptr,     # [c] int64
        output_tokens_ptr,   # [c, K+1] int64
        K,
        S: tl.constexpr,
        BLOCK_K: tl.constexpr,  # next power of two >= K+1
        BLOCK_S: tl.constexpr,  # next power of two >= S
    ):
        """Stage 2: one program per request. Each slot's target token is its row's first
        maximum (the earliest chunk among equal chunk maxima); then n = the first slot whose
        draft the target rejects.

            slot:     0    1    2    3 (= K)
            draft:    d0   d1   d2   (none)
            target:   t0   t1   t2   t3        n = first slot with d != t, or K
        """
        req = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_K)
        chunks = tl.arange(0, BLOCK_S)
        at = req * (K + 1) * S + cols[:, None] * S + chunks[None, :]
        live = (cols[:, None] < K + 1) & (chunks[None, :] < S)
        vals = tl.load(best_val_ptr + at, mask=live, other=float("-inf"))
        ids = tl.load(best_idx_ptr + at, mask=live, other=0)
        top = tl.max(vals, axis=1)
        # Chunks are in id order, so the first chunk holding the maximum holds its first id.
        first = tl.min(tl.where(live & (vals == top[:, None]), chunks[None, :], BLOCK_S), axis=1)
        target = tl.sum(tl.where(chunks[None, :] == first[:, None], ids, 0), axis=1)
        drafts = draft_tokens_ptr + req * K
        draft = tl.load(drafts + cols, mask=cols < K, other=-1).to(tl.int64)
        rejected = (draft != target) | (cols >= K)
        n = tl.min(tl.where(rejected, cols, BLOCK_K), axis=0).to(tl.int64)
        next_token = tl.sum(tl.where(cols == n, target, 0), axis=0)
        _write_outputs(drafts, num_accepted_ptr, next_tokens_ptr, output_tokens_ptr,
                       req, n, next_token, K, BLOCK_K)

    @triton.jit
    def _accept_draft(target_probs, draft_probs, drafts, uniform, i, K, V):
        """Whether draft i passes ``uniform < target_probs[tok] / draft_probs[tok]``."""
        valid = i < K
        tok = tl.load(drafts + i, mask=valid, other=0).to(tl.int64)
        tp = tl.load(target_probs + i * V + tok, mask=valid, other=0.0).to(tl.float32)
        dp = tl.load(draft_probs + i * V + tok, mask=valid, other=1.0).to(tl.float32)
        u = tl.load(uniform + i, mask=valid, other=1.0).to(tl.float32)
        return valid & (u < tl.math.div_rn(tp, dp))

    @triton.jit
    def _verify_rejection_kernel(
        # inputs
        target_probs_ptr,    # [c, K+1, V] float
        draft_probs_ptr,     # [c, K, V] float
        draft_tokens_ptr,    # [c, K] int32/int64
        uniform_ptr,         # [c, K] float, in [0, 1)
        noise_ptr,           # [c, V] float, Exp(1) draws
        # outputs
        num_accepted_ptr,    # [c] int64
        next_tokens_ptr,     # [c] int64
        output_tokens_ptr,   # [c, K+1] int64
        # metadata
        K, V,
        BLOCK_V: tl.constexpr,  # power of two, lanes per step over V
        BLOCK_K: tl.constexpr,  # next power of two >= K+1
    ):
        req = tl.program_id(0).to(tl.int64)
        target_probs = target_probs_ptr + req * (K + 1) * V
        draft_probs = draft_probs_ptr + req * K * V
        drafts = draft_tokens_ptr + req * K
        uniform = uniform_ptr + req * K
        noise = noise_ptr + req * V

        n = tl.zeros([], tl.int64)
        keep = _accept_draft(target_probs, draft_probs, drafts, uniform, n, K, V)
        while keep:
            n += 1
            keep = _accept_draft(target_probs, draft_probs, drafts, uniform, n, K, V)

        # One pass over row n races both candidate distributions, the residual
        # max(0, tp - dp) and tp itself; which one counts is known only at the end.
        tp_row = target_probs + n * V
        dp_row = draft_probs + tl.minimum(n, K - 1) * V
        max_residual = tl.zeros([], tl.float32)
        best_res = tl.full([], -1.0, tl.float32)
        best_res_idx = tl.zeros([], tl.int64)
        best_tgt = tl.full([], -1.0, tl.float32)
        best_tgt_idx = tl.zeros([], tl.int64)
        start = tl.zeros([], tl.int64)
        while start < V:
            offs = start + tl.arange(0, BLOCK_V)
            in_vocab = offs < V
            tp = tl.load(tp_row + offs, mask=in_vocab, other=0.0).to(tl.float32)
            # The bonus slot has no draft: a zero draft leaves the target unchanged.
            dp = tl.load(dp_row + offs, mask=in_vocab & (n < K),
                         other=0.0).to(tl.float32)
            z = tl.load(noise + offs, mask=in_vocab, other=1.0).to(tl.float32)
            residual = tl.maximum(tp - dp, 0.0)
            max_residual = tl.maximum(max_residual, tl.max(residual, axis=0))
            # Scores are >= 0, so -1 keeps lanes past V out of the race.
            res_score = tl.where(in_vocab, tl.math.div_rn(residual, z), -1.0)
            tgt_score = tl.where(in_vocab, tl.math.div_rn(tp, z), -1.0)
            blk_val, blk_idx = tl.max(res_score, axis=0, return_indices=True,
                                      return_indices_tie_break_left=True)
            better = blk_val > best_res
            best_res_idx = tl.where(better, start + blk_idx, best_res_idx)
            best_res = tl.where(better, blk_val, best_res)
            blk_val, blk_idx = tl.max(tgt_score, axis=0, return_indices=True,
                                      return_indices_tie_break_left=True)
            better = blk_val > best_tgt
            best_tgt_idx = tl.where(better, start + blk_idx, best_tgt_idx)
            best_tgt = tl.where(better, blk_val, best_tgt)
            start += BLOCK_V
        next_token = tl.where(max_residual > 0, best_res_idx, best_tgt_idx)
        _write_outputs(drafts, num_accepted_ptr, next_tokens_ptr, output_tokens_ptr,
                       req, n, next_token, K, BLOCK_K)


def _finish(num_accepted: torch.Tensor, next_tokens: torch.Tensor,
            output_tokens: torch.Tensor, K: int) -> VerifyResult:
    """Add the cheap per-request and per-position summaries to the kernel's outputs."""
    positions = torch.arange(K, device=num_accepted.device)               # [K]
    return VerifyResult(
        num_accepted=num_accepted,
        output_tokens=output_tokens,
        next_tokens=next_tokens,
        is_bonus=num_accepted == K,
        accepted_per_position=(positions < num_accepted[:, None]).sum(dim=0),
    )


def _empty_outputs(c: int, K: int, device: torch.device):
    """Allocate ``num_accepted [c]``, ``next_tokens [c]``, ``output_tokens [c, K+1]``."""
    return (torch.empty(c, dtype=torch.int64, device=device),
            torch.empty(c, dtype=torch.int64, device=device),
            torch.empty(c, K + 1, dtype=torch.int64, device=device))


def verify_greedy(
    target_logits: torch.Tensor, draft_tokens: torch.Tensor, backend: str = "auto",
) -> VerifyResult:
    """Greedy verification, fused; same contract as :func:`peagle_lab.verify.verify_greedy`.

    Args:
        target_logits: ``# [c, K+1, V]`` target logits, any floating dtype.
        draft_tokens: ``# [c, K]`` int64 draft token ids.
        backend: ``"torch"`` (the reference), ``"triton"``, or ``"auto"``: compiled
            Triton for CUDA tensors, the reference for CPU tensors.

    Returns:
        A :class:`~peagle_lab.verify.VerifyResult`, equal to the reference's.

    Raises:
        ValueError: for bad shapes, dtypes or devices, an unknown backend, or
            ``backend="triton"`` where Triton cannot run.

    >>> logits = torch.nn.functional.one_hot(torch.tensor([[7, 3, 5], [7, 3, 5]]), 8).float()
    >>> verify_greedy(logits, torch.tensor([[7, 3], [7, 4]])).output_tokens
    tensor([[ 7,  3,  5],
            [ 7,  3, -1]])
    """
    c, k, v = check_greedy_inputs(target_logits, draft_tokens)
    if resolve(backend, target_logits.device) == "torch":
        return verify_greedy_ref(target_logits, draft_tokens)
    device = target_logits.device
    num_accepted, next_tokens, output_tokens = _empty_outputs(c, k, device)
    wide = target_logits.dtype == torch.float64
    block_v = min(triton.next_power_of_2(v), _MAX_BLOCK_V)
    s, chunk = argmax_chunks(c * (k + 1), v, block_v, programs_wanted(device))
    best_val = torch.empty(c, k + 1, s, dtype=torch.float64 if wide else torch.float32, device=device)
    best_idx = torch.empty(c, k + 1, s, dtype=torch.int64, device=device)
    _argmax_chunks_kernel[(c * (k + 1), s)](
        target_logits.contiguous(), best_val, best_idx, v, chunk,
        S=s, BLOCK_V=block_v, COMPUTE_DTYPE=tl.float64 if wide else tl.float32,
    )
    _accept_greedy_kernel[(c,)](
        best_val, best_idx, draft_tokens.contiguous(), num_accepted, next_tokens, output_tokens,
        k, S=s, BLOCK_K=triton.next_power_of_2(k + 1), BLOCK_S=triton.next_power_of_2(s),
    )
    return _finish(num_accepted, next_tokens, output_tokens, k)


def argmax_chunks(rows: int, v: int, block_v: int, programs: int) -> tuple[int, int]:
    """``(S, chunk)``: each of ``rows`` logits rows of ``v`` split into ``S`` chunks of ``chunk``
    logits (whole ``block_v`` blocks), so that ``rows · S`` is about ``programs``, at most
    ``MAX_ARGMAX_CHUNKS`` and no more chunks than blocks.

    >>> argmax_chunks(8, 49152, 1024, 132), argmax_chunks(512, 49152, 1024, 132), argmax_chunks(1, 100, 64, 132)
    ((16, 3072), (1, 49152), (2, 64))
    """
    blocks = -(-v // block_v)
    s = max(1, min(blocks, programs // max(rows, 1), MAX_ARGMAX_CHUNKS))
    per = -(-blocks // s)
    return -(-blocks // per), per * block_v


def verify_rejection(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    uniform: torch.Tensor,
    noise: torch.Tensor,
    backend: str = "auto",
) -> VerifyResult:
    """Rejection sampling, fused; same contract as :func:`peagle_lab.verify.verify_rejection`.

    Args:
        target_probs: ``# [c, K+1, V]`` target probabilities.
        draft_probs: ``# [c, K, V]`` the distributions the drafts were sampled from.
        draft_tokens: ``# [c, K]`` int64 draft token ids, each in ``[0, V)``.
        uniform: ``# [c, K]`` uniform draws in ``[0, 1)``.
        noise: ``# [c, V]`` positive Exp(1) draws.
        backend: ``"torch"``, ``"triton"`` or ``"auto"``, as in :func:`verify_greedy`.

    Returns:
        A :class:`~peagle_lab.verify.VerifyResult`, equal to the reference's for the same
        ``uniform`` and ``noise``.

    Raises:
        ValueError: for bad shapes, dtypes or devices, an unknown backend, or
            ``backend="triton"`` where Triton cannot run.

    >>> target = torch.tensor([[[0.2, 0.6, 0.2], [1.0, 0.0, 0.0]]])
    >>> draft = torch.tensor([[[0.8, 0.1, 0.1]]])
    >>> verify_rejection(target, draft, torch.tensor([[0]]), torch.tensor([[0.5]]),
    ...                  torch.tensor([[1.0, 1.0, 0.01]])).output_tokens
    tensor([[ 2, -1]])
    """
    c, k, v = check_rejection_inputs(target_probs, draft_probs, draft_tokens, uniform, noise)
    if resolve(backend, target_probs.device) == "torch":
        return verify_rejection_ref(target_probs, draft_probs, draft_tokens, uniform, noise)
    num_accepted, next_tokens, output_tokens = _empty_outputs(c, k, target_probs.device)
    _verify_rejection_kernel[(c,)](
        target_probs.contiguous(), draft_probs.contiguous(), draft_tokens.contiguous(),
        uniform.contiguous(), noise.contiguous(),
        num_accepted, next_tokens, output_tokens,
        k, v,
        BLOCK_V=min(triton.next_power_of_2(v), _MAX_BLOCK_V),
        BLOCK_K=triton.next_power_of_2(k + 1),
    )
    return _finish(num_accepted, next_tokens, output_tokens, k)
