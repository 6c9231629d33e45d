"""The training loop: packed rows, one compiled step, AdamW on a WSD schedule, DDP, checkpoints.

``Trainer`` owns the frozen target, the drafter and the data. Each epoch packs the training
sequences into rows of ``row_len`` tokens (``pack.py``); each step takes ``batch_size`` rows
(over all ranks), runs the target once, builds the method's elements and masks
(``objective.StepBuilder``), and calls ``objective.DraftObjective``: under torchrun it is
wrapped in ``DistributedDataParallel``, on CUDA it is ``torch.compile``d (falling back to
eager, loudly, if compilation fails). Shapes never change and nothing in a step waits for
the host, which is what makes the step fast; the host reads numbers only at log lines
(every ``log_every`` steps), evaluations and checkpoints.

The learning rate follows ``schedule.Schedule`` over ``total_steps``: ``steps``, or, with a
time budget, as many steps as the budget holds, measured by timing a few steps first.

Callbacks (``Callback``) get one call per log line, evaluation and checkpoint; notebooks
draw from them, the CLI prints them. Reproducibility: the rows of an epoch are a function of
``(seed, epoch)``, COD draws from a generator reseeded per (step, rank), and a checkpoint
holds the weights, the optimiser, the data position and the schedule's length, so a
resumed run ends with the same weights as an uninterrupted one (bit for bit on a CPU).
"""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

import torch

from ..config import COMPILE_MODES, DRAFTER_METHODS, check_choice, check_int
from .checkpoint import TrainState, latest_checkpoint, load_checkpoint, save_checkpoint
from .cod import CODConfig
from .dist import DistInfo, all_reduce_min, all_reduce_sum, barrier
from .loss import StepResult, stats_result
from .objective import DraftObjective, StepBuilder
from .pack import PackedRows, epoch_rows, loss_fraction, pack_examples
from .schedule import Schedule
from .targets import packed_targets
from .vocab import draft_to_target_ids

