"""Resumable training checkpoints: weights, optimiser, RNG and data position, written atomically.

Layout under ``<out>/checkpoints/``::

    step-0000200/  drafter.safetensors   the drafter's tensors (d2t/t2d and mask parameters too)
                   state.pt              optimiser state and RNG states (tensors and numbers only)
                   trainer.json          step, data position, elapsed time, losses so far, config
    latest.json    {"step": 200, "dir": "step-0000200"}, rewritten only after the folder exists

A folder appears whole or not at all (``atomic_dir``) and ``latest.json`` moves last, so a
run killed at any instant resumes from the last complete checkpoint. ``state.pt`` is read
with ``torch.load(weights_only=True)``: it never unpickles code.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from ..models.checkpoints import atomic_dir, write_json


@dataclass
class TrainState:
    """Where a run stands, beyond the weights: everything needed to continue identically."""

    step: int = 0
    epoch: int = 0
    cursor: int = 0  # next batch within the epoch
    elapsed_s: float = 0.0  # training wall time of all previous runs
    losses: list | None = None  # (step, mean loss since the previous log line) at every log line
    total_steps: int = 0  # the schedule's length (fixed once known, so a resume keeps the same schedule)
    tokens: int = 0  # target tokens trained on so far (real tokens of the packed rows, all ranks)
    curve: list | None = None  # held-out learning-curve points

    def as_dict(self) -> dict:
        return {"step": self.step, "epoch": self.epoch, "cursor": self.cursor, "elapsed_s": self.elapsed_s,
                "losses": self.losses or [], "total_steps": self.total_steps, "tokens": self.tokens,
                "curve": self.curve or []}


def save_checkpoint(root: Path | str, drafter, optimizer, cod_generator: torch.Generator, state: TrainState,
                    config: dict, keep: int = 2) -> Path:
    """Write checkpoint ``step-<step>`` under ``root`` and point ``latest.json`` at it.

    Args:
        keep: how many checkpoint folders to keep (older ones are deleted after the write).
    """
    from safetensors.torch import save_file

    root = Path(root)
    name = f"step-{state.step:07d}"
    rng = {"cod": cod_generator.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    with atomic_dir(root / name) as tmp:
        sd = {k: v.detach().contiguous().cpu() for k, v in drafter.state_dict().items()}
        save_file(sd, str(tmp / "drafter.safetensors"))
        torch.save({"optimizer": optimizer.state_dict(), "rng": rng}, tmp / "state.pt")
        (tmp / "trainer.json").write_text(json.dumps({"state": state.as_dict(), "config": config}, indent=2) + "\n")
    write_json(root / "latest.json", {"step": state.step, "dir": name})
    folders = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in folders[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return root / name


def latest_checkpoint(root: Path | str) -> Path | None:
    """The folder ``latest.json`` names, or None when there is no complete checkpoint."""
    root = Path(root)
    pointer = root / "latest.json"
    if not pointer.is_file():
        return None
    folder = root / json.loads(pointer.read_text())["dir"]
    return folder if (folder / "trainer.json").is_file() else None


def load_checkpoint(folder: Path | str, drafter, optimizer, cod_generator: torch.Generator,
                    config: dict, must_match: tuple[str, ...]) -> TrainState:
    """Restore weights, optimiser, RNG states and the data position from ``folder``.

    Raises:
        ValueError: the checkpoint was made with a different value of a ``must_match`` field, or for a
            drafter of other shapes (layers, draft vocabulary, MLP width).
    """
    from safetensors.torch import load_file

    folder = Path(folder)
    meta = json.loads((folder / "trainer.json").read_text())
    for key in must_match:
        if meta["config"].get(key) != config.get(key):
            raise ValueError(f"cannot resume from {folder}: it was trained with {key}={meta['config'].get(key)!r}, "
                             f"this run has {key}={config.get(key)!r}")
    sd = load_file(str(folder / "drafter.safetensors"))
    own = drafter.state_dict()
    differ = sorted(k for k in sd.keys() | own.keys() if k not in sd or k not in own or sd[k].shape != own[k].shape)
    if differ:
        k = differ[0]
        raise ValueError(f"cannot resume from {folder}: its drafter has other shapes than this run's ({len(differ)} "
                         f"tensors differ, e.g. {k}: {tuple(sd[k].shape) if k in sd else 'absent'} in the checkpoint, "
                         f"{tuple(own[k].shape) if k in own else 'absent'} here); give the --layers, "
                         "--draft-vocab-size and --intermediate-size of the run that wrote it")
    device = next(drafter.parameters()).device
    drafter.load_state_dict({k: v.to(device) for k, v in sd.items()})
    blob = torch.load(folder / "state.pt", map_location="cpu", weights_only=True)
    optimizer.load_state_dict(blob["optimizer"])
    cod_generator.set_state(blob["rng"]["cod"])
    torch.set_rng_state(blob["rng"]["torch"])
    if "cuda" in blob["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(blob["rng"]["cuda"])
    s = meta["state"]
    return TrainState(s["step"], s["epoch"], s["cursor"], s["elapsed_s"], [tuple(x) for x in s["losses"]],
                      s.get("total_steps", 0), s.get("tokens", 0), s.get("curve", []))
