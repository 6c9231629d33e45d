"""Place the drafter's hidden-state inputs into the padded batch built by prepare_draft_inputs.

The target's taps, already fused by the drafter's ``fc`` to width H, come one row per target
token (``[c*T, H]``). The drafter batch wants one row per slot (``[c*R, H]``):

```
 slot kind:  context / bonus          mask                        padding
 out[r]   =  hidden[hidden_mapping[r]] shared_hidden (fc(mask_hidden)) zeros
```

P-EAGLE's mask slots all share one learned vector ``shared_hidden``; padding rows get zeros
so nothing stale leaks into them (they are never attended to nor sampled). Every value is a
copy, so the output is bit-identical to its source in any float dtype.

``fill_draft_hidden_ref`` is the spec; ``_fill_draft_hidden_kernel`` does it in one launch;
``fill_draft_hidden`` picks between them.
"""
from __future__ import annotations

import torch

from .backend import resolve, triton

if triton is not None:
    import triton.language as tl

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_inputs(hidden, hidden_mapping, is_masked, shared_hidden) -> tuple[int, int]:
    """Validate shapes, dtypes and devices; return ``(N, H)`` (N = c*R output rows)."""
    tensors = {"hidden": hidden, "hidden_mapping": hidden_mapping, "is_masked": is_masked,
               "shared_hidden": shared_hidden}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if hidden.dim() != 2 or hidden.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"hidden must be a 2-D float tensor [c*T, H] (float16, bfloat16, float32 "
                         f"or float64), got shape {list(hidden.shape)} and dtype {hidden.dtype}")
    H = hidden.shape[1]
    if hidden_mapping.dim() != 1 or hidden_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"hidden_mapping must be a 1-D int32 or int64 tensor [c*R], got shape "
                         f"{list(hidden_mapping.shape)} and dtype {hidden_mapping.dtype}")
    N = hidden_mapping.shape[0]
    if tuple(is_masked.shape) != (N,) or is_masked.dtype != torch.bool:
        raise ValueError(f"is_masked must be a bool tensor [c*R] = [{N}] like hidden_mapping, got "
                         f"shape {list(is_masked.shape)} and dtype {is_masked.dtype}")
    if tuple(shared_hidden.shape) != (H,) or shared_hidden.dtype != hidden.dtype:
        raise ValueError(f"shared_hidden must be [H] = [{H}] with hidden's dtype {hidden.dtype}, "
                         f"got shape {list(shared_hidden.shape)} and dtype {shared_hidden.dtype}")
    devices = {t.device for t in tensors.values()}
    if len(devices) != 1:
        raise ValueError(f"all input tensors must be on one device, got {sorted(map(str, devices))}")
    return N, H


def fill_draft_hidden_ref(
    hidden: torch.Tensor,
    hidden_mapping: torch.Tensor,
    is_masked: torch.Tensor,
    shared_hidden: torch.Tensor,
) -> torch.Tensor:
    """Gather context rows, broadcast ``shared_hidden`` into mask rows, zero the rest (PyTorch).

    Args:
        hidden: ``[c*T, H]`` float. Target taps after the drafter's ``fc``, one row per
            target token.
        hidden_mapping: ``[c*R]`` int32/int64. Source row in ``hidden`` per slot, -1 for
            none. Entries must lie in ``[-1, c*T - 1]``; a device-side property, not checked
            (that would synchronise the host).
        is_masked: ``[c*R]`` bool. Slots that take ``shared_hidden``; a row with
            ``hidden_mapping >= 0`` takes its gathered row even when masked.
        shared_hidden: ``[H]``, hidden's dtype. ``fc(mask_hidden)``.

    Returns:
        ``[c*R, H]`` in hidden's dtype, every element an exact copy (or zero).

    Raises:
        ValueError: on a wrong shape, dtype or device mix.

    One request, T=3, K=2, one accepted draft: context, bonus, mask, padding.

    >>> hidden = torch.arange(6.0).view(3, 2)
    >>> fill_draft_hidden_ref(hidden, torch.tensor([0, 1, -1, -1]),
    ...                       torch.tensor([False, False, True, False]), torch.tensor([-1.0, -1.0]))
    tensor([[ 0.,  1.],
            [ 2.,  3.],
            [-1., -1.],
            [ 0.,  0.]])
    """
    N, H = _check_inputs(hidden, hidden_mapping, is_masked, shared_hidden)
    # N rows of H elements of e bytes each; two passes over [N, H] besides the gather.
    src = hidden_mapping.clamp(min=0)  # [N] -1 would wrap around to the last row; reads/writes 8N
    gathered = hidden.index_select(0, src)  # [N, H] reads 8N + NHe, writes NHe
    fill = torch.where(is_masked[:, None], shared_hidden, 0)  # [N, H] reads N + He, writes NHe
    return torch.where(hidden_mapping[:, None] >= 0, gathered, fill)  # reads 2NHe + 8N, writes NHe


