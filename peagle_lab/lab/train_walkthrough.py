"""Small, fast experiments on P-EAGLE training for notebooks 3 and 6 (no GPU, no data files).

``peagle_lab.train`` holds the method; this module only runs it on sizes a laptop handles in
seconds, and returns plain numbers for the notebooks to print and plot:

```
partition_gradient_check(S)  ─► loss and gradients with S segments vs one pass, on a tiny model
partition_sizes(length, S)   ─► how large the biggest segment is, and how much is recomputed
tiny_setup()                 ─► a tiny target, its training and held-out data, a draft vocabulary
shipped_head_acceptance(res) ─► the shipped heads' held-out acceptance from their training results
```
``partition_gradient_check`` takes an optional replacement for the training attention mask,
so an exercise can break the chain rule and watch the check fail.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from ..testing import tiny_drafter, tiny_target
from ..train import peagle as peagle_train
from ..train.cod import CODConfig, sample_elements
from ..train.partition import partition
from ..train.peagle import PEagleTrainConfig, peagle_step
from ..train.targets import collate, compute_targets
from ..train.tiny import tiny_examples
from ..train.vocab import DraftVocab, build_draft_vocab, count_tokens, draft_to_target_ids

__all__ = ["partition_gradient_check", "partition_sizes", "tiny_setup", "TinySetup", "HeadAcceptance",
           "shipped_head_acceptance"]

MaskFn = Callable[..., torch.Tensor]


class _Sequence:
    """The two fields ``collate`` reads from a training example."""

    def __init__(self, input_ids: list[int], assistant_start: int) -> None:
        self.input_ids, self.assistant_start = input_ids, assistant_start


@contextmanager
def _training_mask(mask: MaskFn | None):
    """Make P-EAGLE's slot builder use ``mask`` (same signature as ``train.mask.chain_mask``)."""
    if mask is None:
        yield
        return
    original = peagle_train.chain_mask
    peagle_train.chain_mask = mask
    try:
        yield
    finally:
        peagle_train.chain_mask = original


def _grads_and_result(target, tb, cod: CODConfig, segments: int, seed: int, mask: MaskFn | None):
    drafter = tiny_drafter(target, "peagle", num_hidden_layers=2, seed=7, draft_vocab_size=80).train()
    with _training_mask(mask):
        result = peagle_step(drafter, tb, PEagleTrainConfig(cod, segments), torch.Generator().manual_seed(seed))
    grads = {n: p.grad.detach().clone() for n, p in drafter.named_parameters() if p.grad is not None}
    return result, grads


def partition_gradient_check(segments=(2, 4), *, seed: int = 0, mask: MaskFn | None = None,
                             num_depths: int = 6) -> dict[int, dict]:
    """Train-step a tiny 2-layer P-EAGLE drafter with S segments and with one pass; compare.

    Three random sequences of different lengths (their later parts are "assistant" tokens)
    go through a tiny seeded target; COD draws the same elements for every S.

    Args:
        segments: the S values to compare with S = 1.
        mask: a replacement for ``train.mask.chain_mask`` (an exercise breaks it); None keeps it.

    Returns:
        ``{S: {"loss": ..., "loss_rel_error": ..., "max_grad_rel_error": ..., "elements_computed": ...}}``;
        S = 1 is included with zero errors. Relative errors are ``|x − x₁| / |x₁|`` (gradients:
        Frobenius norms, the worst parameter).
    """
    g = torch.Generator().manual_seed(seed)
    target = tiny_target(seed=1)
    V = target.config.vocab_size
    seqs = [_Sequence(torch.randint(3, V, (n,), generator=g).tolist(), s) for n, s in ((41, 9), (29, 5), (17, 3))]
    probe = tiny_drafter(target, "peagle", num_hidden_layers=2, seed=7, draft_vocab_size=80)
    tb = compute_targets(target, collate(seqs, 64), draft_to_target_ids(probe))
    cod = CODConfig(num_depths, 0.7, 0.2)
    ref, ref_grads = _grads_and_result(target, tb, cod, 1, seed, mask)
    out = {1: {"loss": ref.loss, "loss_rel_error": 0.0, "max_grad_rel_error": 0.0,
               "elements_computed": ref.num_elements}}
    for S in segments:
        res, grads = _grads_and_result(target, tb, cod, S, seed, mask)
        worst = max(float((grads[n] - ref_grads[n]).norm() / ref_grads[n].norm().clamp(min=1e-12))
                    for n in ref_grads)
        out[S] = {"loss": res.loss, "loss_rel_error": abs(res.loss - ref.loss) / abs(ref.loss),
                  "max_grad_rel_error": worst, "elements_computed": res.num_elements}
    return out


