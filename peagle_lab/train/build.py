"""A fresh drafter to train: the right shape for the target, a draft vocabulary, a warm start.

Everything starts random (seeded) by default. ``init_from_target=True`` instead starts the
final norm and ``lm_head`` as the target's own (restricted to the draft vocabulary). On
SmolLM2 that is a confidently wrong start: the target's head reads a random drafter state
as sharp, wrong distributions (a loss far above the uniform ``log Vd``), and it trailed the
random start in a short single-batch CPU trial; so it is an option, not the default. The
P-EAGLE mask embedding starts at the mask token's own embedding row (``attach_embeddings``).
"""
from __future__ import annotations

import torch

from ..config import DrafterConfig
from ..drafter import Drafter
from .vocab import DraftVocab, apply_draft_vocab


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
