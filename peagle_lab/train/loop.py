"""The training loop: AdamW, warm-up + cosine, bf16 autocast, JSONL log, checkpoints, callbacks.

``Trainer`` owns the target (frozen), the drafter and the data. Each step it collates a
batch, runs the target once (``targets.py``), calls the method's step (``eagle3_step`` or
``peagle_step``: loss and backward), clips, steps AdamW at the scheduled learning rate, and
tells its callbacks. Nothing in here knows about widgets or plots: notebooks subscribe
``on_step`` / ``on_eval`` / ``on_checkpoint`` (a ``Callback``), the CLI draws a tqdm bar.

Reproducibility: the data order is a function of ``(seed, epoch)``, COD draws from its
own generator, and both, with the optimiser and the step, are in every checkpoint; on a
CPU a resumed run ends with the same weights as an uninterrupted one (unless
``time_budget_s`` is set: then the schedule follows the wall clock).
"""
from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

import torch

from ..config import DRAFTER_METHODS, check_choice, check_int
from .checkpoint import TrainState, latest_checkpoint, load_checkpoint, save_checkpoint
from .cod import CODConfig
from .eagle3 import Eagle3TrainConfig, eagle3_step
from .loss import StepResult
from .peagle import PEagleTrainConfig, peagle_step
from .targets import collate, compute_targets
from .vocab import draft_to_target_ids

