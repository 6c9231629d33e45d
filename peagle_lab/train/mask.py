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
