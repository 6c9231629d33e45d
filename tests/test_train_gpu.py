"""The training step on CUDA: compiled once, then reused (run by scripts/gpu/gpu_tests.sh; skipped without CUDA)."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.testing import tiny_target
from peagle_lab.train.build import new_drafter
from peagle_lab.train.loop import Trainer, TrainConfig
from peagle_lab.train.tiny import tiny_examples
from peagle_lab.train.vocab import build_draft_vocab, count_tokens

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("method, top1_weight", [("eagle3", None), ("peagle", None), ("peagle", 0.5)])
def test_the_compiled_training_step_is_not_compiled_again_by_its_second_call(method, top1_weight, tmp_path):
    """The ninth session's runs compiled the target and the objective twice: the first call moved the
    RoPE tables from the CPU to the GPU inside the compiled region, which failed the second call's guards.
    With ``top1_weight`` the objective's extra hard term compiles in the same graph."""
    from torch._dynamo.utils import counters

    target = tiny_target(seed=0).to("cuda")
    train = tiny_examples(target, 48, seed=0)
    vocab = build_draft_vocab(count_tokens(train, 96), 64, always=[2])
    cfg = TrainConfig(method=method, steps=4, batch_size=4, row_len=64, k_train=4, compile="on", eval_at_end=False,
                      top1_weight=top1_weight)
    trainer = Trainer(target, new_drafter(target, method, 1, vocab, seed=1), train, cfg, tmp_path, progress=False)
    rows, _ = trainer.next_rows()
    trainer.guarded_step(rows, 1e-3, trainer.seed_step(0))
    assert trainer.compiled  # no eager fallback
    graphs = counters["stats"]["unique_graphs"]
    for step in (1, 2):
        rows, _ = trainer.next_rows()
        _, grad_norm = trainer.guarded_step(rows, 1e-3, trainer.seed_step(step))
    assert counters["stats"]["unique_graphs"] == graphs
    assert torch.isfinite(grad_norm) and grad_norm > 0  # the objective (with its hard term) trains