RESUME_MUST_MATCH = ("method", "k_train", "batch_size", "max_seq_len", "seed", "segments", "cod_ratio", "cod_ratio_min")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run depends on (the drafter's shape comes with the drafter)."""

    method: str = "peagle"  # "eagle3" (TTT unroll) or "peagle" (COD, one parallel pass)
    steps: int = 1000  # optimiser steps (the cosine schedule ends here)
    lr: float = 1e-3  # peak learning rate
    warmup_steps: int = 50
    min_lr_ratio: float = 0.05  # the cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    batch_size: int = 16  # sequences per step
    max_seq_len: int = 512  # longer sequences are cut
    k_train: int = 8  # P-EAGLE: depths K_train; EAGLE-3: unrolled TTT steps
    cod_ratio: float = 0.7  # P-EAGLE COD r
    cod_ratio_min: float = 0.2  # P-EAGLE COD r_min
    segments: int = 1  # P-EAGLE sequence partitioning S
    seed: int = 0
    log_every: int = 10  # JSONL log lines (callbacks get every step)
    ckpt_every: int = 200  # 0: only the final checkpoint
    keep_checkpoints: int = 2
    eval_every: int = 0  # held-out loss + acceptance every N steps; 0: only at the end
    eval_at_end: bool = True
    eval_ks: tuple[int, ...] = (3, 5, 7)
    eval_prompts: int = 64
    eval_max_new_tokens: int = 128
    eval_concurrency: int = 64
    heldout_batches: int = 4  # batches of held-out sequences for the held-out loss
    amp: str = "auto"  # "auto" (bf16 autocast on CUDA), "bf16" or "off"
    time_budget_s: float | None = None  # stop (and finish the cosine) after this much training time

    def __post_init__(self) -> None:
        check_choice("method", self.method, DRAFTER_METHODS)
        check_choice("amp", self.amp, ("auto", "bf16", "off"))
        for name, lo in (("steps", 1), ("warmup_steps", 0), ("batch_size", 1), ("max_seq_len", 4), ("k_train", 1),
                         ("segments", 1), ("seed", 0), ("log_every", 1), ("ckpt_every", 0), ("keep_checkpoints", 1),
                         ("eval_every", 0), ("eval_prompts", 1), ("eval_max_new_tokens", 1),
                         ("eval_concurrency", 1), ("heldout_batches", 0)):
            check_int(name, getattr(self, name), lo)
        for name, lo, hi in (("lr", 0.0, 1.0), ("min_lr_ratio", 0.0, 1.0), ("weight_decay", 0.0, 1.0),
                             ("grad_clip", 0.0, 1e6)):
            v = getattr(self, name)
            if not lo <= v <= hi:
                raise ValueError(f"{name}={v} is out of range; expected [{lo}, {hi}]")
        if not self.eval_ks or any(not 1 <= k <= 16 for k in self.eval_ks):
            raise ValueError(f"eval_ks={self.eval_ks} must be non-empty, each in [1, 16]")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError(f"time_budget_s={self.time_budget_s} must be > 0 (or None)")
        CODConfig(self.k_train, self.cod_ratio, self.cod_ratio_min)  # validates r and r_min

    def method_config(self) -> Eagle3TrainConfig | PEagleTrainConfig:
        """The method's own config (TTT steps, or COD + segments) built from these fields."""
        if self.method == "eagle3":
            return Eagle3TrainConfig(ttt_steps=self.k_train)
        return PEagleTrainConfig(CODConfig(self.k_train, self.cod_ratio, self.cod_ratio_min), self.segments)

    def lr_at(self, progress: float, step: int) -> float:
        """Linear warm-up over ``warmup_steps`` (at most steps/5), then cosine to ``lr·min_lr_ratio``.

        ``progress`` in [0, 1] drives the cosine: ``step / steps``, or the share of the time
        budget used when that is further along.

        >>> c = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.0)
        >>> [round(c.lr_at(s / 100, s), 3) for s in (0, 5, 10, 55, 100)]
        [0.1, 0.6, 1.0, 0.5, 0.0]
        """
        warmup = min(self.warmup_steps, self.steps // 5)  # a short run keeps most of its steps at full lr
        if step < warmup:
            return self.lr * (step + 1) / warmup
        w = warmup / self.steps
        t = min(max((progress - w) / max(1.0 - w, 1e-9), 0.0), 1.0)
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def heldout_loss(target, drafter, examples: list, cfg: TrainConfig, amp=None) -> StepResult:
    """The training objective on the first ``cfg.heldout_batches`` batches of ``examples``.

    COD draws from a fixed seed, so the number is comparable across a run's evaluations.
    Per-depth agreement is pooled over the batches; ``depth_loss`` is left empty.
    """
    step_fn = eagle3_step if cfg.method == "eagle3" else peagle_step
    draft_ids, g, B = draft_to_target_ids(drafter), torch.Generator().manual_seed(12345), cfg.batch_size
    was_training = drafter.training
    drafter.eval()
    results = []
    for s in range(0, min(len(examples), B * cfg.heldout_batches), B):
        tb = compute_targets(target, collate(examples[s:s + B], cfg.max_seq_len, target.device), draft_ids)
        results.append(step_fn(drafter, tb, cfg.method_config(), g, backward=False, amp=amp))
    drafter.train(was_training)
    n = sum(r.num_loss for r in results)
    counts = [sum(r.depth_count[d] for r in results) for d in range(len(results[0].depth_acc))]
    depth_acc = [sum(r.depth_acc[d] * r.depth_count[d] for r in results) / max(c, 1) for d, c in enumerate(counts)]
    return StepResult(sum(r.loss * r.num_loss for r in results) / max(n, 1), (), tuple(depth_acc), tuple(counts),
                      0, n)


class Callback:
    """Subscribe to a run: override any of these (they default to doing nothing)."""

    def on_step(self, metrics: dict) -> None:
        """After every optimiser step: step, loss, lr, grad_norm, depth_loss, depth_acc, timings."""

    def on_eval(self, metrics: dict) -> None:
        """After every evaluation: held-out loss and acceptance reports."""

    def on_checkpoint(self, path: Path) -> None:
        """After a checkpoint folder is complete."""


@dataclass
class FnCallback(Callback):
    """A ``Callback`` from plain functions: ``FnCallback(on_step=lambda m: losses.append(m["loss"]))``."""

    on_step: object = None
    on_eval: object = None
    on_checkpoint: object = None

    def __post_init__(self) -> None:
        for name in ("on_step", "on_eval", "on_checkpoint"):
            if getattr(self, name) is None:
                setattr(self, name, lambda *_: None)


class PrintEvery(Callback):
    """One plain line every ``every`` steps and per evaluation: logs where a bar would be noise."""

    def __init__(self, every: int, total: int) -> None:
        self.every, self.total = every, total

    def on_step(self, m: dict) -> None:
        if m["step"] % self.every == 0 or m["step"] == 1:
            acc = " ".join(f"{a:.2f}" for a in m["depth_acc"])
            print(f"step {m['step']}/{self.total} loss {m['loss']:.4f} lr {m['lr']:.2e} "
                  f"{1000 * m['step_s']:.0f} ms/step {m['elapsed_s']:.0f} s | top-1 by depth {acc}", flush=True)

    def on_eval(self, m: dict) -> None:
        als = ", ".join(f"K={r['k']}: {r['acceptance_length']:.2f}" for r in m["acceptance"])
        print(f"eval at step {m['step']}: held-out loss {m['heldout_loss']}, AL {als}", flush=True)


@dataclass
class TrainResult:
    """What ``Trainer.run`` returns: steps, wall time, losses, the last step and the final eval."""

    steps: int
    wall_s: float
    first_loss: float
    last_loss: float  # mean of the last 20 steps
    last: StepResult | None
    eval: dict = field(default_factory=dict)  # the final held-out loss and acceptance reports


class Trainer:
    """Train ``drafter`` to draft for ``target`` on ``train`` examples.

    Args:
        target: the frozen target ``LlamaModel`` (on the training device).
        drafter: a ``Drafter`` in float32 on the same device, with its draft vocabulary set.
        train / heldout: ``data.Example`` lists (held-out: held-out loss and acceptance).
        cfg: the ``TrainConfig``.
        out_dir: log, checkpoints and results go here.
        callbacks: ``Callback`` objects to notify.
    """

    def __init__(self, target, drafter, train: list, cfg: TrainConfig, out_dir: Path | str, heldout: list = (),
                 callbacks: Iterable[Callback] = (), progress: bool = True) -> None:
        if not train:
            raise ValueError("no training examples")
        if drafter.config.method != cfg.method:
            raise ValueError(f"the drafter is {drafter.config.method!r}, the config trains {cfg.method!r}")
        self.target, self.drafter, self.train, self.heldout = target.eval(), drafter, list(train), list(heldout)
        self.cfg, self.out = cfg, Path(out_dir)
        self.callbacks, self.progress = list(callbacks), progress
        self.device = target.device
        self.amp = torch.bfloat16 if cfg.amp == "bf16" or (cfg.amp == "auto" and self.device.type == "cuda") else None
        self.opt = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                                     weight_decay=cfg.weight_decay)
        self.cod_gen = torch.Generator().manual_seed(cfg.seed)
        self.draft_ids = draft_to_target_ids(drafter)
        self.state = TrainState(losses=[])
        self._epoch: tuple[int, list[list[int]]] | None = None  # (epoch, its batches), built once per epoch
        self.step_fn = eagle3_step if cfg.method == "eagle3" else peagle_step
        self.method_cfg = cfg.method_config()

    # ------------------------------------------------------------------ data
    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """The batches of ``epoch``: a seeded shuffle, length-sorted within windows of 32 batches."""
        g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.train), generator=g).tolist()
        B, window = self.cfg.batch_size, self.cfg.batch_size * 32
        batches = []
        for w in range(0, len(order), window):
            chunk = sorted(order[w:w + window], key=lambda i: len(self.train[i].input_ids))
            batches += [chunk[i:i + B] for i in range(0, len(chunk), B)]
        perm = torch.randperm(len(batches), generator=g).tolist()  # similar lengths together, order random
        return [batches[i] for i in perm]

    def next_batch(self) -> list[int]:
        """The next batch's example indices; advances the data position (epoch, cursor)."""
        if self._epoch is None or self._epoch[0] != self.state.epoch:
            self._epoch = (self.state.epoch, self.epoch_batches(self.state.epoch))
        if self.state.cursor >= len(self._epoch[1]):
            self.state.epoch, self.state.cursor = self.state.epoch + 1, 0
            self._epoch = (self.state.epoch, self.epoch_batches(self.state.epoch))
        self.state.cursor += 1
        return self._epoch[1][self.state.cursor - 1]

    def autocast(self):
        """The forward passes' autocast context (bf16 on CUDA by default, else nothing)."""
        if self.amp is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp)

    def batch_step(self, examples: list, backward: bool, generator: torch.Generator) -> StepResult:
        """Collate, run the target, then the method's step (with or without backward)."""
        tokens = collate(examples, self.cfg.max_seq_len, self.device)
        tb = compute_targets(self.target, tokens, self.draft_ids)
        return self.step_fn(self.drafter, tb, self.method_cfg, generator, backward=backward, amp=self.autocast)

    # ------------------------------------------------------------------ loop
    def run(self, resume: bool = False) -> TrainResult:
        """Train until ``steps`` (or the time budget); resume from the latest checkpoint if asked."""
        from tqdm.auto import tqdm

        cfg, conf = self.cfg, asdict(self.cfg)
        self.out.mkdir(parents=True, exist_ok=True)
        ckpt_root = self.out / "checkpoints"
        found = latest_checkpoint(ckpt_root) if resume else None
        if found is not None:
            self.state = load_checkpoint(found, self.drafter, self.opt, self.cod_gen, conf, RESUME_MUST_MATCH)
            self._trim_log(self.state.step)
            self._log({"event": "resume", "step": self.state.step, "from": found.name})
        else:
            if latest_checkpoint(ckpt_root) is not None:
                raise ValueError(f"{self.out} already holds checkpoints; resume them (resume=True / --resume) "
                                 "or train into a new folder")
            (self.out / "log.jsonl").unlink(missing_ok=True)
            self._log({"event": "start", "config": conf, "params": sum(p.numel() for p in self.drafter.parameters())})
        t_start, elapsed0 = time.monotonic(), self.state.elapsed_s
        bar = tqdm(total=cfg.steps, initial=self.state.step, desc=f"train {cfg.method}", disable=not self.progress)
        last = None
        while self.state.step < cfg.steps:
            elapsed = elapsed0 + time.monotonic() - t_start
            progress = self.state.step / cfg.steps
            if cfg.time_budget_s:
                if elapsed >= cfg.time_budget_s:
                    self._log({"event": "time_budget", "step": self.state.step, "elapsed_s": elapsed})
                    break
                progress = max(progress, elapsed / cfg.time_budget_s)
            lr = cfg.lr_at(progress, self.state.step)
            for g in self.opt.param_groups:
                g["lr"] = lr
            t0 = time.monotonic()
            self.drafter.train()
            last = self.batch_step([self.train[i] for i in self.next_batch()], True, self.cod_gen)
            params = [p for p in self.drafter.parameters() if p.grad is not None]
            clip = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.state.step += 1
            self.state.losses.append((self.state.step, last.loss))
            m = {"step": self.state.step, "loss": last.loss, "lr": lr, "grad_norm": grad_norm,
                 "epoch": self.state.epoch,
                 "step_s": time.monotonic() - t0, "elapsed_s": elapsed0 + time.monotonic() - t_start,
                 "depth_loss": list(last.depth_loss), "depth_acc": list(last.depth_acc), "elements": last.num_elements}
            if self.state.step % cfg.log_every == 0 or self.state.step == 1:
                self._log(m)
            for cb in self.callbacks:
                cb.on_step(m)
            bar.update(1)
            bar.set_postfix(loss=f"{last.loss:.3f}", acc0=f"{last.depth_acc[0]:.2f}" if last.depth_acc else "")
            if cfg.eval_every and self.state.step % cfg.eval_every == 0 and self.state.step < cfg.steps:
                self.evaluate()
            if cfg.ckpt_every and self.state.step % cfg.ckpt_every == 0:
                self.checkpoint(elapsed0 + time.monotonic() - t_start)
        bar.close()
        wall = elapsed0 + time.monotonic() - t_start
        self.checkpoint(wall)
        losses = [l for _, l in self.state.losses]
        result = TrainResult(self.state.step, wall, losses[0] if losses else float("nan"),
                             sum(losses[-20:]) / len(losses[-20:]) if losses else float("nan"), last)
        if cfg.eval_at_end and self.heldout:
            result.eval = self.evaluate()
        self._log({"event": "end", "step": self.state.step, "wall_s": wall, "last_loss": result.last_loss})
        return result

    def checkpoint(self, elapsed: float) -> Path:
        """Save a checkpoint now (``elapsed``: training seconds so far); fires ``on_checkpoint``."""
        self.state.elapsed_s = elapsed
        path = save_checkpoint(self.out / "checkpoints", self.drafter, self.opt, self.cod_gen, self.state,
                               asdict(self.cfg), self.cfg.keep_checkpoints)
        self._log({"event": "checkpoint", "step": self.state.step, "path": path.name})
        for cb in self.callbacks:
            cb.on_checkpoint(path)
        return path

    @torch.no_grad()
    def heldout_loss(self) -> StepResult | None:
        """The loss on the held-out split (``heldout_loss`` below); None without held-out data."""
        if not self.heldout or not self.cfg.heldout_batches:
            return None
        return heldout_loss(self.target, self.drafter, self.heldout, self.cfg, self.autocast)

    def evaluate(self) -> dict:
        """Held-out loss and acceptance (the real engine, K in ``eval_ks``); fires ``on_eval``."""
        from .evaluate import evaluate_acceptance, heldout_prompts, reports_to_json

        hl = self.heldout_loss()
        prompts = heldout_prompts(self.heldout, self.cfg.eval_prompts)
        reports = evaluate_acceptance(self.target, self.drafter, prompts, self.cfg.eval_ks,
                                      self.cfg.eval_max_new_tokens, self.cfg.eval_concurrency) if prompts else []
        m = {"event": "eval", "step": self.state.step, "heldout_loss": hl.loss if hl else None,
             "heldout_depth_acc": list(hl.depth_acc) if hl else None, "acceptance": reports_to_json(reports)}
        self._log(m)
        for cb in self.callbacks:
            cb.on_eval(m)
        self.drafter.train()
        return m

    # ------------------------------------------------------------------ log
    def _log(self, record: dict) -> None:
        with open(self.out / "log.jsonl", "a") as f:
            f.write(json.dumps(record, default=str) + "\n")

    def _trim_log(self, step: int) -> None:
        """Drop log lines a killed run wrote after the checkpoint we resume from."""
        path = self.out / "log.jsonl"
        if not path.is_file():
            return
        keep = [line for line in path.read_text().splitlines() if line and json.loads(line).get("step", 0) <= step]
        path.write_text("".join(line + "\n" for line in keep))
