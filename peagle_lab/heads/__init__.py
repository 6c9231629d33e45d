"""Heads shipped with the package (speculators folders, bfloat16, ≤ 15 MiB shards).

``peagle_lab/heads/eagle3`` and ``peagle_lab/heads/peagle`` are trained for the embedded
SmolLM2-135M-Instruct; each folder's README.md is its model card.
"""
from __future__ import annotations

from pathlib import Path

HEADS_DIR = Path(__file__).parent


def bundled_head_dir(method: str) -> Path | None:
    """The shipped head folder for ``method`` ("eagle3" | "peagle"), or None if none ships."""
    p = HEADS_DIR / method
    return p if (p / "config.json").is_file() else None


def default_drafter(target, method: str, seed: int = 0):
    """The shipped head for ``method`` when it fits ``target``, else a random one.

    Returns:
        (Drafter, origin) where origin says which: "bundled <dir>" or "random (untrained)".
    """
    drafter, origin, _ = default_head(target, method, seed)
    return drafter, origin


def default_head(target, method: str, seed: int = 0):
    """:func:`default_drafter`, and the folder its weights came from (None for a random head).

    Returns:
        (Drafter, origin, Path | None).
    """
    from ..drafter import random_drafter
    from .io import load_head

    path = bundled_head_dir(method)
    if path is not None:
        try:
            return load_head(path, target, dtype=target.dtype, device=target.device), f"bundled heads/{method}", path
        except ValueError:
            pass  # a head for SmolLM2 cannot serve another target; fall through to random
    return random_drafter(target, method, seed=seed), "random (untrained)", None