RESUME_MUST_MATCH = ("method", "k_train", "batch_size", "row_len", "seed", "cod_ratio", "cod_ratio_min",
                     "depth_decay", "top1_weight")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run depends on (the drafter's shape comes with the drafter)."""

    method: str = "peagle"  # "eagle3" (TTT unroll) or "peagle" (COD, one parallel pass)
    steps: int = 1000  # optimiser steps (unless time_budget_s decides them)
    time_budget_s: float | None = None  # train this long, compile and timing included; steps are then measured
    lr: float = 1e-3  # peak learning rate
    schedule: str = "wsd"  # "wsd" (warm-up / stable / decay) or "cosine"
    warmup_fraction: float = 0.02  # share of the steps spent warming up
    decay_fraction: float = 0.2  # wsd: share of the steps spent decaying
    min_lr_ratio: float = 0.05  # the schedule ends at lr * min_lr_ratio
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    batch_size: int = 16  # packed rows per step, over all ranks
    row_len: int = 512  # tokens per packed row (longer sequences are cut)
    k_train: int = 8  # P-EAGLE: depths K_train; EAGLE-3: unrolled TTT steps
    cod_ratio: float = 0.7  # P-EAGLE COD r
    cod_ratio_min: float = 0.2  # P-EAGLE COD r_min
    depth_decay: float | None = None  # depth d weighs depth_decay**d; None: 0.8 for EAGLE-3, 1.0 for P-EAGLE
    # λ: each element's loss is soft CE + λ · hard CE of the target's top draft token (None: soft CE only)
    top1_weight: float | None = None
    seed: int = 0
    log_every: int = 10  # log lines and callbacks (the only per-step host reads)
    ckpt_every: int = 200  # 0: only the final checkpoint
    keep_checkpoints: int = 2
    eval_every: int = 0  # a held-out learning-curve point every N steps (teacher-forced); 0: at the end only
    eval_at_end: bool = True  # acceptance with the real engine at the end (rank 0)
    eval_ks: tuple[int, ...] = (3, 5, 7)
    eval_prompts: int = 64
    eval_max_new_tokens: int = 128
    eval_concurrency: int = 64
    heldout_rows: int = 16  # packed held-out rows behind every learning-curve point
    amp: str = "auto"  # "auto" (bf16 autocast on CUDA), "bf16" or "off"
    compile: str = "auto"  # torch.compile the step: "auto" (on CUDA), "on" or "off"
    calibration_steps: int = 6  # timed steps (no update) that turn time_budget_s into a step count

    def __post_init__(self) -> None:
        check_choice("method", self.method, DRAFTER_METHODS)
        check_choice("amp", self.amp, ("auto", "bf16", "off"))
        check_choice("compile", self.compile, COMPILE_MODES)
        for name, lo in (("steps", 1), ("batch_size", 1), ("row_len", 4), ("k_train", 1), ("seed", 0),
                         ("log_every", 1), ("ckpt_every", 0), ("keep_checkpoints", 1), ("eval_every", 0),
                         ("eval_prompts", 1), ("eval_max_new_tokens", 1), ("eval_concurrency", 1),
                         ("heldout_rows", 0), ("calibration_steps", 2)):
            check_int(name, getattr(self, name), lo)
        for name, lo, hi in (("lr", 0.0, 1.0), ("weight_decay", 0.0, 1.0), ("grad_clip", 0.0, 1e6),
                             ("cod_ratio_min", 0.0, 1.0)):
            v = getattr(self, name)
            if not lo <= v <= hi:
                raise ValueError(f"{name}={v} is out of range; expected [{lo}, {hi}]")
        if not 0.0 < self.cod_ratio <= 1.0:
            raise ValueError(f"cod_ratio={self.cod_ratio} is out of range; expected (0, 1] (1.0 keeps every depth)")
        if self.depth_decay is not None and not 0.0 < self.depth_decay <= 1.0:
            raise ValueError(f"depth_decay={self.depth_decay} is out of range; expected (0, 1] (or None)")
        if self.top1_weight is not None and not 0.0 <= self.top1_weight <= 10.0:
            raise ValueError(f"top1_weight={self.top1_weight} is out of range; expected [0, 10] (or None)")
        if self.top1_weight == 0.0:
            object.__setattr__(self, "top1_weight", None)  # the same objective: one value, so a resume matches
        if not self.eval_ks or any(not 1 <= k <= 16 for k in self.eval_ks):
            raise ValueError(f"eval_ks={self.eval_ks} must be non-empty, each in [1, 16]")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError(f"time_budget_s={self.time_budget_s} must be > 0 (or None)")
        self.lr_schedule  # validates the schedule fields
        self.cod  # validates r and r_min

    @property
    def lr_schedule(self) -> Schedule:
        return Schedule(self.schedule, self.warmup_fraction, self.decay_fraction, self.min_lr_ratio)

    @property
    def cod(self) -> CODConfig:
        """P-EAGLE's depths and ratios (EAGLE-3 uses only ``num_depths`` = TTT steps)."""
        return CODConfig(self.k_train, self.cod_ratio, self.cod_ratio_min)

    @property
    def decay(self) -> float:
        """Base of the per-depth loss weight, as configured, else 0.8 for EAGLE-3 (public recipes) and 1."""
        if self.depth_decay is not None:
            return self.depth_decay
        return 0.8 if self.method == "eagle3" else 1.0

    def lr_at(self, step: int, total_steps: int) -> float:
        """The learning rate of 0-based ``step`` in a run of ``total_steps`` (``schedule.Schedule``)."""
        return self.lr_schedule.lr(self.lr, step, total_steps)


class Callback:
    """Subscribe to a run: override any of these (they default to doing nothing)."""

    def on_step(self, metrics: dict) -> None:
        """At every log line: step, loss and per-depth numbers averaged since the previous line."""

    def on_eval(self, metrics: dict) -> None:
        """After every evaluation: a learning-curve point, and at the end the engine's acceptance."""

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
    """One plain line per log line and evaluation: logs where a bar would be noise."""

    def on_step(self, m: dict) -> None:
        acc = " ".join(f"{a:.2f}" for a in m["depth_acc"])
        print(f"step {m['step']}/{m['total_steps']} loss {m['loss']:.4f} lr {m['lr']:.2e} "
              f"{1000 * m['step_s']:.0f} ms/step {m['tokens_per_s']:.0f} tok/s {m['elapsed_s']:.0f} s | "
              f"top-1 by depth {acc}", flush=True)

    def on_eval(self, m: dict) -> None:
        if m.get("acceptance"):
            als = ", ".join(f"K={r['k']}: {r['acceptance_length']:.2f}" for r in m["acceptance"])
            print(f"engine eval at step {m['step']}: AL {als}", flush=True)
        else:
            acc = " ".join(f"{a:.2f}" for a in m["depth_acc"])
            print(f"held-out at step {m['step']} ({m['tokens']:.3g} tokens): loss {m['loss']:.4f}, "
                  f"top-1 by depth {acc}", flush=True)


@dataclass
class TrainResult:
    """What ``Trainer.run`` returns."""

    steps: int
    wall_s: float
    first_loss: float
    last_loss: float  # the last log line's loss
    last: StepResult | None  # the last log interval's per-depth numbers
    eval: dict = field(default_factory=dict)  # the engine's acceptance reports at the end
    curve: list = field(default_factory=list)  # held-out learning-curve points
    tokens: int = 0  # target tokens trained on in this run folder (all ranks)
    tokens_per_s: float = 0.0  # training throughput after compilation (all ranks)
    first_step_s: float | None = None  # the first step of this process, compilation included


class Trainer:
    """Train ``drafter`` to draft for ``target`` on ``train`` examples.

    Args:
        target: the frozen target ``LlamaModel`` (on the training device).
        drafter: a float32 ``Drafter`` on the same device, with its draft vocabulary set.
        train / heldout: ``data.Example`` lists (held-out: the learning curve and the final eval).
        cfg: the ``TrainConfig``.
        out_dir: log, checkpoints and results go here (rank 0 writes them).
        callbacks: ``Callback`` objects to notify (rank 0 only).
        dist: this process's rank and device (``dist.init_distributed``); default: a world of one.
    """

    def __init__(self, target, drafter, train: list, cfg: TrainConfig, out_dir: Path | str, heldout: list = (),
                 callbacks: Iterable[Callback] = (), progress: bool = True, dist: DistInfo | None = None) -> None:
        if not train:
            raise ValueError("no training examples")
        if drafter.config.method != cfg.method:
            raise ValueError(f"the drafter is {drafter.config.method!r}, the config trains {cfg.method!r}")
        self.dist = dist or DistInfo(device=target.device)
        if cfg.batch_size % self.dist.world_size:
            raise ValueError(f"batch_size={cfg.batch_size} rows must divide among {self.dist.world_size} ranks")
        self.target, self.drafter, self.train, self.heldout = target.eval(), drafter, list(train), list(heldout)
        self.cfg, self.out = cfg, Path(out_dir)
        self.callbacks, self.progress = list(callbacks), progress and self.dist.is_main
        self.device = target.device
        self.rank_batch = cfg.batch_size // self.dist.world_size
        self.amp = torch.bfloat16 if cfg.amp == "bf16" or (cfg.amp == "auto" and self.device.type == "cuda") else None
        cuda = self.device.type == "cuda"
        self.opt = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                                     weight_decay=cfg.weight_decay, fused=cuda)
        self.cod_gen = torch.Generator(device=self.device)
        self.draft_ids = draft_to_target_ids(drafter)
        self.state = TrainState(losses=[], curve=[])
        self._rows: tuple[int, PackedRows, torch.Tensor] | None = None  # (epoch, rows on device, tokens per row)
        first = pack_examples(self.train[: 4096], cfg.row_len)
        self.builder = StepBuilder(cfg.method, self.rank_batch, cfg.row_len, cfg.cod, cfg.decay,
                                   loss_fraction(first), self.device, block=cuda)
        self.objective = DraftObjective(drafter, cfg.k_train, cfg.top1_weight or 0.0)
        self.compiled = cfg.compile == "on" or (cfg.compile == "auto" and cuda)
        # The RoPE frequencies are plain attributes, moved to the device by the first forward: inside a
        # compiled step that move would fail the next call's guards and compile both graphs again.
        target.rope_frequencies(self.device)
        drafter.rope_frequencies(self.device)
        self.first_step_s: float | None = None  # compilation included; set by the first step this process runs
        self._build_step_fns()

    # ------------------------------------------------------------------ the step
    def _build_step_fns(self) -> None:
        module = self.objective
        if self.dist.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            module = DDP(self.objective, device_ids=[self.device] if self.device.type == "cuda" else None,
                         broadcast_buffers=False)
        self.loss_fn, self.target_fn = module, packed_targets
        if self.compiled or self.device.type == "cuda":
            # One graph per shape is expected (TTT steps, the target, held-out batches, flex kernels):
            # more than dynamo's default of 8 specialisations, none of them a recompile storm.
            for name in ("recompile_limit", "cache_size_limit"):
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))
        if self.compiled:
            self.loss_fn, self.target_fn = torch.compile(module), torch.compile(packed_targets)
        self._eager_module = module

    def autocast(self):
        """The drafter's autocast context (bf16 on CUDA by default, else nothing)."""
        if self.amp is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp)

    def forward(self, rows: PackedRows, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(Σ weight·ce, per-depth sums [4, K], global weight)`` of one batch of this rank's rows."""
        mask = self.builder.target_mask(rows)
        targets = self.target_fn(self.target, rows.input_ids, rows.positions, mask, self.draft_ids, self.drafter.t2d)
        inp = self.builder.inputs(rows, targets, generator, self.dist.rank, self.dist.world_size)
        norm = all_reduce_sum(inp.weight.sum().detach().clone())
        with self.autocast():
            loss, stats = self.loss_fn(rows.input_ids, rows.positions, rows.doc, rows.loss_mask, targets.taps,
                                       targets.probs, targets.argmax, inp.anchor, inp.depth, inp.label_row,
                                       inp.valid, inp.weight, inp.mask)
        return loss, stats, norm

    def train_step(self, rows: PackedRows, lr: float | None, generator: torch.Generator):
        """Forward, backward, clip and (with an ``lr``) an AdamW step; returns (stats, grad norm) on the device."""
        loss, stats, norm = self.forward(rows, generator)
        (loss * self.dist.world_size / norm.clamp(min=1e-6)).backward()
        params = [p for p in self.drafter.parameters() if p.grad is not None]
        clip = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        if lr is not None:
            for g in self.opt.param_groups:
                g["lr"] = lr
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return stats, grad_norm

    def guarded_step(self, rows: PackedRows, lr: float | None, generator: torch.Generator):
        """The first step compiles; if compilation fails, say so and carry on eagerly."""
        try:
            return self.train_step(rows, lr, generator)
        except (torch.OutOfMemoryError, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - any compiler failure: eager still trains correctly
            if not self.compiled:
                raise
            self._log({"event": "compile_failed", "error": f"{type(e).__name__}: {e}"[:2000]})
            print(f"torch.compile failed ({type(e).__name__}: {str(e)[:300]}); training eagerly", flush=True)
            self.compiled = False
            self.opt.zero_grad(set_to_none=True)
            self.loss_fn, self.target_fn = self._eager_module, packed_targets
            return self.train_step(rows, lr, generator)

    def seed_step(self, step: int) -> torch.Generator:
        """COD's generator for ``step`` (reseeded, so a resume needs no RNG state; the same on every rank)."""
        return self.cod_gen.manual_seed(self.cfg.seed * 1_000_003 + step)

    # ------------------------------------------------------------------ data
    def epoch(self, epoch: int) -> tuple[PackedRows, torch.Tensor]:
        """Epoch ``epoch``'s rows on the device and their real-token counts (host), built once."""
        if self._rows is None or self._rows[0] != epoch:
            rows = epoch_rows(self.train, self.cfg.row_len, self.cfg.seed, epoch)
            if len(rows) < self.cfg.batch_size:
                raise ValueError(f"the training data packs into {len(rows)} rows of {self.cfg.row_len} tokens, "
                                 f"fewer than batch_size={self.cfg.batch_size}; lower batch_size or row_len")
            self._rows = (epoch, rows.to(self.device), (rows.doc >= 0).sum(1))
        return self._rows[1], self._rows[2]

    def next_rows(self) -> tuple[PackedRows, int]:
        """This rank's rows for the next step, and the step's real tokens over all ranks."""
        rows, tokens = self.epoch(self.state.epoch)
        per_epoch = len(rows) // self.cfg.batch_size
        if self.state.cursor >= per_epoch:
            self.state.epoch, self.state.cursor = self.state.epoch + 1, 0
            rows, tokens = self.epoch(self.state.epoch)
        start = self.state.cursor * self.cfg.batch_size
        self.state.cursor += 1
        mine = start + self.dist.rank * self.rank_batch
        return rows.rows(mine, mine + self.rank_batch), int(tokens[start:start + self.cfg.batch_size].sum())

    # ------------------------------------------------------------------ loop
    def run(self, resume: bool = False) -> TrainResult:
        """Train for ``total_steps`` (or the time budget); resume from the latest checkpoint if asked."""
        from tqdm.auto import tqdm

        cfg, conf = self.cfg, asdict(self.cfg)
        t_start = time.monotonic()
        self._open(resume, conf)
        if not self.state.total_steps:
            self.state.total_steps = self._calibrate(t_start) if cfg.time_budget_s else cfg.steps
            self._log({"event": "schedule", "total_steps": self.state.total_steps, "time_budget_s": cfg.time_budget_s})
        total, elapsed0 = self.state.total_steps, self.state.elapsed_s
        bar = tqdm(total=total, initial=self.state.step, desc=f"train {cfg.method}", disable=not self.progress)
        acc = torch.zeros(4, cfg.k_train, device=self.device)
        gn_sum = torch.zeros((), device=self.device)
        last, interval = None, [time.monotonic(), 0, 0]  # start, steps, tokens since the last log line
        t_loop = time.monotonic()
        tokens0 = self.state.tokens
        while self.state.step < total:
            rows, tokens = self.next_rows()
            step = self.state.step
            stats, grad_norm = self.guarded_step(rows, cfg.lr_at(step, total), self.seed_step(step))
            acc += stats
            gn_sum += grad_norm
            self.state.step += 1
            self.state.tokens += tokens
            interval[1] += 1
            interval[2] += tokens
            bar.update(1)
            if self.first_step_s is None:
                self.first_step_s = time.monotonic() - t_loop
            if self.state.step == 1:
                t_loop, tokens0 = time.monotonic(), self.state.tokens  # compilation ends with the first step
            if self.state.step % cfg.log_every == 0 or self.state.step == total:
                last = self._log_line(acc, gn_sum, interval, elapsed0 + time.monotonic() - t_start, bar)
                acc.zero_()
                gn_sum.zero_()
                interval = [time.monotonic(), 0, 0]
            if cfg.eval_every and self.state.step % cfg.eval_every == 0 and self.state.step < total:
                self.curve_point()
            if cfg.ckpt_every and self.state.step % cfg.ckpt_every == 0:
                self.checkpoint(elapsed0 + time.monotonic() - t_start)
            if cfg.time_budget_s and time.monotonic() - t_start > 1.15 * cfg.time_budget_s + 60:
                self._log({"event": "time_budget_overrun", "step": self.state.step})
                break
        bar.close()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        loop_s = time.monotonic() - t_loop
        wall = elapsed0 + time.monotonic() - t_start
        self.curve_point()
        self.checkpoint(wall)
        losses = [l for _, l in self.state.losses]
        tps = (self.state.tokens - tokens0) / loop_s if loop_s > 0 and self.state.step > 1 else 0.0
        result = TrainResult(self.state.step, wall, losses[0] if losses else float("nan"),
                             losses[-1] if losses else float("nan"), last, curve=list(self.state.curve),
                             tokens=self.state.tokens, tokens_per_s=tps, first_step_s=self.first_step_s)
        if cfg.eval_at_end and self.heldout and self.dist.is_main:
            result.eval = self.evaluate()
        barrier()
        self._log({"event": "end", "step": self.state.step, "wall_s": wall, "last_loss": result.last_loss,
                   "tokens": self.state.tokens, "tokens_per_s": tps})
        return result

    def _open(self, resume: bool, conf: dict) -> None:
        ckpt_root = self.out / "checkpoints"
        found = latest_checkpoint(ckpt_root) if resume else None
        if found is not None:
            self.state = load_checkpoint(found, self.drafter, self.opt, torch.Generator(), conf, RESUME_MUST_MATCH)
            if self.dist.is_main:
                self._trim_log(self.state.step)
            self._log({"event": "resume", "step": self.state.step, "from": found.name})
            return
        if latest_checkpoint(ckpt_root) is not None:
            raise ValueError(f"{self.out} already holds checkpoints; resume them (resume=True / --resume) "
                             "or train into a new folder")
        barrier()  # every rank has looked before rank 0 starts writing
        if self.dist.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "log.jsonl").unlink(missing_ok=True)
        self._log({"event": "start", "config": conf, "world_size": self.dist.world_size, "compiled": self.compiled,
                   "params": sum(p.numel() for p in self.drafter.parameters()),
                   "elements_per_row": self.builder.num_elements, "quotas": self.builder.quotas})

    def _calibrate(self, t_start: float) -> int:
        """Time a few steps without updating anything; the step count the time budget holds."""
        cfg = self.cfg
        rows, _ = self.next_rows()
        self.state.cursor -= 1  # the calibration batch is trained on again later
        times = [synced_seconds(lambda: self.guarded_step(rows, None, self.seed_step(0)), self.device)
                 for _ in range(cfg.calibration_steps)]
        per_step = sorted(times[1:])[len(times[1:]) // 2]  # the median, compilation excluded
        self.first_step_s = times[0]
        left = cfg.time_budget_s - (time.monotonic() - t_start)
        # Held-out points, log lines and checkpoints take their share too: keep 5 % in hand.
        steps = max(1, int(0.95 * left / per_step))
        steps = int(all_reduce_min(float(steps)))
        self._log({"event": "calibration", "step_s": per_step, "first_step_s": times[0], "steps": steps})
        return steps

    def _log_line(self, acc: torch.Tensor, gn_sum: torch.Tensor, interval: list, elapsed: float, bar) -> StepResult:
        all_reduce_sum(acc)
        res = stats_result(acc, interval[1] * self.rank_batch * self.builder.num_elements)
        dt = time.monotonic() - interval[0]
        self.state.losses.append((self.state.step, res.loss))
        m = {"step": self.state.step, "total_steps": self.state.total_steps, "loss": res.loss,
             "lr": self.cfg.lr_at(self.state.step - 1, self.state.total_steps),
             "grad_norm": float(gn_sum) / max(interval[1], 1), "epoch": self.state.epoch,
             "step_s": dt / max(interval[1], 1), "tokens_per_s": interval[2] / dt if dt > 0 else 0.0,
             "tokens": self.state.tokens, "elapsed_s": elapsed, "depth_loss": list(res.depth_loss),
             "depth_acc": list(res.depth_acc), "depth_count": list(res.depth_count)}
        self._log(m)
        if self.dist.is_main:
            for cb in self.callbacks:
                cb.on_step(m)
        bar.set_postfix(loss=f"{res.loss:.3f}", acc0=f"{res.depth_acc[0]:.2f}")
        return res

    # ------------------------------------------------------------------ evaluation
    def heldout_stats(self) -> StepResult | None:
        """Teacher-forced loss and per-depth top-1 agreement on the first ``heldout_rows`` held-out rows.

        COD draws from a fixed seed, so points of one run are comparable; every rank scores its
        share of the rows and the sums are combined.
        """
        if not self.heldout or not self.cfg.heldout_rows:
            return None
        rows = pack_examples(self.heldout, self.cfg.row_len)
        rows = rows.rows(0, min(len(rows), self.cfg.heldout_rows))
        B, world = self.rank_batch, self.dist.world_size
        acc = torch.zeros(4, self.cfg.k_train, device=self.device)
        # A single process scores through the training graph itself (its outputs are dropped, no
        # backward): a no-grad call would compile a second graph. DDP expects a backward after
        # every forward with gradients, so there the scoring runs without them.
        grad = torch.no_grad() if self.dist.distributed else contextlib.nullcontext()
        n = -(-len(rows) // (B * world))  # every rank runs the same number of batches
        with grad:
            for i in range(n):
                start = i * B * world + self.dist.rank * B
                batch = _pad_rows(rows.rows(start, start + B), B).to(self.device)
                acc += self.forward(batch, self.cod_gen.manual_seed(12345 + i))[1].detach()
        all_reduce_sum(acc)
        return stats_result(acc, 0)

    def curve_point(self) -> dict | None:
        """Record one learning-curve point (step, tokens, held-out loss, per-depth agreement)."""
        res = self.heldout_stats()
        if res is None:
            return None
        expected, run = [], 1.0
        for a in res.depth_acc:  # acceptance at draft position i ≈ product of agreements before it
            run *= a
            expected.append(run)
        m = {"event": "curve", "step": self.state.step, "tokens": self.state.tokens, "loss": res.loss,
             "depth_acc": list(res.depth_acc), "expected_per_position": expected}
        if self.state.curve and self.state.curve[-1]["step"] == self.state.step:
            return self.state.curve[-1]
        self.state.curve.append(m)
        self._log(m)
        if self.dist.is_main:
            for cb in self.callbacks:
                cb.on_eval(m)
        return m

    def evaluate(self) -> dict:
        """Acceptance with the real engine at K in ``eval_ks`` on held-out prompts; fires ``on_eval``."""
        from .evaluate import evaluate_acceptance, heldout_prompts, reports_to_json

        prompts = heldout_prompts(self.heldout, self.cfg.eval_prompts)
        reports = evaluate_acceptance(self.target, self.drafter, prompts, self.cfg.eval_ks,
                                      self.cfg.eval_max_new_tokens, self.cfg.eval_concurrency) if prompts else []
        point = self.state.curve[-1] if self.state.curve else {}
        m = {"event": "eval", "step": self.state.step, "heldout_loss": point.get("loss"),
             "heldout_depth_acc": point.get("depth_acc"), "acceptance": reports_to_json(reports)}
        self._log(m)
        for cb in self.callbacks:
            cb.on_eval(m)
        self.drafter.train()
        return m

    # ------------------------------------------------------------------ checkpoints and log
    def checkpoint(self, elapsed: float) -> Path:
        """Save a checkpoint now (``elapsed``: training seconds so far); fires ``on_checkpoint``."""
        self.state.elapsed_s = elapsed
        path = self.out / "checkpoints" / f"step-{self.state.step:07d}"
        if self.dist.is_main:
            path = save_checkpoint(self.out / "checkpoints", self.drafter, self.opt, torch.Generator(), self.state,
                                   asdict(self.cfg), self.cfg.keep_checkpoints)
            self._log({"event": "checkpoint", "step": self.state.step, "path": path.name})
            for cb in self.callbacks:
                cb.on_checkpoint(path)
        barrier()
        return path

    def _log(self, record: dict) -> None:
        if self.dist.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            with open(self.out / "log.jsonl", "a") as f:
                f.write(json.dumps(record, default=str) + "\n")

    def _trim_log(self, step: int) -> None:
        """Drop log lines a killed run wrote after the checkpoint we resume from."""
        path = self.out / "log.jsonl"
        if not path.is_file():
            return
        keep = [line for line in path.read_text().splitlines() if line and json.loads(line).get("step", 0) <= step]
        path.write_text("".join(line + "\n" for line in keep))


def synced_seconds(fn, device: torch.device) -> float:
    """Wall time of ``fn()`` with the device synchronised before and after (CUDA runs ahead of the host)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def _pad_rows(rows: PackedRows, batch: int) -> PackedRows:
    """``rows`` topped up to ``batch`` rows with empty padding rows (no loss, no labels)."""
    n = len(rows)
    if n >= batch:
        return rows
    T = rows.row_len
    pad = lambda t, v: torch.cat([t, torch.full((batch - n, T), v, dtype=t.dtype)])  # noqa: E731
    return PackedRows(pad(rows.input_ids, 0), pad(rows.positions, 0), pad(rows.doc, -1), pad(rows.loss_mask, False))
