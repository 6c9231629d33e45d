"""Training EAGLE-3 and P-EAGLE heads: data, targets, the two objectives, the loop.

One concern per module, in the order a run uses them:

    prompts     Magpie user turns (domain system prompts, follow-up turns); stdlib coding prompts; Exclusions
    prompts_synthetic  seeded math and writing prompts from templates
    data        responses by the target (≥ 70 % greedy), held-out split, torchrun shards (synthesize)
    data_files  the on-disk format: Example, per-rank JSONL shards, the data card, load_split
    vocab       the draft vocabulary from token frequencies → d2t / t2d
    build       a fresh drafter for a target (seeded, vocabulary applied)
    pack        sequences packed into fixed-length rows (doc ids, per-sequence positions)
    targets     the target's taps and logits (padded batches; packed rows)
    mask        the chain-visibility rule both methods train with (dense; flex mask_mod for packed rows)
    eagle3      EAGLE-3 with training-time test (unroll on the drafter's own hidden states)
    cod         COD sampling of (anchor, depth) elements          ┐
    partition   sequence partitioning into S segments             ├ P-EAGLE
    peagle      the parallel pass, loss over all depths           ┘
    loss        soft cross-entropy against the target on the draft vocabulary; per-depth stats
    objective   one packed-row step for either method as a module (DDP, torch.compile)
    schedule    the learning rate: warm-up / stable / decay (or cosine) over the run's steps
    loop        TrainConfig, Trainer (packed rows, compiled step, DDP, checkpoints, curve, callbacks)
    dist        torchrun helpers: ranks, devices, sharding
    checkpoint  resumable checkpoints
    evaluate    held-out acceptance with the real engine; model cards
    bench       training throughput and model-FLOP utilisation (`peagle-lab train-bench`)
    report      results.json of a training session (goals, curves, acceptance per K)
    cli         `peagle-lab train-data | train | train-eval` (data_cli, train_cli, cli_common)
    tiny        a character tokenizer and random data for CPU smoke runs

The per-sequence functions (``eagle3_step``, ``peagle_step`` with ``partition``) are the
reference that the packed path is tested against and what the notebooks step through;
``Trainer`` runs the packed path.

See docs/training.md for how the method maps onto these files.
"""
from .build import new_drafter
from .cod import CODConfig, Elements, sample_elements
from .data import DataConfig, Example, load_split, synthesize
from .eagle3 import Eagle3TrainConfig, eagle3_step, ttt_unroll
from .evaluate import AcceptanceReport, evaluate_acceptance, model_card
from .loop import Callback, FnCallback, PrintEvery, Trainer, TrainConfig, TrainResult
from .loss import StepResult, soft_cross_entropy
from .mask import chain_mask, chain_visible
from .partition import Segment, partition
from .peagle import PEagleTrainConfig, build_slots, peagle_step
from .prompts import Exclusions, PromptFilter, code_prompts, magpie_prompts
from .targets import TargetBatch, TokenBatch, collate, compute_targets
from .vocab import DraftVocab, apply_draft_vocab, build_draft_vocab, count_tokens

__all__ = [
    "AcceptanceReport", "CODConfig", "Callback", "DataConfig", "DraftVocab", "Eagle3TrainConfig", "Elements", "Example",
    "Exclusions", "FnCallback", "PEagleTrainConfig", "PrintEvery", "PromptFilter", "Segment", "StepResult",
    "TargetBatch", "TokenBatch", "TrainConfig", "TrainResult", "Trainer", "apply_draft_vocab", "build_draft_vocab",
    "build_slots", "chain_mask", "chain_visible", "code_prompts", "collate", "compute_targets", "count_tokens",
    "eagle3_step", "evaluate_acceptance", "load_split", "magpie_prompts", "model_card", "new_drafter", "partition",
    "peagle_step", "sample_elements", "soft_cross_entropy", "synthesize", "ttt_unroll",
]