if triton is not None:

    @triton.jit
    def _fill_draft_hidden_kernel(
        # inputs
        hidden_ptr,  # [c*T, H] float
        hidden_mapping_ptr,  # [N] int32|int64, N = c*R
        is_masked_ptr,  # [N] bool
        shared_hidden_ptr,  # [H] float
        # outputs
        out_ptr,  # [N, H] float, hidden's dtype
        # metadata
        N, H,
        stride_hidden_row, stride_hidden_col,
        stride_mapping, stride_masked, stride_shared,
        stride_out_row, stride_out_col,
        BLOCK_ROWS: tl.constexpr,  # output rows per program
        BLOCK_H: tl.constexpr,  # columns per program (a power of two)
    ):
        # Program (p, q) writes one tile of the output:
        #
        #            cols q*BLOCK_H .. q*BLOCK_H + BLOCK_H - 1
        #          +------------------------------------------+
        #  row r   | hidden[hidden_mapping[r], cols]  (>= 0)  |   context / bonus
        #  row r+1 | shared_hidden[cols]              (mask)  |
        #  row r+2 | 0                                        |   padding
        #          +------------------------------------------+
        #  rows p*BLOCK_ROWS .. p*BLOCK_ROWS + BLOCK_ROWS - 1
        rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        row_ok = rows < N
        col_ok = cols < H

        src = tl.load(hidden_mapping_ptr + rows * stride_mapping, mask=row_ok, other=-1).to(tl.int64)
        masked = tl.load(is_masked_ptr + rows * stride_masked, mask=row_ok, other=0) != 0
        shared = tl.load(shared_hidden_ptr + cols * stride_shared, mask=col_ok, other=0)

        # Rows with no source read nothing and come back as 0 from the masked load, so
        # padding needs no select; mask rows then swap in the shared vector.
        has_src = src >= 0
        values = tl.load(
            hidden_ptr + src[:, None] * stride_hidden_row + cols[None, :] * stride_hidden_col,
            mask=has_src[:, None] & col_ok[None, :], other=0)
        values = tl.where((masked & ~has_src)[:, None], shared[None, :], values)

        tl.store(out_ptr + rows[:, None] * stride_out_row + cols[None, :] * stride_out_col,
                 values, mask=row_ok[:, None] & col_ok[None, :])


def fill_draft_hidden(
    hidden: torch.Tensor,
    hidden_mapping: torch.Tensor,
    is_masked: torch.Tensor,
    shared_hidden: torch.Tensor,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """Build the drafter's ``[c*R, H]`` hidden input; one Triton launch, or the reference.

    Args:
        hidden, hidden_mapping, is_masked, shared_hidden: as in :func:`fill_draft_hidden_ref`.
        backend: "triton", "torch", or "auto" (compiled Triton for CUDA tensors, the
            reference for CPU tensors; see :mod:`peagle_lab.kernels.backend`).

    Returns:
        ``[c*R, H]`` in hidden's dtype, bit-identical between backends.

    Raises:
        ValueError: as :func:`fill_draft_hidden_ref`; also for an unknown backend, or
            "triton" without CUDA tensors or the interpreter.

    >>> out = fill_draft_hidden(torch.ones(2, 3, dtype=torch.bfloat16), torch.tensor([1, -1]),
    ...                         torch.tensor([False, True]), torch.full((3,), 7, dtype=torch.bfloat16))
    >>> out
    tensor([[1., 1., 1.],
            [7., 7., 7.]], dtype=torch.bfloat16)
    """
    N, H = _check_inputs(hidden, hidden_mapping, is_masked, shared_hidden)
    if resolve(backend, hidden.device) == "torch":
        return fill_draft_hidden_ref(hidden, hidden_mapping, is_masked, shared_hidden)

    out = torch.empty(N, H, dtype=hidden.dtype, device=hidden.device)
    if N == 0 or H == 0:  # an empty grid is not a valid launch
        return out
    # Whole rows of a 576-wide model in one tile; about 4K elements per program either way.
    block_h = min(triton.next_power_of_2(H), 1024)
    block_rows = max(1, 4096 // block_h)
    grid = (triton.cdiv(N, block_rows), triton.cdiv(H, block_h))
    _fill_draft_hidden_kernel[grid](
        hidden, hidden_mapping, is_masked, shared_hidden,
        out,
        N, H,
        hidden.stride(0), hidden.stride(1),
        hidden_mapping.stride(0), is_masked.stride(0), shared_hidden.stride(0),
        out.stride(0), out.stride(1),
        BLOCK_ROWS=block_rows, BLOCK_H=block_h,
    )
    return out
