"""The target's KV cache and the attention that reads it.

``KVCache`` is preallocated; every forward writes K/V through a flat ``slot_mapping`` in which ``-1``
means "write nothing", exactly like vLLM's. Request ``b`` owns the slots ``[b * max_len, (b + 1) *
max_len)`` and a key's index inside that block is its position, so a query at position ``p`` attends to
keys ``0..p`` of its own request (``attention_mask``). Keys written for rejected draft tokens sit at
positions that the next step overwrites before any query can see them, so the cache never has to be
"rolled back". ``attend`` is the one attention call of the target and the drafters: SDPA, flex attention
over a training block mask, or a decode-attention kernel for decode-shaped queries.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class KVCache:
    """Preallocated per-layer K/V for ``max_batch`` requests of ``max_len`` positions each.

    ``k[l]``/``v[l]`` are ``[max_batch * max_len + 1, n_kv, hd]``: the extra last row is a
    trash slot that ``slot_mapping == -1`` writes are redirected to, which keeps writes
    free of host synchronisation (and so CUDA-graph friendly).

    ``allocate`` makes them views of one tensor, ``kv`` ``[2 * layers, rows, n_kv, hd]``
    (``k[l]`` is ``kv[l]``, ``v[l]`` is ``kv[layers + l]``), so that copying blocks between caches
    (``peagle_lab.engine.copy_kv_blocks``) is one kernel for every layer, not one per tensor.
    """

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    max_batch: int
    max_len: int
    # attention of decode-shaped queries (T <= PREFILL_QUERIES) over this cache, called as
    # ``fn(q, k, v, mask, kv_len)`` (see :func:`attend`); None: SDPA. The engine sets it from
    # SpecConfig.decode_attention (the split-KV Triton kernel of peagle_lab.kernels.decode_attention).
    decode_attention: object = None
    kv: torch.Tensor | None = None  # the one tensor k and v are views of (allocate); None: separate tensors
    # arange over the storage's rows, made once (allocate) and shared by every view of this storage
    # (:meth:`view`): key_positions() is a prefix of it, so a CUDA graph captured through one view reads
    # memory that outlives that view
    positions: torch.Tensor | None = None

    @classmethod
    def allocate(cls, num_layers: int, max_batch: int, max_len: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device | str) -> "KVCache":
        if max_batch < 1 or max_len < 1:
            raise ValueError(f"max_batch={max_batch} and max_len={max_len} must be >= 1")
        kv = torch.zeros((2 * num_layers, max_batch * max_len + 1, num_kv_heads, head_dim), dtype=dtype,
                         device=device)
        # one select view per tensor (unbind's multi-output views may not be written in grad mode)
        cache = cls([kv[i] for i in range(num_layers)], [kv[num_layers + i] for i in range(num_layers)],
                    max_batch, max_len, kv=kv)
        cache.key_positions()  # made now, outside any CUDA graph capture
        return cache

    def view(self, rows: int, max_len: int) -> "KVCache":
        """This cache's storage laid out as ``rows`` blocks of ``max_len`` positions (a prefix of the rows).

        The view shares the storage and the key positions (``positions``) with this cache. A CUDA graph is
        captured through one view and replayed for later views of the same shape, so nothing the graph
        reads may belong to the view alone: a view that made its own ``arange`` freed it when the view
        was dropped, and the replayed graph then read whatever took that memory (an illegal memory access
        on a GPU).

        Raises:
            ValueError: ``rows`` or ``max_len`` below 1, or ``rows * max_len + 1`` rows that do not fit in
                this cache's storage.
        """
        if rows < 1 or max_len < 1:
            raise ValueError(f"a view needs at least 1 block of 1 position; got rows={rows}, max_len={max_len}")
        n = rows * max_len + 1  # the last row is the trash row
        if n > self.k[0].shape[0]:
            raise ValueError(f"a view of {rows} blocks of {max_len} positions needs {n} rows; the storage has "
                             f"{self.k[0].shape[0]}")
        kv = None if self.kv is None else self.kv[:, :n]
        return KVCache([t[:n] for t in self.k], [t[:n] for t in self.v], rows, max_len, self.decode_attention, kv,
                       self.storage_positions())

    @property
    def trash_slot(self) -> int:
        return self.max_batch * self.max_len

    def storage_positions(self) -> torch.Tensor:
        """``arange`` over every row of the storage, on its device, made at the first call (``allocate``)."""
        if self.positions is None:
            self.positions = torch.arange(self.k[0].shape[0], device=self.k[0].device)
        return self.positions

    def key_positions(self) -> torch.Tensor:
        """``arange(max_len)``: a key's position in its request's block (a prefix of :meth:`storage_positions`)."""
        return self.storage_positions()[: self.max_len]

    def slots(self, slot_mapping: torch.Tensor) -> torch.Tensor:
        """Flat slots with ``-1`` redirected to the trash row (computed once per forward)."""
        return flat_slots(slot_mapping, self.trash_slot)

    def write(self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write ``k``/``v`` [N, n_kv, hd] to flat slots [N]; ``-1`` slots write nothing."""
        self.write_slots(layer, self.slots(slot_mapping), k, v)

    def write_slots(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write ``k``/``v`` [N, n_kv, hd] to slots from :meth:`slots` (no ``-1`` left)."""
        write_kv(self.k[layer], self.v[layer], slots, k, v)

    def read(self, layer: int, c: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of requests ``0..c-1`` as ``[c, n_kv, max_len, hd]``."""
        return read_kv(self.k[layer], self.v[layer], c, self.max_len)


def flat_slots(slot_mapping: torch.Tensor, trash_slot: int) -> torch.Tensor:
    """``slot_mapping`` flattened, with ``-1`` (write nothing) sent to ``trash_slot`` (:meth:`KVCache.slots`)."""
    return torch.where(slot_mapping < 0, trash_slot, slot_mapping).reshape(-1)


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor) -> None:
    """One layer's cache write: ``k``/``v`` [N, n_kv, hd] into rows ``slots`` [N] (no ``-1``).

    The cache holds values, not autograd history: a forward run with grad enabled writes detached
    keys (the caches' tensors are views of one, which autograd may not write in place).
    """
    k_cache.index_copy_(0, slots, k.detach().to(k_cache.dtype))
    v_cache.index_copy_(0, slots, v.detach().to(v_cache.dtype))


