"""COD sampling (Conditional Drop-token, from PARD): which (anchor, depth) elements train.

Training P-EAGLE on every anchor at every one of ``K_train`` depths costs ``K_train``
times the sequence in drafter tokens (and its square in attention). COD keeps all depth-0
elements and a geometrically shrinking share of the deeper ones, and draws each depth's
survivors from the previous depth's, so every kept chain is complete::

    depth 0: every anchor a with a context slot            (n of them carry a loss)
    depth d: about n · max(r**d, r_min) anchors, drawn from the depth-(d-1) survivors

A depth-``d`` element with anchor ``a`` sits at position ``a + d`` and predicts token
``a + d + 2``; it exists only if its parent ``(a, d - 1)`` does, because its attention
reads the parent's key (see ``mask.py``). The defaults r = 0.7, r_min = 0.2 are the ones
speculators and NeMo AutoModel use for P-EAGLE.

Deeper candidates are restricted to anchors whose target token is an assistant token:
a deep element without a loss would only cost memory, nothing sees it but its own chain.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..config import check_int


@dataclass(frozen=True)
class CODConfig:
    """How many depths P-EAGLE trains and how COD thins them."""

    num_depths: int = 8  # K_train: depths 0..K_train-1; drafting K ≤ K_train tokens at inference
    ratio: float = 0.7  # r: depth d keeps about n · r**d elements
    ratio_min: float = 0.2  # r_min: the floor on that share, so deep depths keep training

    def __post_init__(self) -> None:
        check_int("num_depths", self.num_depths, 1, 32)
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or not 0.0 < self.ratio <= 1.0:
            raise ValueError(f"ratio={self.ratio!r} is out of range; expected (0, 1]")
        if isinstance(self.ratio_min, bool) or not isinstance(self.ratio_min, (int, float)) \
                or not 0.0 <= self.ratio_min <= 1.0:
            raise ValueError(f"ratio_min={self.ratio_min!r} is out of range; expected [0, 1]")

    def quota(self, n: int, depth: int) -> int:
        """Elements to keep at ``depth`` for ``n`` trainable depth-0 anchors.

        >>> CODConfig(ratio=0.5, ratio_min=0.2).quota(100, 1), CODConfig(ratio=0.5, ratio_min=0.2).quota(100, 5)
        (50, 20)
        """
        if depth == 0:
            return n
        # The tiny epsilon keeps float noise (100 * 0.7**2 = 49.000000000000006) from adding one.
        return math.ceil(n * max(self.ratio ** depth, self.ratio_min) - 1e-9)


@dataclass(frozen=True)
class Elements:
    """One sequence's training elements, depth-major and anchors ascending within a depth."""

    anchor: torch.Tensor  # [N] int64
    depth: torch.Tensor  # [N] int64
    has_loss: torch.Tensor  # [N] bool: its target token a + d + 2 is an assistant token

    def __len__(self) -> int:
        return int(self.anchor.numel())

    @property
    def positions(self) -> torch.Tensor:
        """Drafter positions ``a + d``, as in the P-EAGLE inference layout."""  # [N]
        return self.anchor + self.depth

    @property
    def target_rows(self) -> torch.Tensor:
        """Rows of the target's logits that give each element's label distribution."""  # [N]
        return self.anchor + self.depth + 1

    def counts(self) -> list[int]:
        """Elements per depth."""
        return torch.bincount(self.depth).tolist() if len(self) else []


