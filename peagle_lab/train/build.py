"""A fresh drafter to train: the right shape for the target, a draft vocabulary, a warm start.

Everything starts random (seeded) by default. ``init_from_target=True`` instead starts the
final norm and ``lm_head`` as the target's own (restricted to the draft vocabulary). On
SmolLM2 that is a confidently wrong start: the target's head reads a random drafter state
as sharp, wrong distributions (a loss far above the uniform ``log Vd``), and it trailed the
random start in a short single-batch CPU trial; so it is an option, not the default. The
P-EAGLE mask embedding starts at the mask token's own embedding row (``attach_embeddings``).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from ..config import DrafterConfig
from ..drafter import Drafter
from .vocab import DraftVocab, apply_draft_vocab, build_draft_vocab, draft_to_target_ids


def new_drafter(target, method: str, num_hidden_layers: int, vocab: DraftVocab, seed: int = 0,
                init_from_target: bool = False, mask_token_id: int | None = None,
                intermediate_size: int | None = None) -> Drafter:
    """A float32 drafter for ``target`` on its device, ready for ``Trainer``.

    Args:
        target: the target ``LlamaModel`` (shapes, taps, embeddings, optional warm start).
        method: "eagle3" or "peagle".
        num_hidden_layers: drafter decoder layers.
        vocab: the draft vocabulary (``vocab.build_draft_vocab``).
        seed: seeds the random initialisation.
        init_from_target: copy the target's final norm and (restricted) lm_head.
        mask_token_id: P-EAGLE's mask token (default: ``config.DEFAULT_MASK_TOKEN_ID``).
        intermediate_size: the MLP width (default: the target's).

    Raises:
        ValueError: a vocabulary built for another target, or an invalid drafter shape.

    >>> from peagle_lab.testing import tiny_target
    >>> from peagle_lab.train.vocab import build_draft_vocab
    >>> t = tiny_target()
    >>> d = new_drafter(t, "peagle", 2, build_draft_vocab(torch.arange(96), 32), init_from_target=True)
    >>> d.config.draft_vocab_size, d.lm_head.weight.shape, bool(torch.equal(d.lm_head.weight[0], t.lm_head.weight[64]))
    (32, torch.Size([32, 64]), True)
    """
    if vocab.vocab_size != target.config.vocab_size:
        raise ValueError(f"the draft vocabulary was built over {vocab.vocab_size} ids, the target has "
                         f"{target.config.vocab_size}")
    cfg = DrafterConfig.for_target(target.config, method, num_hidden_layers, int(vocab.draft_to_target.numel()),
                                   mask_token_id)
    if intermediate_size is not None:
        cfg = dataclasses.replace(cfg, intermediate_size=intermediate_size)
    drafter = Drafter(cfg)
    drafter.reset_parameters(generator=torch.Generator().manual_seed(seed))
    apply_draft_vocab(drafter, vocab)
    if init_from_target:
        with torch.no_grad():
            drafter.lm_head.weight.copy_(target.lm_head.weight[vocab.draft_to_target.to(target.device)].float().cpu())
            drafter.norm.weight.copy_(target.norm.weight.float().cpu())
    drafter = drafter.to(target.device)
    return drafter.attach_embeddings(target.embed_tokens.weight)


def grow_draft_vocab(drafter: Drafter, counts: torch.Tensor, draft_vocab_size: int,
                     always: Sequence[int] = ()) -> tuple[Drafter, DraftVocab]:
    """A copy of a trained ``drafter`` with a larger draft vocabulary, for a warm start.

    The new vocabulary keeps every id the drafter had (and ``always``) and adds the most
    frequent others of ``counts``. Every weight carries over; the ``lm_head`` rows of the ids
    it had move to their new places and the new ids' rows start at zero. So the grown head
    gives its old ids exactly the logits it gave before and every new id the logit 0, which
    training then moves; a draft changes only where all the old logits were below 0.

    Args:
        drafter: a trained head (weights, ``d2t``/``t2d``, the target's embeddings attached).
        counts: occurrences per target id (``vocab.count_tokens`` over the training data).  # [V]
        draft_vocab_size: the new ``Vd``, at least the drafter's.
        always: ids to include whatever their count (EOS).

    Returns:
        ``(grown drafter, its DraftVocab)``; the drafter itself when the size is unchanged.

    Raises:
        ValueError: a smaller size, or one above the target's vocabulary.

    >>> from peagle_lab.testing import tiny_target
    >>> t = tiny_target()
    >>> d = new_drafter(t, "peagle", 1, build_draft_vocab(torch.arange(96) % 5, 32))
    >>> g, v = grow_draft_vocab(d, torch.arange(96), 40)
    >>> g.lm_head.weight.shape, set(draft_to_target_ids(d).tolist()) < set(v.draft_to_target.tolist())
    (torch.Size([40, 64]), True)
    """
    cfg = drafter.config
    old_ids = draft_to_target_ids(drafter).cpu()
    if draft_vocab_size < old_ids.numel():
        raise ValueError(f"draft_vocab_size={draft_vocab_size} is smaller than the head's {old_ids.numel()}: "
                         "a warm start can only grow its draft vocabulary")
    if draft_vocab_size > cfg.vocab_size:
        raise ValueError(f"draft_vocab_size={draft_vocab_size} is out of range; expected at most the target's "
                         f"{cfg.vocab_size}")
    vocab = build_draft_vocab(counts.cpu(), draft_vocab_size, [*old_ids.tolist(), *always])
    if draft_vocab_size == old_ids.numel():
        return drafter, vocab
    grown = Drafter(dataclasses.replace(cfg, draft_vocab_size=draft_vocab_size))
    state = {k: v for k, v in drafter.state_dict().items() if k not in ("lm_head.weight", "d2t", "t2d")}
    missing = grown.load_state_dict(state, strict=False).missing_keys
    assert sorted(missing) == ["d2t", "lm_head.weight", "t2d"], missing  # nothing else may stay random
    apply_draft_vocab(grown, vocab)
    rows = torch.searchsorted(vocab.draft_to_target, old_ids)  # where each old id sits now (both ascending)
    with torch.no_grad():
        grown.lm_head.weight.zero_()
        grown.lm_head.weight[rows] = drafter.lm_head.weight.detach().float().cpu()
    grown = grown.to(device=drafter.device, dtype=drafter.dtype)
    return grown.attach_embeddings(drafter._embed), vocab


_MLP_ROWS = ("mlp.gate_proj.weight", "mlp.up_proj.weight")  # [I, H]: the new units' input rows
_MLP_COLS = "mlp.down_proj.weight"  # [H, I]: the new units' output columns


def grow_intermediate(drafter: Drafter, intermediate_size: int, seed: int = 0) -> Drafter:
    """A copy of a trained ``drafter`` with wider MLPs (``intermediate_size`` units a layer), for a warm start.

    Every weight carries over; each layer's MLP keeps its units and gains new ones whose gate and
    up rows start random (seeded, as a fresh head's) and whose ``down_proj`` columns start at zero.
    So the grown head computes exactly what it did (a new unit adds ``0 * silu(g) * u``) until
    training moves those columns. A drafting pass is launch-bound at small batches, so a wider MLP
    costs little time there (measure it at your concurrency: the matrix products grow with it).

    Args:
        drafter: a trained head.
        intermediate_size: the new MLP width, at least the head's.
        seed: seeds the new units' rows.

    Returns:
        The grown drafter on the same device and dtype; ``drafter`` itself when the width is unchanged.

    Raises:
        ValueError: a width below the head's.

    >>> from peagle_lab.testing import tiny_target
    >>> d = new_drafter(tiny_target(), "peagle", 2, build_draft_vocab(torch.arange(96), 32))
    >>> g = grow_intermediate(d, 200)
    >>> g.config.intermediate_size, tuple(g.layers[1].mlp.down_proj.weight.shape)
    (200, (64, 200))
    """
    cfg = drafter.config
    if intermediate_size < cfg.intermediate_size:
        raise ValueError(f"intermediate_size={intermediate_size} is smaller than the head's {cfg.intermediate_size}: "
                         "a warm start can only widen its MLPs")
    if intermediate_size == cfg.intermediate_size:
        return drafter
    grown = Drafter(dataclasses.replace(cfg, intermediate_size=intermediate_size))
    grown.reset_parameters(generator=torch.Generator().manual_seed(seed))
    old, new = drafter.state_dict(), grown.state_dict()
    assert old.keys() == new.keys(), sorted(set(old) ^ set(new))
    with torch.no_grad():
        for name, dst in new.items():
            src = old[name].detach().cpu()
            if name.endswith(_MLP_ROWS):
                dst[: src.shape[0]] = src
            elif name.endswith(_MLP_COLS):
                dst.zero_()
                dst[:, : src.shape[1]] = src
            else:
                dst.copy_(src)
    grown = grown.to(device=drafter.device, dtype=drafter.dtype)
    return grown.attach_embeddings(drafter._embed)
