"""Fused verify kernels: Triton programs decide each request's accepted drafts.

The spec is :mod:`peagle_lab.verify` (re-exported here as ``verify_greedy_ref`` and
``verify_rejection_ref``). Reading it first is the point: the kernels below make the
same decisions with the same arithmetic, so the two agree bit for bit.

Why fuse? The reference launches a dozen small ops over ``[c, K+1, V]``. Greedy
verification runs in two launches: one program per logits row finds its argmax (c·(K+1)
programs, so the GPU is busy at every c; a program per request walking its rows in turn
starved the GPU at large c), then one program per request finds the first slot whose draft
the target rejects. Rejection sampling is one program per request, which walks its slots
in order, stops at the first rejection and makes one pass over one row of ``V``.

Exactness rules shared with the reference:

- argmax ties go to the lowest id (``torch.argmax`` returns the first maximum; the kernel
  takes ``tie_break_left`` inside a block and keeps an earlier block on equal values);
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

if triton is not None:
    import triton.language as tl

__all__ = ["verify_greedy", "verify_rejection", "verify_greedy_ref", "verify_rejection_ref"]

_MAX_BLOCK_V = 1024  # vocabulary lanes per loop step; 49152 (SmolLM2) takes 48 steps


if triton is not None:

    @triton.jit
    def _row_argmax(row_ptr, V, BLOCK_V: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
        """Index of the first maximum of ``row_ptr[0:V]``, as int64."""
        best_val = tl.full([], float("-inf"), COMPUTE_DTYPE)
        best_idx = tl.zeros([], tl.int64)
        # A while loop, not range(0, V, BLOCK_V): Triton 3.6's interpreter cannot turn a
        # runtime scalar argument into a range bound under NumPy 2.4.
        start = tl.zeros([], tl.int64)
        while start < V:
            offs = start + tl.arange(0, BLOCK_V)
            x = tl.load(row_ptr + offs, mask=offs < V, other=float("-inf")).to(COMPUTE_DTYPE)
            blk_val, blk_idx = tl.max(x, axis=0, return_indices=True,
                                      return_indices_tie_break_left=True)
            # Strictly greater: on equal values the earlier block (lower id) keeps the win.
            better = blk_val > best_val
            best_idx = tl.where(better, start + blk_idx, best_idx)
            best_val = tl.where(better, blk_val, best_val)
            start += BLOCK_V
        return best_idx

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
    def _argmax_rows_kernel(
        logits_ptr,   # [rows, V] any float dtype (rows = c * (K+1))
        argmax_ptr,   # [rows] int64, output
        V,
        BLOCK_V: tl.constexpr,
        COMPUTE_DTYPE: tl.constexpr,
    ):
        """Stage 1 of greedy verification: one program per logits row, its first maximum."""
        row = tl.program_id(0).to(tl.int64)
        tl.store(argmax_ptr + row, _row_argmax(logits_ptr + row * V, V, BLOCK_V, COMPUTE_DTYPE))

    @triton.jit
    def _accept_greedy_kernel(
        argmax_ptr,          # [c, K+1] int64, the target's token at every slot (stage 1)
        draft_tokens_ptr,    # [c, K] int32/int64
        num_accepted_ptr,    # [c] int64
        next_tokens_ptr,     # [c] int64
        output_tokens_ptr,   # [c, K+1] int64
        K,
        BLOCK_K: tl.constexpr,  # next power of two >= K+1
    ):
        """Stage 2: one program per request; n = the first slot whose draft the target rejects.

            slot:     0    1    2    3 (= K)
            draft:    d0   d1   d2   (none)
            target:   t0   t1   t2   t3        n = first slot with d != t, or K
        """
        req = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_K)
        target = tl.load(argmax_ptr + req * (K + 1) + cols, mask=cols < K + 1, other=-1)
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
    num_accepted, next_tokens, output_tokens = _empty_outputs(c, k, target_logits.device)
    compute = tl.float64 if target_logits.dtype == torch.float64 else tl.float32
    argmax = torch.empty(c, k + 1, dtype=torch.int64, device=target_logits.device)
    _argmax_rows_kernel[(c * (k + 1),)](
        target_logits.contiguous(), argmax, v,
        BLOCK_V=min(triton.next_power_of_2(v), _MAX_BLOCK_V), COMPUTE_DTYPE=compute,
    )
    _accept_greedy_kernel[(c,)](
        argmax, draft_tokens.contiguous(), num_accepted, next_tokens, output_tokens,
        k, BLOCK_K=triton.next_power_of_2(k + 1),
    )
    return _finish(num_accepted, next_tokens, output_tokens, k)


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
