"""What the drafter learns from: the target's taps and next-token logits for a batch.

Both come from one target forward over the padded batch (no KV cache, so tokens attend
causally by position; right padding never reaches a real token). By default they are
computed online, under ``no_grad`` on the training device, because for a 135M target that
costs less than reading them back from disk. ``cache_targets`` writes them to safetensors
shards anyway, for slow devices or bigger targets: the taps and the final hidden state
(``H`` wide) are stored, and logits are recomputed from the hidden state through the
target's ``lm_head``, so the cache holds ``4H`` numbers a token instead of a vocabulary.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from ..models.checkpoints import atomic_path, write_json


@dataclass(frozen=True)
class TokenBatch:
    """A right-padded batch of chat sequences."""

    input_ids: torch.Tensor  # [B, T] int64, padding = 0
    lengths: torch.Tensor  # [B] real tokens per row
    loss_mask: torch.Tensor  # [B, T] bool: assistant tokens (the ones worth predicting)


@dataclass(frozen=True)
class TargetBatch:
    """A ``TokenBatch`` with the target's view of it; row t of the logits predicts token t+1."""

    tokens: TokenBatch
    taps: torch.Tensor  # [B, T, 3H] the target's tap hidden states (model dtype)
    logits: torch.Tensor  # [B, T, Vd] float32 target logits over the draft vocabulary
    argmax: torch.Tensor  # [B, T] int64 target argmax over the full vocabulary (target ids)


def collate(examples: Sequence, max_seq_len: int, device: torch.device | str = "cpu") -> TokenBatch:
    """Pad ``examples`` (objects with ``input_ids`` and ``assistant_start``) into a batch.

    Sequences longer than ``max_seq_len`` are cut; tokens from ``assistant_start`` on are
    the assistant's and carry the loss.

    >>> from types import SimpleNamespace as E
    >>> b = collate([E(input_ids=[5, 6, 7, 8], assistant_start=2), E(input_ids=[9, 9], assistant_start=1)], 8)
    >>> b.input_ids.tolist(), b.loss_mask.int().tolist()
    ([[5, 6, 7, 8], [9, 9, 0, 0]], [[0, 0, 1, 1], [0, 1, 0, 0]])
    """
    if not examples:
        raise ValueError("collate needs at least one example")
    if max_seq_len < 3:
        raise ValueError(f"max_seq_len={max_seq_len} is out of range; expected >= 3")
    lengths = [min(len(e.input_ids), max_seq_len) for e in examples]
    T = max(lengths)
    ids = torch.zeros(len(examples), T, dtype=torch.long)
    loss = torch.zeros(len(examples), T, dtype=torch.bool)
    for b, (e, n) in enumerate(zip(examples, lengths)):
        ids[b, :n] = torch.tensor(e.input_ids[:n], dtype=torch.long)
        loss[b, e.assistant_start:n] = True
    return TokenBatch(ids.to(device), torch.tensor(lengths, device=device), loss.to(device))