def sample_elements(length: int, loss_mask: torch.Tensor, cfg: CODConfig,
                    generator: torch.Generator | None = None) -> Elements:
    """COD-sample the training elements of one sequence of ``length`` tokens.

    Args:
        length: real tokens in the sequence (padding excluded).
        loss_mask: True at assistant tokens, the ones the drafter learns to predict.  # [≥ length]
        cfg: depths and COD ratios.
        generator: a CPU generator, so a seed reproduces the draw.

    Returns:
        ``Elements`` on the CPU. Anchors run over ``0..length-3``: a later anchor has no
        token two ahead to predict, and nothing that predicts one could attend to it.

    >>> e = sample_elements(8, torch.ones(8, dtype=torch.bool), CODConfig(num_depths=3, ratio=1.0))
    >>> e.counts(), e.anchor[e.depth == 2].tolist()
    ([6, 5, 4], [0, 1, 2, 3])
    """
    mask = loss_mask[:length].bool().cpu()
    n0 = max(length - 2, 0)
    anchors = torch.arange(n0)
    parts_a, parts_d, parts_l = [anchors], [torch.zeros(n0, dtype=torch.long)], [mask[anchors + 2]]
    n = int(parts_l[0].sum())
    parents = anchors
    for d in range(1, cfg.num_depths):
        target = parents + d + 2
        ok = (target < length) & mask[target.clamp(max=max(length - 1, 0))]
        cand = parents[ok]
        keep = cfg.quota(n, d)
        if cand.numel() > keep:
            pick = torch.randperm(cand.numel(), generator=generator)[:keep]
            cand = cand[pick.sort().values]
        if cand.numel() == 0:
            break
        parts_a.append(cand)
        parts_d.append(torch.full_like(cand, d))
        parts_l.append(torch.ones(cand.numel(), dtype=torch.bool))
        parents = cand
    return Elements(torch.cat(parts_a), torch.cat(parts_d), torch.cat(parts_l))


# ------------------------------------------------------------------ packed rows
def packed_quotas(row_len: int, cfg: CODConfig, loss_fraction: float = 1.0) -> list[int]:
    """Elements per depth for a packed row of ``row_len`` tokens: fixed, so shapes never change.

    Depth 0 keeps every token (each is context for later ones). Deeper depths keep about
    ``n · max(r**d, r_min)`` as above, with ``n = row_len · loss_fraction`` standing for the
    row's loss-bearing anchors (``pack.loss_fraction`` measures it on the data once).

    >>> packed_quotas(100, CODConfig(num_depths=4, ratio=0.5, ratio_min=0.2), loss_fraction=0.8)
    [100, 40, 20, 16]
    """
    if not 0.0 < loss_fraction <= 1.0:
        raise ValueError(f"loss_fraction={loss_fraction} is out of range; expected (0, 1]")
    n = row_len * loss_fraction
    return [row_len] + [max(1, min(row_len, math.ceil(n * max(cfg.ratio ** d, cfg.ratio_min) - 1e-9)))
                        for d in range(1, cfg.num_depths)]


def sample_packed(label_valid, batch: int, quotas: list[int], generator: torch.Generator | None = None,
                  device: torch.device | str = "cpu", rows: tuple[int, int] | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """COD on packed rows with fixed quotas, on the device, without a host synchronisation.

    Depth ``d`` draws ``quotas[d]`` of the depth ``d-1`` survivors, preferring those whose
    depth-``d`` label exists (``label_valid``) and choosing at random among equals, so every
    kept chain is complete, as in :func:`sample_elements`. Within a depth, anchors ascend.

    Args:
        label_valid: ``f(anchor [B, n], depth) -> [B, n] bool``, whether the element has a label.
        batch: rows ``B``; ``quotas[0]`` is the row length (depth 0 = every token).
        generator: the random generator (on ``device``).
        rows: ``(offset, global_rows)``: these ``batch`` rows are rows ``offset..`` of a global batch
            (DDP); the draws are made for the whole global batch and sliced, so a row gets the same
            elements whatever the number of ranks.

    Returns:
        ``(anchor, depth)``, each ``[B, Σ quotas]`` int64, depth-major.
    """
    T = quotas[0]
    prev = torch.arange(T, device=device).expand(batch, T)
    anchors, depths = [prev], [torch.zeros(batch, T, dtype=torch.long, device=device)]
    for d, q in enumerate(quotas[1:], start=1):
        if q > prev.shape[1]:
            raise ValueError(f"quotas={quotas} must not grow with depth (depth {d} keeps {q} of {prev.shape[1]})")
        offset, total = rows or (0, batch)
        draw = torch.rand(total, prev.shape[1], generator=generator, device=device)[offset:offset + batch]
        priority = draw + 2.0 * label_valid(prev, d)
        prev = prev.gather(1, priority.topk(q, dim=1).indices).sort(dim=1).values
        anchors.append(prev)
        depths.append(torch.full_like(prev, d))
    return torch.cat(anchors, 1), torch.cat(depths, 1)
