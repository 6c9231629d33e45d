"""Build the drafter's input batch from one verify (or prefill) step, in vLLM's padded layout.

After the target has processed a row of ``T`` tokens per request and the verifier has kept
``n`` of them, the drafter needs one flat batch of ``R = T + K - 1`` slots per request:

```
 request b: | token_ids[b,1..n] (shifted) | bonus          | MASK x (K-1)             | padding x (T-1-n) |
 positions: | positions[b,0..n-1]          | positions[b,n] | positions[b,n]+1 .. +K-1 | 0 ...             |
 hidden:    | target rows b*T+0 .. b*T+n-1 | b*T+n          | -1 (shared_hidden)       | -1 (zeros)        |
```

Context slot ``i`` (``0 <= i <= n``, the bonus slot is ``i = n``) pairs token ``x[p+1]`` with
the target's hidden state at position ``p = positions[b, i]``, as EAGLE shifts by one. The
``K - 1`` mask slots let P-EAGLE draft all ``K`` tokens in one pass; EAGLE-3's first pass is
``K = 1`` (no mask slots). Rejected tokens become padding at the end of the row, with
position 0 and no KV write, so every request keeps the same number of slots and no query
can attend to them.

``prepare_draft_inputs_ref`` is the spec; ``_prepare_draft_inputs_kernel`` computes the same
six outputs in one launch; ``prepare_draft_inputs`` picks between them.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from .backend import resolve, triton

if triton is not None:
    import triton.language as tl

_INDEX_DTYPES = (torch.int32, torch.int64)


@dataclass(frozen=True, eq=False)  # eq=False: comparing tensors with == has no single truth value
class DraftInputs:
    """The drafter's flat input batch, request-major: request ``b`` owns rows ``[b*R, (b+1)*R)``.

    Attributes:
        input_ids: ``[c*R]`` int64. Shifted target tokens, the bonus token, ``mask_token_id``
            in the mask slots, 0 in padding slots.
        positions: ``[c*R]`` int64. Position of each slot; 0 in padding slots.
        slot_mapping: ``[c*R]`` int64. Flat KV-cache slot ``b*max_len + position``; -1 (write
            nothing) for padding and for any position ``>= max_len``.
        is_masked: ``[c*R]`` bool. True for the ``K - 1`` mask slots of each request only.
        hidden_mapping: ``[c*R]`` int64. Flat target row ``b*T + i`` feeding context slot
            ``i``; -1 for mask and padding slots.
        sample_indices: ``[c*K]`` int64. Rows whose outputs predict the K draft tokens: the
            bonus slot and the mask slots, ``b*R + n_b + j`` for ``j`` in ``0..K-1``.
        rows_per_request: ``R = T + K - 1``.
        num_requests: ``c``.
    """

    input_ids: torch.Tensor  # [c*R]
    positions: torch.Tensor  # [c*R]
    slot_mapping: torch.Tensor  # [c*R]
    is_masked: torch.Tensor  # [c*R]
    hidden_mapping: torch.Tensor  # [c*R]
    sample_indices: torch.Tensor  # [c*K]
    rows_per_request: int
    num_requests: int


def _as_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool):  # bool is an int subclass, but True is never a meant count
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def _check_index_tensor(name: str, t: object, shape: tuple[int, ...], layout: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor {layout}, got {type(t).__name__}")
    if tuple(t.shape) != shape or t.dtype not in _INDEX_DTYPES:
        raise ValueError(
            f"{name} must be an int32 or int64 tensor {layout} = {list(shape)}, "
            f"got shape {list(t.shape)} and dtype {t.dtype}")


def _check_inputs(token_ids, positions, num_accepted, bonus_tokens, num_speculative_tokens,
                  mask_token_id, max_len) -> tuple[int, int, int, int, int, int]:
    """Validate shapes, dtypes and scalars; return ``(c, T, K, R, mask_token_id, max_len)``."""
    if not isinstance(token_ids, torch.Tensor) or token_ids.dim() != 2:
        got = list(token_ids.shape) if isinstance(token_ids, torch.Tensor) else type(token_ids).__name__
        raise ValueError(f"token_ids must be a 2-D tensor [c, T], got {got}")
    c, T = token_ids.shape
    if T < 1:
        raise ValueError(f"token_ids must hold at least one token per request (T >= 1), got T={T}")
    _check_index_tensor("token_ids", token_ids, (c, T), "[c, T]")
    _check_index_tensor("positions", positions, (c, T), "[c, T]")
    _check_index_tensor("num_accepted", num_accepted, (c,), "[c]")
    _check_index_tensor("bonus_tokens", bonus_tokens, (c,), "[c]")
    devices = {t.device for t in (token_ids, positions, num_accepted, bonus_tokens)}
    if len(devices) != 1:
        raise ValueError(f"all input tensors must be on one device, got {sorted(map(str, devices))}")
    K = _as_int("num_speculative_tokens", num_speculative_tokens, 1)
    mask_token_id = _as_int("mask_token_id", mask_token_id, 0)
    max_len = _as_int("max_len", max_len, 1)
    return c, T, K, T + K - 1, mask_token_id, max_len


def prepare_draft_inputs_ref(
    token_ids: torch.Tensor,
    positions: torch.Tensor,
    num_accepted: torch.Tensor,
    bonus_tokens: torch.Tensor,
    *,
    num_speculative_tokens: int,
    mask_token_id: int,
    max_len: int,
) -> DraftInputs:
    """Build the padded drafter batch with plain PyTorch ops (the spec of the Triton kernel).

    Vectorised over requests and slots: no Python loop over requests, no host sync, so it
    runs unchanged inside a CUDA graph. On a GPU it launches about 40 small kernels, each
    reading and writing ``[c, R]`` tensors (``scripts/bench/bench_kernels.py`` counts them), which
    is why the fused kernel exists.

    Args:
        token_ids: ``[c, T]`` int32/int64. The row the target just processed per request
            (decode: previous bonus token then the K drafts, ``T = K + 1``; prefill: the
            padded prompt).
        positions: ``[c, T]`` int32/int64. Their positions, consecutive within a row, >= 0.
        num_accepted: ``[c]`` int32/int64. ``n_b``, tokens after the first that are kept.
            Must lie in ``[0, T-1]``; this is a device-side property and is not checked,
            because checking it would synchronise the host (out of range: unspecified
            output, or an index error from ``gather``).
        bonus_tokens: ``[c]`` int32/int64. The token the target produced after the kept ones.
        num_speculative_tokens: ``K >= 1``, draft tokens per step.
        mask_token_id: id placed in the ``K - 1`` mask slots.
        max_len: KV-cache slots per request; request ``b`` owns ``[b*max_len, (b+1)*max_len)``.

    Returns:
        DraftInputs with ``R = T + K - 1`` rows per request.

    Raises:
        ValueError: on a wrong shape, dtype, device mix, or scalar out of range.

    Example (K=3, T=4, mask id 99; request 0 keeps 2 drafts, request 1 keeps all 3; notebook 2 and
    docs/concepts.md draw this batch):

    >>> d = prepare_draft_inputs_ref(
    ...     torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]]),
    ...     torch.tensor([[5, 6, 7, 8], [10, 11, 12, 13]]),
    ...     torch.tensor([2, 3]), torch.tensor([100, 200]),
    ...     num_speculative_tokens=3, mask_token_id=99, max_len=14)
    >>> d.input_ids.view(2, -1)  # 13 was rejected: it becomes padding at the end
    tensor([[ 11,  12, 100,  99,  99,   0],
            [ 21,  22,  23, 200,  99,  99]])
    >>> d.positions.view(2, -1)
    tensor([[ 5,  6,  7,  8,  9,  0],
            [10, 11, 12, 13, 14, 15]])
    >>> d.slot_mapping.view(2, -1)  # position 14 and 15 >= max_len: no KV write
    tensor([[ 5,  6,  7,  8,  9, -1],
            [24, 25, 26, 27, -1, -1]])
    >>> d.hidden_mapping.view(2, -1)
    tensor([[ 0,  1,  2, -1, -1, -1],
            [ 4,  5,  6,  7, -1, -1]])
    >>> d.sample_indices.view(2, -1)  # the bonus slot and the two mask slots
    tensor([[ 2,  3,  4],
            [ 9, 10, 11]])
    """
    c, T, K, R, mask_token_id, max_len = _check_inputs(
        token_ids, positions, num_accepted, bonus_tokens, num_speculative_tokens,
        mask_token_id, max_len)
    device = token_ids.device
    # Byte counts below are per op on a GPU, with N = c*R int64 elements (8N bytes).
    i = torch.arange(R, device=device)  # [R] slot index inside a request's row
    b = torch.arange(c, device=device)[:, None]  # [c, 1]
    n = num_accepted.to(torch.int64)[:, None]  # [c, 1]

    is_context = i <= n  # [c, R] shifted tokens and the bonus slot; reads 8c, writes N
    is_bonus = i == n  # [c, R]
    is_masked = (i > n) & (i < n + K)  # [c, R]
    is_live = i < n + K  # [c, R] everything but padding

    # Slot i < n carries x[i+1]. The clamp only keeps the gather in bounds on slots that
    # discard its value (bonus, mask, padding), so the layout needs no ragged indexing.
    shifted = token_ids.to(torch.int64).gather(
        1, (i + 1).clamp(max=T - 1).expand(c, R))  # [c, R] reads ~8N, writes 8N
    input_ids = torch.where(is_bonus, bonus_tokens.to(torch.int64)[:, None], shifted)  # reads 9N, writes 8N
    input_ids = torch.where(is_masked, mask_token_id, input_ids)  # reads 9N, writes 8N
    input_ids = torch.where(is_live, input_ids, 0)  # reads 9N, writes 8N

    pos = positions.to(torch.int64)
    context_pos = pos.gather(1, i.clamp(max=T - 1).expand(c, R))  # [c, R] reads ~8N, writes 8N
    bonus_pos = pos.gather(1, n)  # [c, 1] positions[b, n]
    out_pos = torch.where(is_context, context_pos, bonus_pos + (i - n))  # mask slots count on
    out_pos = torch.where(is_live, out_pos, 0)  # [c, R] reads 9N, writes 8N

    # The KV cache of request b ends at b*max_len + max_len - 1; past it, write nothing.
    slot_mapping = torch.where(is_live & (out_pos < max_len), b * max_len + out_pos, -1)
    hidden_mapping = torch.where(is_context, b * T + i, -1)  # [c, R] reads N, writes 8N
    sample_indices = b * R + n + torch.arange(K, device=device)  # [c, K] writes 8cK

    return DraftInputs(
        input_ids=input_ids.reshape(-1),
        positions=out_pos.reshape(-1),
        slot_mapping=slot_mapping.reshape(-1),
        is_masked=is_masked.reshape(-1),
        hidden_mapping=hidden_mapping.reshape(-1),
        sample_indices=sample_indices.reshape(-1),
        rows_per_request=R,
        num_requests=c,
    )


if triton is not None:

    @triton.jit
    def _prepare_draft_inputs_kernel(
        # inputs
        token_ids_ptr,  # [c, T] int32|int64
        positions_ptr,  # [c, T] int32|int64
        num_accepted_ptr,  # [c] int32|int64
        bonus_tokens_ptr,  # [c] int32|int64
        # outputs
        input_ids_ptr,  # [c*R] int64
        out_positions_ptr,  # [c*R] int64
        slot_mapping_ptr,  # [c*R] int64
        is_masked_ptr,  # [c*R] bool
        hidden_mapping_ptr,  # [c*R] int64
        sample_indices_ptr,  # [c*K] int64
        # metadata
        stride_tok_b, stride_tok_t,  # token_ids strides
        stride_pos_b, stride_pos_t,  # positions strides
        stride_acc, stride_bonus,  # num_accepted, bonus_tokens strides
        T, R, K,  # row lengths: target row, drafter row, drafts
        mask_token_id, max_len,
        BLOCK_R: tl.constexpr,  # power of two >= R
        BLOCK_K: tl.constexpr,  # power of two >= K
    ):
        # One program writes one request's R slots and K sample rows.
        #
        #   slot i:   0 .. n-1       n        n+1 .. n+K-1     n+K .. R-1
        #            +-------------+-------+----------------+--------------+
        #   ids      | x[i+1]      | bonus | MASK           | 0            |
        #   pos      | pos[i]      | pos[n]| pos[n] + (i-n) | 0            |
        #   hidden   | b*T + i     | b*T+n | -1             | -1           |
        #            +-------------+-------+----------------+--------------+
        #   flat row b*R + i;   sample rows b*R + n .. b*R + n+K-1
        b = tl.program_id(0).to(tl.int64)  # int64: b*max_len can pass 2**31
        i = tl.arange(0, BLOCK_R).to(tl.int64)
        in_row = i < R

        n = tl.load(num_accepted_ptr + b * stride_acc).to(tl.int64)
        bonus = tl.load(bonus_tokens_ptr + b * stride_bonus).to(tl.int64)
        # n outside [0, T-1] is a caller bug we cannot see without a host sync; the load
        # masks keep every read in bounds even then.
        pos_n = tl.load(positions_ptr + b * stride_pos_b + n * stride_pos_t,
                        mask=(n >= 0) & (n < T), other=0).to(tl.int64)

        is_context = i <= n
        is_masked = (i > n) & (i < n + K)
        is_live = i < n + K

        # Padding slots keep the masked-load default 0, so they need no select of their own.
        ids = tl.load(token_ids_ptr + b * stride_tok_b + (i + 1) * stride_tok_t,
                      mask=(i < n) & (i + 1 < T), other=0).to(tl.int64)
        ids = tl.where(i == n, bonus, ids)
        ids = tl.where(is_masked, mask_token_id, ids)

        pos = tl.load(positions_ptr + b * stride_pos_b + i * stride_pos_t,
                      mask=is_context & (i < T), other=0).to(tl.int64)
        pos = tl.where(is_masked, pos_n + (i - n), pos)

        slot = tl.where(is_live & (pos < max_len), b * max_len + pos, -1)
        hidden = tl.where(is_context, b * T + i, -1)

        row = b * R + i
        tl.store(input_ids_ptr + row, ids, mask=in_row)
        tl.store(out_positions_ptr + row, pos, mask=in_row)
        tl.store(slot_mapping_ptr + row, slot, mask=in_row)
        tl.store(is_masked_ptr + row, is_masked, mask=in_row)
        tl.store(hidden_mapping_ptr + row, hidden, mask=in_row)

        j = tl.arange(0, BLOCK_K).to(tl.int64)
        tl.store(sample_indices_ptr + b * K + j, b * R + n + j, mask=j < K)


def prepare_draft_inputs(
    token_ids: torch.Tensor,
    positions: torch.Tensor,
    num_accepted: torch.Tensor,
    bonus_tokens: torch.Tensor,
    *,
    num_speculative_tokens: int,
    mask_token_id: int,
    max_len: int,
    backend: str = "auto",
) -> DraftInputs:
    """Build the padded drafter batch; one Triton launch, or the PyTorch reference.

    Args:
        token_ids, positions, num_accepted, bonus_tokens: as in :func:`prepare_draft_inputs_ref`.
        num_speculative_tokens, mask_token_id, max_len: as in :func:`prepare_draft_inputs_ref`.
        backend: "triton", "torch", or "auto" (compiled Triton for CUDA tensors, the
            reference for CPU tensors; see :mod:`peagle_lab.kernels.backend`).

    Returns:
        DraftInputs, bit-identical between backends. Never synchronises the host.

    Raises:
        ValueError: as :func:`prepare_draft_inputs_ref`; also for an unknown backend, or
            "triton" without CUDA tensors or the interpreter.

    >>> d = prepare_draft_inputs(
    ...     torch.tensor([[10, 11, 12, 13]]), torch.tensor([[5, 6, 7, 8]]),
    ...     torch.tensor([3]), torch.tensor([100]),
    ...     num_speculative_tokens=1, mask_token_id=99, max_len=64)
    >>> d.input_ids, d.sample_indices  # K=1 is EAGLE-3's first pass: no mask slots
    (tensor([ 11,  12,  13, 100]), tensor([3]))
    """
    c, T, K, R, mask_token_id, max_len = _check_inputs(
        token_ids, positions, num_accepted, bonus_tokens, num_speculative_tokens,
        mask_token_id, max_len)
    device = token_ids.device
    if resolve(backend, device) == "torch":
        return prepare_draft_inputs_ref(
            token_ids, positions, num_accepted, bonus_tokens,
            num_speculative_tokens=K, mask_token_id=mask_token_id, max_len=max_len)

    def new(dtype=torch.int64, numel=c * R):
        return torch.empty(numel, dtype=dtype, device=device)

    out = DraftInputs(
        input_ids=new(), positions=new(), slot_mapping=new(),
        is_masked=new(torch.bool), hidden_mapping=new(), sample_indices=new(numel=c * K),
        rows_per_request=R, num_requests=c)
    if c == 0:  # an empty grid is not a valid launch
        return out
    _prepare_draft_inputs_kernel[(c,)](
        token_ids, positions, num_accepted, bonus_tokens,
        out.input_ids, out.positions, out.slot_mapping, out.is_masked, out.hidden_mapping,
        out.sample_indices,
        token_ids.stride(0), token_ids.stride(1), positions.stride(0), positions.stride(1),
        num_accepted.stride(0), bonus_tokens.stride(0),
        T, R, K, mask_token_id, max_len,
        BLOCK_R=triton.next_power_of_2(R), BLOCK_K=triton.next_power_of_2(K),
    )
    return out