def partition_sizes(length: int, segments=(1, 2, 4, 8), *, cod: CODConfig = CODConfig(), seed: int = 0) -> dict[int, dict]:
    """Elements of one all-assistant sequence of ``length`` tokens, partitioned into S segments.

    Returns:
        ``{S: {"largest": rows of the biggest segment, "computed": rows over all segments}}``;
        the attention of a segment is quadratic in its rows.

    >>> sizes = partition_sizes(200, (1, 4), cod=CODConfig(4, 0.7, 0.2))
    >>> sizes[1]["largest"] == sizes[1]["computed"], sizes[4]["largest"] < sizes[1]["largest"]
    (True, True)
    """
    elements = sample_elements(length, torch.ones(length, dtype=torch.bool), cod, torch.Generator().manual_seed(seed))
    out = {}
    for S in segments:
        parts = partition(elements, S)
        out[S] = {"largest": max(len(p.index) for p in parts), "computed": sum(len(p.index) for p in parts)}
    return out


@dataclass(frozen=True)
class TinySetup:
    """Everything a CPU training demo needs, in seconds."""

    target: object  # peagle_lab.testing.tiny_target(): 4 layers, 64 wide, 96 token ids
    train: list  # train.data.Example: random prompts and the target's greedy responses
    heldout: list
    vocab: DraftVocab  # every id the training responses use (EOS always in)


def tiny_setup(num_examples: int = 512, num_heldout: int = 32, seed: int = 0) -> TinySetup:
    """A tiny seeded target and self-distilled data (``train.tiny.tiny_examples``), split and counted.

    The tiny target is random, so its continuations are hard to predict: a drafter's loss
    falls, but acceptance stays far below what a trained head reaches on SmolLM2.
    """
    if not 0 < num_heldout < num_examples:
        raise ValueError(f"num_heldout={num_heldout} must lie in (0, num_examples={num_examples})")
    target = tiny_target()
    examples = tiny_examples(target, num_examples, seed=seed, max_new_tokens=32)
    train, heldout = examples[:-num_heldout], examples[-num_heldout:]
    V = target.config.vocab_size
    vocab = build_draft_vocab(count_tokens(train, V), V, always=list(target.config.eos_token_ids))
    return TinySetup(target, train, heldout, vocab)


class HeadAcceptance(NamedTuple):
    """Acceptance of one head at one K, as ``figures.acceptance_reports_figure`` reads it."""

    k: int
    acceptance_length: float
    per_position_acceptance: tuple[float, ...]


def shipped_head_acceptance(results: dict) -> dict[str, list[HeadAcceptance]]:
    """``{head name: [HeadAcceptance per K]}`` from a training ``results.json`` (``scripts/gpu/train_heads_h200.sh``).

    >>> shipped_head_acceptance({"heads": {"h": {"acceptance": {"3": {"AL": 1.5, "per_position": [0.4, 0.1, 0.0]}}}}})
    {'h': [HeadAcceptance(k=3, acceptance_length=1.5, per_position_acceptance=(0.4, 0.1, 0.0))]}
    """
    return {name: [HeadAcceptance(int(k), a["AL"], tuple(a["per_position"]))
                   for k, a in sorted(head["acceptance"].items(), key=lambda kv: int(kv[0]))]
            for name, head in results["heads"].items()}
