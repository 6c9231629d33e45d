"""Acceptance length and per-position acceptance from spec-decode counters: the one formula.

The glossary's definitions (vLLM's counters): a *draft* is one request's K draft tokens in one
step; AL = 1 + accepted / drafts counts the bonus token, so plain decoding has AL 1; the
acceptance at position i is the share of drafts whose first i + 1 tokens were all accepted.
Our engine, the benchmark sweep, the soak, training's evaluation and the vLLM tools all
compute them here.
"""
from __future__ import annotations

from collections.abc import Sequence

__all__ = ["acceptance_length", "per_position_acceptance"]


def acceptance_length(accepted: float, drafts: float) -> float:
    """AL = 1 + accepted / drafts; 1.0 when nothing was drafted (plain decoding).

    >>> acceptance_length(30, 20), acceptance_length(0, 0)
    (2.5, 1.0)
    """
    return 1.0 + accepted / drafts if drafts else 1.0


def per_position_acceptance(accepted_per_position: Sequence[float], drafts: float) -> list[float]:
    """Accepted drafts at each position over all drafts; [] when nothing was drafted.

    >>> per_position_acceptance([16, 10, 4], 20)
    [0.8, 0.5, 0.2]
    """
    return [a / drafts for a in accepted_per_position] if drafts else []
