"""The checks of a ``generate`` call's input: prompts, stop ids, lengths. Bad input raises a
``ValueError`` that names the value and what was expected, before any work is queued.
"""
from __future__ import annotations

from typing import NamedTuple

from ..config import SpecConfig
from ..drafter import Drafter, check_drafter_fits
from ..models.llama import LlamaModel

__all__ = ["check_engine", "Request", "check_request", "check_prompts", "check_eos"]


def check_engine(target, drafter, config) -> None:
    """Check what a ``SpecDecoder`` is built from: a ``LlamaModel``, a ``Drafter`` that fits it and
    ``config.method`` (None for "baseline"), a ``SpecConfig``."""
    if not isinstance(config, SpecConfig):
        raise ValueError(f"config must be a SpecConfig, got {type(config).__name__}")
    if not isinstance(target, LlamaModel):
        raise ValueError(f"target must be a LlamaModel (peagle_lab.load_model), got {type(target).__name__}")
    if drafter is not None and not isinstance(drafter, Drafter):
        raise ValueError(f"drafter must be a Drafter (peagle_lab.heads.io.load_head) or None, "
                         f"got {type(drafter).__name__}")
    if config.method != "baseline":
        if drafter is None:
            raise ValueError(f"method={config.method!r} needs a drafter; pass one or use method='baseline'")
        check_drafter_fits(drafter, target, config.method)


class Request(NamedTuple):
    """One validated ``generate`` call's limits."""

    max_new: int  # new tokens a request may produce
    eos: set[int]  # the ids that end a request (kept in its output)
    need: int  # KV positions a request needs: longest prompt + max_new + K + 1


def check_request(target: LlamaModel, config: SpecConfig, prompts, max_new_tokens, eos_token_ids) -> Request:
    """Validate one ``generate`` call of an engine with ``target`` and ``config`` (None: the config's or
    the model's defaults)."""
    K = config.k
    max_new = config.max_new_tokens if max_new_tokens is None else max_new_tokens
    eos = set(target.config.eos_token_ids if eos_token_ids is None else check_eos(eos_token_ids))
    lens = check_prompts(prompts, target.config.vocab_size)
    if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 1:
        raise ValueError(f"max_new_tokens={max_new!r} must be an integer >= 1")
    need = max(lens) + max_new + K + 1
    limit = target.config.max_position_embeddings
    if need > limit:
        raise ValueError(f"longest prompt ({max(lens)} tokens) + max_new_tokens ({max_new}) + K ({K}) "
                         f"+ 1 = {need} exceeds the model's context of {limit} positions")
    return Request(max_new, eos, need)


def check_prompts(prompts, vocab_size: int) -> list[int]:
    """Validate a batch of token-id prompts; return their lengths."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError(f"prompts must be a non-empty list of token-id lists, got {type(prompts).__name__}")
    lens = []
    for i, p in enumerate(prompts):
        if isinstance(p, str) or not isinstance(p, (list, tuple)):
            raise ValueError(f"prompt {i} must be a list of token ids, got {type(p).__name__} "
                             "(encode text with the tokenizer's chat template first)")
        if not p:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
        odd = [t for t in p if not isinstance(t, int) or isinstance(t, bool)]
        if odd:
            raise ValueError(f"prompt {i} holds {type(odd[0]).__name__} values, not Python ints: {odd[:5]} "
                             "(convert tensors and arrays with .tolist())")
        bad = [t for t in p if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"prompt {i} has token ids outside [0, {vocab_size}): {bad[:5]}")
        lens.append(len(p))
    return lens


def check_eos(eos_token_ids) -> tuple[int, ...]:
    """Validate ``eos_token_ids`` (a list or tuple of ints; empty: never stop early)."""
    if not isinstance(eos_token_ids, (list, tuple, set, frozenset)) or \
            any(not isinstance(t, int) or isinstance(t, bool) for t in eos_token_ids):
        raise ValueError(f"eos_token_ids={eos_token_ids!r} must be a list or tuple of token ids "
                         "(() never stops early; None uses the model's)")
    return tuple(eos_token_ids)
