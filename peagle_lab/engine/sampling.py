"""Sampling without generator state: Gumbel-max picks whose noise is a hash of (seed, key, position).

``argmax(logits / T + Gumbel noise)`` samples ``softmax(logits / T)``. The noise here is a pure
function of the sampling seed, the request's key (its prompt index), the position and the token id
(``sampling_uniforms``), so a sampled decode step holds no generator state: it replays in the same
CUDA graph as a greedy one, and a request's sample does not depend on which rows ran beside it.
Bulk plain decoding on the device (:mod:`peagle_lab.engine.plain`) samples this way.
"""
from __future__ import annotations

import torch

__all__ = ["sampling_uniforms", "gumbel_pick", "token_hashes", "seed32"]

_M32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (xor-shift, multiply) on int64 values in [0, 2³²): no product overflows."""
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _M32
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _M32
    return x ^ (x >> 16)


def token_hashes(vocab: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The per-token-id half of the sampling hash, ``[vocab]`` int64 in [0, 2³²).

    Computed once and passed in as a tensor: inside a compiled kernel an index times this 32-bit
    multiplier does not fit Triton's int32 index arithmetic, while a loaded int64 value does.
    """
    return (torch.arange(vocab, device=device) * 0x9E3779B1) & _M32


def sampling_uniforms(seed: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor,
                      tokens: torch.Tensor) -> torch.Tensor:
    """Uniforms in (0, 1), ``[c, vocab]`` float32, a pure function of (seed, key, position, token id).

    ``tokens`` is ``token_hashes(vocab)``. 24 random bits each, so ``u`` and ``1 - u`` are exact in
    float32 and ``-log(u)`` is never 0.

    >>> u = sampling_uniforms(torch.tensor(7), torch.tensor([0, 1]), torch.tensor([3, 3]), token_hashes(5))
    >>> u.shape, bool((u > 0).all() and (u < 1).all()), bool((u[0] != u[1]).any())
    (torch.Size([2, 5]), True, True)
    """
    row = _mix32(_mix32((keys & _M32) ^ (seed & _M32)) ^ (positions & _M32))
    h = _mix32(row[:, None] ^ tokens)
    return ((h >> 8).float() + 0.5) / float(1 << 24)


def gumbel_pick(logits: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor, keys: torch.Tensor,
                positions: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
    """A sample of each row of ``softmax(logits / temperature)``: ``argmax(logits / T + Gumbel noise)``.

    ``tokens``: ``token_hashes(vocab)`` made beforehand (a compiled caller must pass it).
    """
    if tokens is None:
        tokens = token_hashes(logits.shape[-1], logits.device)
    u = sampling_uniforms(seed, keys, positions, tokens)
    return (logits.float() / temperature - torch.log(-torch.log(u))).argmax(-1)


def seed32(seed: int) -> int:
    """A 64-bit seed folded into the 32 bits the hash mixes in.

    >>> seed32(5), seed32(1 << 32)
    (5, 1)
    """
    return (seed ^ (seed >> 32)) & _M32
