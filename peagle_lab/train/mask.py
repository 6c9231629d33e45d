"""Who may attend to whom while training a drafter: the chain-visibility rule.

Training elements are ``(anchor, depth)`` pairs. The depth-0 element of anchor ``a`` is the
drafter's ordinary context slot (token ``x[a+1]`` with the target's taps ``h[a]``); the
depth-``d`` element of the same anchor is the ``d``-th draft of the chain that starts
there. At inference the drafter's KV cache holds the context slots of every earlier
position and, above them, the slots of the chain being drafted, so a training query must
see exactly that:

    query (a, d) sees key (a', d')  ⇔  (d' == 0 and a' ≤ a)  or  (a' == a and d' ≤ d)

Example with 4 anchors and depths 0–1 (keys in the same order as the rows)::

                 keys: a0d0 a1d0 a2d0 a3d0 a0d1 a1d1 a2d1 a3d1
    query a0d0          1    .    .    .    .    .    .    .
    query a2d0          1    1    1    .    .    .    .    .
    query a2d1          1    1    1    .    .    .    1    .

The same rule serves EAGLE-3's training-time test (step ``j`` of the unroll is depth ``j``,
its keys are the earlier steps' cached keys) and P-EAGLE's single parallel pass.
"""
from __future__ import annotations

import torch


def chain_visible(anchor_q: torch.Tensor, depth_q: torch.Tensor, anchor_k: torch.Tensor,
                  depth_k: torch.Tensor) -> torch.Tensor:
    """The chain-visibility rule for every (query, key) pair.

    Args:
        anchor_q / depth_q: the queries' anchors and depths.  # [..., Q]
        anchor_k / depth_k: the keys' anchors and depths.  # [..., S]

    Returns:
        Boolean ``[..., Q, S]``: True where the query may attend to the key.

    >>> a = torch.tensor([0, 1, 2, 1]); d = torch.tensor([0, 0, 0, 1])
    >>> chain_visible(a, d, a, d).int()
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [1, 1, 1, 0],
            [1, 1, 0, 1]], dtype=torch.int32)

    The last row is the depth-1 draft of anchor 1: it sees the context up to anchor 1 and
    itself, but not anchor 2's context slot, which lies in its future.
    """
    aq, dq = anchor_q[..., :, None], depth_q[..., :, None]
    ak, dk = anchor_k[..., None, :], depth_k[..., None, :]
    return ((dk == 0) & (ak <= aq)) | ((ak == aq) & (dk <= dq))


def chain_mask(anchor_q: torch.Tensor, depth_q: torch.Tensor, anchor_k: torch.Tensor, depth_k: torch.Tensor,
               valid_k: torch.Tensor) -> torch.Tensor:
    """The attention mask ``[B, 1, Q, S]`` for a padded batch of training elements.

    Padding keys (``valid_k`` False) are hidden from every query. A query that would see
    no key at all (only padding queries can) is allowed to see every key instead: a row
    of the softmax over nothing is NaN, and NaN times a zero gradient is still NaN.

    Args:
        anchor_q / depth_q: per-row query anchors and depths.  # [B, Q]
        anchor_k / depth_k / valid_k: per-row key anchors, depths and validity.  # [B, S]

    Returns:
        Boolean mask ``[B, 1, Q, S]`` (True = may attend), as ``Drafter.forward`` takes it.
    """
    m = chain_visible(anchor_q, depth_q, anchor_k, depth_k) & valid_k[:, None, :]
    m = m | ~m.any(-1, keepdim=True)
    return m[:, None]


# ------------------------------------------------------------------ packed rows
# The same rule for fixed-shape packed rows (``pack.py``), written as flex-attention
# ``mask_mod`` functions: ``mod(b, h, q, kv) -> bool`` for one (query, key) pair. On a GPU
# they become block-sparse masks (``create_block_mask``: blocks nobody can see are skipped,
# so a deep query pays for the keys it sees, not for the whole row); on a CPU, where flex
# attention has no backward, the same functions are materialised as dense boolean masks.
# The tensors they close over are read when the mask is built, so a trainer keeps one set
# of buffers (and one function each) and refreshes the buffers in place every step.

def doc_causal_mod(doc: torch.Tensor):
    """Causal attention inside each sequence of a packed row (the target's, EAGLE-3's step 0).

    Args:
        doc: sequence index of every token, -1 on padding.  # [B, T]
    """
    def mod(b, h, q, kv):
        return (kv <= q) & (doc[b, q] == doc[b, kv])
    return mod


def chain_mod(anchor: torch.Tensor, depth: torch.Tensor, doc: torch.Tensor):
    """The chain rule for P-EAGLE elements of packed rows (one pass, all depths).

    Args:
        anchor / depth: each element's anchor token index and depth.  # [B, M]
        doc: the sequence of each element's anchor.  # [B, M]
    """
    def mod(b, h, q, kv):
        aq, ak = anchor[b, q], anchor[b, kv]
        context = (depth[b, kv] == 0) & (ak <= aq) & (doc[b, kv] == doc[b, q])
        own_chain = (ak == aq) & (depth[b, kv] <= depth[b, q])
        return context | own_chain
    return mod


def ttt_mod(doc: torch.Tensor):
    """The chain rule for EAGLE-3's training-time test on packed rows of ``T`` tokens.

    Queries are one unroll step's ``T`` anchors; keys are every step so far, step-major
    (key ``s·T + a`` is step ``s`` of anchor ``a``, as ``eagle3.ChainKV`` stacks them). Step 0
    keys are the context (causal inside the sequence); a later step's key is visible only to
    its own anchor. The function serves every step: step ``j`` uses the first ``(j+1)·T`` keys.

    Args:
        doc: sequence index of every token, -1 on padding.  # [B, T]
    """
    T = doc.shape[1]

    def mod(b, h, q, kv):
        a = kv % T
        context = (kv < T) & (a <= q) & (doc[b, a] == doc[b, q])
        return context | ((kv >= T) & (a == q))
    return mod


def build_mask(mod, batch: int, q_len: int, kv_len: int, device: torch.device | str, block: bool):
    """``mod`` as a flex ``BlockMask`` (``block``, GPU training) or a dense ``[B, 1, Q, KV]`` bool."""
    from torch.nn.attention.flex_attention import create_block_mask, create_mask

    if block:
        return create_block_mask(mod, batch, None, q_len, kv_len, device=device,
                                 _compile=torch.device(device).type == "cuda")
    return create_mask(mod, batch, 1, q_len, kv_len, device=device)


def ttt_masks(doc: torch.Tensor, mod, steps: int, device: torch.device | str, block: bool) -> tuple:
    """One mask per TTT step: step ``j`` sees the first ``(j+1)·T`` keys of ``ttt_mod``.

    Dense masks are slices of the last one. Block masks are built per step: cutting a
    ``BlockMask`` to fewer keys (``BlockMask._adjust``) keeps the first entries of each row's
    block list, which here would include later steps' diagonal blocks.
    """
    B, T = doc.shape
    if not block:
        full = build_mask(mod, B, T, steps * T, device, False)
        return tuple(full[..., : (j + 1) * T] for j in range(steps))
    return tuple(build_mask(mod, B, T, (j + 1) * T, device, True) for j in range(steps))