def logits_from_hidden(lm_head: torch.nn.Module, hidden: torch.Tensor,
                       draft_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's logits on the draft vocabulary (float32) and its full-vocabulary argmax.

    Args:
        lm_head: the target's output projection.
        hidden: the target's final-normed hidden states.  # [B, T, H]
        draft_ids: target ids of the draft vocabulary, ascending.  # [Vd]
    """
    full = lm_head(hidden)  # [B, T, V] in the model's dtype
    return full.index_select(-1, draft_ids).float(), full.argmax(-1)


@torch.no_grad()
def compute_targets(target, tokens: TokenBatch, draft_ids: torch.Tensor) -> TargetBatch:
    """Run the target once over ``tokens`` and keep what the loss needs.

    Args:
        target: a ``LlamaModel`` (frozen; run without gradients).
        tokens: the padded batch, on the target's device.
        draft_ids: target ids of the draft vocabulary.  # [Vd]
    """
    B, T = tokens.input_ids.shape
    pos = torch.arange(T, device=tokens.input_ids.device).expand(B, T)
    out = target(tokens.input_ids, pos, return_logits=False)
    logits, argmax = logits_from_hidden(target.lm_head, out.hidden, draft_ids.to(out.hidden.device))
    return TargetBatch(tokens, out.taps, logits, argmax)


@torch.no_grad()
def cache_targets(target, examples: Sequence, out_dir: Path | str, max_seq_len: int, batch_size: int = 16,
                  shard_rows: int = 256) -> Path:
    """Write every example's taps and final hidden state to safetensors shards (atomically).

    Returns:
        ``out_dir``, holding ``targets-XXXXX.safetensors`` and ``index.json``.
    """
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    index: dict[str, str] = {}
    shard: dict[str, torch.Tensor] = {}

    def flush() -> None:
        name = f"targets-{len(set(index.values())):05d}.safetensors"
        with atomic_path(out_dir / name) as tmp:
            save_file(shard, str(tmp))
        index.update({k.split(".")[1]: name for k in shard if k.startswith("taps.")})
        shard.clear()

    dev = target.device
    for start in range(0, len(examples), batch_size):
        tokens = collate(examples[start:start + batch_size], max_seq_len, dev)
        B, T = tokens.input_ids.shape
        out = target(tokens.input_ids, torch.arange(T, device=dev).expand(B, T), return_logits=False)
        for b in range(B):
            n = int(tokens.lengths[b])
            shard[f"taps.{start + b}"] = out.taps[b, :n].cpu().contiguous()
            shard[f"hidden.{start + b}"] = out.hidden[b, :n].cpu().contiguous()
            if len(shard) >= 2 * shard_rows:
                flush()
    if shard:
        flush()
    write_json(out_dir / "index.json", {"num_examples": len(examples), "shards": index})
    return out_dir


class TargetCache:
    """Read back what ``cache_targets`` wrote, as ``TargetBatch`` es."""

    def __init__(self, cache_dir: Path | str) -> None:
        self.dir = Path(cache_dir)
        meta = json.loads((self.dir / "index.json").read_text())
        self.shard_of: dict[int, str] = {int(k): v for k, v in meta["shards"].items()}
        self._open: dict[str, object] = {}

    def _get(self, kind: str, i: int) -> torch.Tensor:
        from safetensors import safe_open

        name = self.shard_of[i]
        if name not in self._open:
            self._open[name] = safe_open(str(self.dir / name), framework="pt")
        return self._open[name].get_tensor(f"{kind}.{i}")

    def batch(self, indices: Sequence[int], tokens: TokenBatch, lm_head: torch.nn.Module,
              draft_ids: torch.Tensor) -> TargetBatch:
        """The ``TargetBatch`` of examples ``indices`` (collated into ``tokens``)."""
        B, T = tokens.input_ids.shape
        dev = tokens.input_ids.device
        taps = hidden = None
        for b, i in enumerate(indices):
            t, h = self._get("taps", i), self._get("hidden", i)
            if taps is None:
                taps = torch.zeros(B, T, t.shape[-1], dtype=t.dtype, device=dev)
                hidden = torch.zeros(B, T, h.shape[-1], dtype=h.dtype, device=dev)
            n = min(int(tokens.lengths[b]), t.shape[0])
            taps[b, :n], hidden[b, :n] = t[:n].to(dev), h[:n].to(dev)
        with torch.no_grad():
            logits, argmax = logits_from_hidden(lm_head, hidden, draft_ids.to(dev))
        return TargetBatch(tokens, taps, logits, argmax)


@dataclass(frozen=True)
class PackedTargets:
    """The target's view of packed rows (``pack.PackedRows``); row t predicts token t+1."""

    taps: torch.Tensor  # [B, T, 3H] model dtype
    probs: torch.Tensor  # [B, T, Vd] float32: softmax of the target's logits on the draft vocabulary
    argmax: torch.Tensor  # [B, T] int64 argmax over the full vocabulary (target ids)
    in_vocab: torch.Tensor  # [B, T] bool: that argmax is in the draft vocabulary


@torch.no_grad()
def packed_targets(target, input_ids: torch.Tensor, positions: torch.Tensor, attn_mask, draft_ids: torch.Tensor,
                   t2d: torch.Tensor) -> PackedTargets:
    """Run the frozen target over packed rows (attention kept inside each sequence by ``attn_mask``).

    Args:
        target: a ``LlamaModel``.
        input_ids / positions: the rows.  # [B, T]
        attn_mask: ``mask.doc_causal_mod`` built for these rows (dense or block).
        draft_ids: target ids of the draft vocabulary.  # [Vd]
        t2d: which target ids the draft vocabulary holds.  # [V] bool
    """
    out = target(input_ids, positions, return_logits=False, attn_mask=attn_mask)
    logits, argmax = logits_from_hidden(target.lm_head, out.hidden, draft_ids)
    return PackedTargets(out.taps, torch.softmax(logits, -1), argmax, t2d[argmax])
