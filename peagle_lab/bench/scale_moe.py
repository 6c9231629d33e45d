"""A real mixture-of-experts layer beside the dense MLP the scale lab stands in for it.

The scale lab runs an MoE target with a dense MLP as wide as its active experts (GPT-OSS-20B:
4 × 2880): right for one decode token, which reads 4 experts. A verify pass of K + 1 tokens a
request routes each token to its own 4, so it reads more distinct experts (about 21 of 32 at
K = 7, c = 1) and costs more than the dense stand-in. Here one layer of each runs on the same
tokens, with random router weights (tokens spread over the experts about uniformly):

```
x [T, H] ─► router [E, H] ─► top-k experts a token ─► sort the T·k (token, expert) pairs by expert
        ─► grouped GEMM [T·k, H] × [E, H, 2I] (offsets: where each expert's rows end)
        ─► SiLU(gate) · up ─► grouped GEMM [T·k, I] × [E, I, H] ─► weighted sum back to [T, H]
```

``torch._grouped_mm`` reads each expert's weights once for all its rows and skips experts with
none, which is what an MoE kernel does. ``moe_extra_ms`` is the per-layer difference the
scale lab adds to a verify pass (``scale.full_depth_costs``: shape ``NAME+moe``). Both layers are
timed as CUDA-graph replays (:func:`~peagle_lab.bench.timing.replay_ms`), as the engine runs a layer.
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from ..models.llama import MLP
from .timing import replay_ms

__all__ = ["MoELayer", "measure_moe"]


class MoELayer(nn.Module):
    """Top-k routed SwiGLU experts (random weights), one grouped GEMM per projection."""

    def __init__(self, hidden: int, intermediate: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.router = nn.Parameter(torch.randn(experts, hidden) / hidden ** 0.5)
        self.gate_up = nn.Parameter(torch.randn(experts, hidden, 2 * intermediate) / hidden ** 0.5)
        self.down = nn.Parameter(torch.randn(experts, intermediate, hidden) / intermediate ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [T, H] → [T, H]; every shape is static, so it captures as a CUDA graph."""
        T, E = x.shape[0], self.router.shape[0]
        weights, idx = torch.topk(x @ self.router.t(), self.top_k, dim=-1)  # [T, k]
        weights = torch.softmax(weights.float(), dim=-1).to(x.dtype)
        flat = idx.flatten()  # [T·k]
        order = flat.argsort()
        experts = torch.arange(E, device=x.device)
        # rows per expert, summed up: where each expert's rows end [E] (no host sync, unlike bincount or one_hot)
        offs = (flat[:, None] == experts).sum(0).cumsum(0).to(torch.int32)
        rows = order // self.top_k  # the token of each sorted pair
        h = torch._grouped_mm(x[rows], self.gate_up, offs=offs)  # [T·k, 2I]
        gate, up = h.chunk(2, dim=-1)
        y = torch._grouped_mm((F.silu(gate) * up).contiguous(), self.down, offs=offs)  # [T·k, H]
        y = y * weights.flatten()[order].unsqueeze(-1)
        return torch.zeros_like(x).index_add_(0, rows, y)


def measure_moe(config, experts: int, top_k: int, expert_intermediate: int, tokens: list[int],
                device: torch.device, dtype: torch.dtype) -> list[dict]:
    """One MoE layer and the dense MLP of ``top_k`` experts (the engine's ``MLP``) at each token count.

    Args:
        config: the target's ``LlamaConfig`` (hidden size; its ``intermediate_size`` is the dense stand-in's).
        tokens: T values, e.g. c · (K + 1) for verify passes and c for plain decoding.

    Returns:
        ``[{"tokens", "moe_ms", "dense_ms", "moe_extra_ms"}]`` (extra = moe − dense, per layer).
    """
    torch.manual_seed(0)
    with torch.device(device):
        moe = MoELayer(config.hidden_size, expert_intermediate, experts, top_k).to(dtype)
        dense = MLP(replace(config, intermediate_size=top_k * expert_intermediate)).to(dtype)
        dense.gate_up.fuse()  # one GEMM for gate and up, as the engine runs the target's MLPs
    out = []
    for t in tokens:
        x = torch.randn(t, config.hidden_size, device=device, dtype=dtype)
        with torch.inference_mode():
            m = replay_ms(lambda: moe(x), device)
            d = replay_ms(lambda: dense(x), device)
        out.append({"tokens": t, "moe_ms": m, "dense_ms": d, "moe_extra_ms": m - d})
    return out