def read_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, c: int, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's cache as ``[c, n_kv, max_len, hd]`` for requests ``0..c-1`` (views, no copy).

    Inside a compiled layer ``max_len`` comes from a tensor's size (the mask's), which dynamo
    keeps symbolic; a Python int field would be specialised, one compilation per cache size.
    """
    k = k_cache[:-1].view(-1, max_len, *k_cache.shape[1:])[:c]  # the trash row is the last one
    v = v_cache[:-1].view(-1, max_len, *v_cache.shape[1:])[:c]
    return k.transpose(1, 2), v.transpose(1, 2)


def attention_mask(positions: torch.Tensor, kv_positions: torch.Tensor, kv_valid: torch.Tensor | None = None,
                   window: int | None = None) -> torch.Tensor:
    """Boolean ``[c, 1, T, S]`` mask: a query at position p sees keys at positions <= p
    (and > p - ``window`` when a window is given)."""
    q, k = positions[:, None, :, None], kv_positions[:, None, None, :]
    m = k <= q
    if window is not None:
        m = m & (k > q - window)
    if kv_valid is not None:
        m = m & kv_valid[:, None, None, :]
    return m


# Query blocks longer than this (prefill, not a decode step of K + 1 <= 17 tokens) take the
# fused-kernel attention path on CUDA (see attend).
PREFILL_QUERIES = 17


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, decode=None,
           kv_len: torch.Tensor | None = None) -> torch.Tensor:
    """Grouped-query attention of ``q`` [c, nh, T, hd] over ``k``/``v`` [c, nkv, S, hd].

    ``mask`` is a boolean ``[c, 1, T, S]`` (True = may attend), a flex-attention
    ``BlockMask`` (training on a GPU: the block-sparse masks of ``peagle_lab.train.mask``,
    where whole blocks that no query may see are skipped), or None: query t sees keys 0..t of
    this call (S == T; a fresh prompt's prefill), one fused causal kernel with no mask to read.
    ``decode`` (a cache's ``decode_attention``) takes the decode-shaped calls, T <= PREFILL_QUERIES with a boolean mask,
    with ``kv_len`` [c] (keys at or past ``kv_len[b]`` are hidden; the kernel does not read them).
    """
    from torch.nn.attention.flex_attention import BlockMask

    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    if decode is not None and not isinstance(mask, BlockMask) and q.shape[2] <= PREFILL_QUERIES:
        return decode(q, k, v, mask, kv_len)
    if isinstance(mask, BlockMask):
        return _flex_attention(q.is_cuda)(q, k, v, block_mask=mask, enable_gqa=True)
    if q.is_cuda and q.shape[2] > PREFILL_QUERIES and k.shape[1] != q.shape[1]:
        # Long query blocks (prefill) with an explicit mask: with enable_gqa, SDPA on CUDA
        # falls back to its math path, which materialises every score (c·nh·T·S floats);
        # with the K/V heads repeated, the memory-efficient kernel takes the mask in O(T).
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


@functools.cache
def _flex_attention(cuda: bool):
    """flex_attention, compiled on CUDA (eager flex materialises every score: a reference only)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False) if cuda else flex_attention
