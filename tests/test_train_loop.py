"""The training loop: it learns, calls back, logs, checkpoints, and resumes exactly."""
from __future__ import annotations

import json

import pytest
import torch

from peagle_lab.testing import tiny_target
from peagle_lab.train.build import new_drafter
from peagle_lab.train.loop import Callback, FnCallback, Trainer, TrainConfig
from peagle_lab.train.tiny import tiny_examples
from peagle_lab.train.vocab import build_draft_vocab, count_tokens


@pytest.fixture(scope="module")
def world():
    target = tiny_target(seed=0)
    train = tiny_examples(target, 48, seed=0)
    heldout = tiny_examples(target, 4, seed=1)
    vocab = build_draft_vocab(count_tokens(train, 96), 64, always=[2])
    return target, train, heldout, vocab


def make(world, method, tmp_path, **kw):
    target, train, heldout, vocab = world
    cfg = TrainConfig(**{**dict(method=method, steps=16, lr=3e-3, warmup_fraction=0.1, batch_size=4, row_len=64,
                                k_train=4, log_every=2, ckpt_every=4, eval_at_end=False), **kw})
    drafter = new_drafter(target, method, 1, vocab, seed=1)
    return Trainer(target, drafter, train, cfg, tmp_path, heldout, progress=False)


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_a_few_steps_reduce_the_loss_and_call_back(world, method, tmp_path):
    seen = {"step": [], "eval": [], "ckpt": []}
    cb = FnCallback(on_step=lambda m: seen["step"].append(m), on_eval=lambda m: seen["eval"].append(m),
                    on_checkpoint=lambda p: seen["ckpt"].append(p))
    trainer = make(world, method, tmp_path, lr=1e-2, eval_at_end=True, eval_ks=(2, 3), eval_prompts=2,
                   eval_max_new_tokens=8)
    trainer.callbacks.append(cb)
    res = trainer.run()
    losses = [m["loss"] for m in seen["step"]]
    assert res.steps == 16 and len(losses) == 8  # one call per log line (log_every=2)
    # from the uniform start (log 64 ≈ 4.16) towards the target's entropy (≈ 1.2 on this data)
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 0.1
    assert all(l == l and l < 1e9 for l in losses)  # finite
    assert [m["step"] for m in seen["step"]] == list(range(2, 17, 2))
    assert all(m["tokens_per_s"] > 0 and len(m["depth_acc"]) == 4 for m in seen["step"])
    assert [p.name for p in seen["ckpt"]] == [f"step-{s:07d}" for s in (4, 8, 12, 16, 16)]  # + the final one
    assert len(list((tmp_path / "checkpoints").glob("step-*"))) == 2  # keep_checkpoints
    curve, ev = seen["eval"]  # the held-out curve point at the end, then the engine's acceptance
    assert curve["step"] == 16 and curve["tokens"] == res.tokens > 0 and len(curve["depth_acc"]) == 4
    assert [r["k"] for r in ev["acceptance"]] == [2, 3] and ev["heldout_loss"] == curve["loss"] > 0
    assert all(1.0 <= r["acceptance_length"] <= r["k"] + 1 for r in ev["acceptance"])
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert log[0]["event"] == "start" and log[-1]["event"] == "end"
    assert [r["step"] for r in log if "event" not in r] == list(range(2, 17, 2))


class Crash(Callback):
    def __init__(self, at):
        self.at = at

    def on_step(self, metrics):
        if metrics["step"] == self.at:
            raise KeyboardInterrupt  # a kill between two checkpoints


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_resume_after_interruption_ends_with_identical_weights(world, method, tmp_path):
    full = make(world, method, tmp_path / "full")
    full.run()
    broken = make(world, method, tmp_path / "resumed")
    broken.callbacks.append(Crash(at=10))  # checkpoints exist at 4 and 8
    with pytest.raises(KeyboardInterrupt):
        broken.run()
    again = make(world, method, tmp_path / "resumed")
    assert again.drafter is not broken.drafter
    res = again.run(resume=True)
    assert res.steps == 16
    for (k, a), (_, b) in zip(full.drafter.state_dict().items(), again.drafter.state_dict().items()):
        assert torch.equal(a, b), k
    assert again.state.losses == full.state.losses
    log = [json.loads(line) for line in (tmp_path / "resumed" / "log.jsonl").read_text().splitlines()]
    resume = [r for r in log if r.get("event") == "resume"]
    assert resume == [{"event": "resume", "step": 8, "from": "step-0000008"}]
    steps_logged = [r["step"] for r in log if "event" not in r]
    assert steps_logged == sorted(set(steps_logged))  # the killed run's steps 9-10 were dropped


