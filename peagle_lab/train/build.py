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
                init_from_target: bool = False, mask_token_id: int | None = None) -> Drafter:
    """A float32 drafter for ``target`` on its device, ready for ``Trainer``.

    Args:
        target: the target ``LlamaModel`` (shapes, taps, embeddings, optional warm start).
        method: "eagle3" or "peagle".
        num_hidden_layers: drafter decoder layers.
        vocab: the draft vocabulary (``vocab.build_draft_vocab``).
        seed: seeds the random initialisation.
        init_from_target: copy the target's final norm and (restricted) lm_head.
        mask_token_id: P-EAGLE's mask token (default: ``config.DEFAULT_MASK_TOKEN_ID``).

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