def test_fresh_run_refuses_existing_checkpoints_and_resume_checks_config(world, tmp_path):
    make(world, "eagle3", tmp_path, steps=4).run()
    with pytest.raises(ValueError, match="already holds checkpoints"):
        make(world, "eagle3", tmp_path, steps=4).run()
    with pytest.raises(ValueError, match="batch_size"):
        make(world, "eagle3", tmp_path, steps=8, batch_size=2).run(resume=True)


def test_time_budget_is_turned_into_a_fixed_step_count(world, tmp_path):
    """A few timed steps decide how many steps the budget holds; the schedule then runs them all."""
    seen = []
    trainer = make(world, "peagle", tmp_path, steps=1000, time_budget_s=3.0, log_every=1)
    trainer.callbacks.append(FnCallback(on_step=seen.append))
    res = trainer.run()
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    (cal,) = [r for r in log if r.get("event") == "calibration"]
    (sched,) = [r for r in log if r.get("event") == "schedule"]
    assert sched["total_steps"] == cal["steps"] == res.steps >= 1 and res.steps != 1000
    assert seen[-1]["lr"] == pytest.approx(trainer.cfg.lr * trainer.cfg.min_lr_ratio)  # the decay ran to its end


def test_lr_reaches_its_peak_at_the_warmup_fraction_and_is_continuous():
    c = TrainConfig(steps=100, lr=1e-3, warmup_fraction=0.1, decay_fraction=0.3, min_lr_ratio=0.1)
    lrs = [c.lr_at(s, 100) for s in range(100)]
    assert lrs.index(max(lrs)) == 9 and lrs[9] == pytest.approx(1e-3)  # step 9 ends the first 10 %
    assert lrs[0] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[-1] == pytest.approx(1e-4)
    assert max(abs(a - b) for a, b in zip(lrs, lrs[1:])) <= 1e-3 / 10 + 1e-12  # no jumps


@pytest.mark.parametrize("kw, word", [({"method": "medusa"}, "method"), ({"steps": 0}, "steps"),
                                      ({"lr": -1.0}, "lr"), ({"cod_ratio": 0.0}, "ratio"),
                                      ({"eval_ks": (0,)}, "eval_ks"), ({"amp": "fp8"}, "amp"),
                                      ({"row_len": 2}, "row_len"), ({"depth_decay": 0.0}, "depth_decay"),
                                      ({"warmup_fraction": 1.5}, "warmup"), ({"compile": "maybe"}, "compile")])
def test_config_names_the_bad_value(kw, word):
    with pytest.raises(ValueError, match=word):
        TrainConfig(**kw)


def test_the_trainer_puts_both_rope_tables_on_its_device_before_the_first_step(world, tmp_path, monkeypatch):
    """The frequencies are plain attributes that the first forward would move: inside a compiled step
    that move fails the next call's device guard and recompiles everything (the H200 runs did)."""
    from peagle_lab.drafter import Drafter
    from peagle_lab.models.llama import LlamaModel

    asked = []
    for cls in (LlamaModel, Drafter):
        real = cls.rope_frequencies
        monkeypatch.setattr(cls, "rope_frequencies",
                            lambda self, device, real=real, name=cls.__name__: asked.append((name, str(device)))
                            or real(self, device))
    trainer = make(world, "peagle", tmp_path)
    assert ("LlamaModel", str(trainer.device)) in asked and ("Drafter", str(trainer.device)) in asked
    assert trainer.target._inv_freq.device == trainer.drafter._inv_freq.device == trainer.device
