"""The mechanics the notebooks draw, computed by the library's own functions (no plotly here).

Training (notebook 3):

- ``segment_masks``: the attention mask of every segment of sequence partitioning, built by
  ``train.mask.chain_mask`` over the segment's members exactly as ``train.peagle.build_slots``
  builds it; ``segment_masks_agree`` checks that each loss-bearing query sees in its segment
  exactly the keys it sees in the single pass.
- ``training_memory``: the "N × K positions, N² scores" arithmetic, from the COD quotas and a
  real partition.

Inference (notebook 2):

- ``kv_write``: a drafter KV cache before and after one draft pass's writes, through
  ``models.kv_cache.KVCache.write`` (slot −1 lands in the trash row, outside every request).
- ``slot_inputs``: what each slot of one request feeds the drafter, ``embed(token) ⊕ h``.
- ``inference_mask``: what each slot's query sees in the cache, by ``models.kv_cache.attention_mask``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..kernels.prepare_draft_inputs import DraftInputs
from ..models.kv_cache import KVCache, attention_mask
from ..train.cod import CODConfig, Elements, sample_elements
from ..train.mask import chain_mask, chain_visible
from ..train.partition import Segment, partition
from .layout import describe_draft_batch

__all__ = ["SegmentMask", "segment_masks", "segment_masks_agree", "MemoryRow", "training_memory",
           "format_training_memory", "KVWrite", "kv_write", "SlotInput", "slot_inputs", "InferenceMask",
           "inference_mask"]

GIB = 1024 ** 3


# ===================================================================== training
@dataclass(frozen=True)
class SegmentMask:
    """One segment's members and the mask its drafter pass uses."""

    segment: Segment
    anchor: torch.Tensor  # [M] the members' anchors
    depth: torch.Tensor  # [M] the members' depths
    visible: torch.Tensor  # [M, M] bool, query rows × key columns


def segment_masks(elements: Elements, segments: Sequence[Segment]) -> list[SegmentMask]:
    """Each segment's attention mask, as the training step builds it (``chain_mask`` on its members).

    >>> e = sample_elements(6, torch.ones(6, dtype=torch.bool), CODConfig(num_depths=2, ratio=1.0))
    >>> [m.visible.shape[0] for m in segment_masks(e, partition(e, 2))]  # members per segment
    [4, 5]
    """
    out = []
    for s in segments:
        a, d = elements.anchor[s.index][None], elements.depth[s.index][None]  # [1, M]
        valid = torch.ones_like(a, dtype=torch.bool)
        out.append(SegmentMask(s, a[0], d[0], chain_mask(a, d, a, d, valid)[0, 0]))
    return out


def segment_masks_agree(elements: Elements, masks: Sequence[SegmentMask]) -> bool:
    """True when every loss-bearing query sees in its segment exactly the keys of the single pass.

    In the single pass, query j sees ``chain_visible`` row j over all elements; in its segment
    it sees the row of its own mask over the members. Both, as sets of element indices, must
    be equal, and every loss-bearing element must be a loss query of exactly one segment.
    """
    full = chain_visible(elements.anchor, elements.depth, elements.anchor, elements.depth)  # [N, N]
    owners = torch.zeros(len(elements), dtype=torch.long)
    for m in masks:
        idx = m.segment.index
        for q in m.segment.has_loss.nonzero()[:, 0].tolist():
            owners[idx[q]] += 1
            seen = set(idx[m.visible[q]].tolist())
            if seen != set(full[idx[q]].nonzero()[:, 0].tolist()):
                return False
    return bool(torch.equal(owners, elements.has_loss.long()))


@dataclass(frozen=True)
class MemoryRow:
    """The training arithmetic for one way of running one sequence."""

    label: str  # what is run
    positions: int  # drafter rows in the largest single pass
    score_gib: float  # attention scores of that pass: positions² × bytes × heads, one layer
    heads: int

    @property
    def score_gib_per_head(self) -> float:
        return self.score_gib / self.heads


def training_memory(seq_len: int = 8192, num_depths: int = 8, *, segments: Sequence[int] = (2, 4, 8),
                    heads: int = 9, bytes_per_score: int = 2, cod: CODConfig | None = None,
                    seed: int = 0) -> list[MemoryRow]:
    """Drafter rows and attention-score memory of one training sequence: all depths, COD, COD + S segments.

    All tokens are assistant tokens (every anchor carries a loss), as in
    ``scripts/bench/bench_train_memory.py``. Without COD every position trains every depth:
    ``seq_len × K`` rows (the P-EAGLE blog's N × K). COD keeps ``Σ_d quota(n, d) = n · (1 + Σ_{d≥1} max(r^d, r_min))`` rows
    (``CODConfig.quota``); partitioning into S segments runs the largest segment of a real
    draw (``train.partition``). Scores are what an attention that materialises them holds
    for one layer: rows² × ``bytes_per_score`` × ``heads``.

    >>> [r.positions for r in training_memory(100, 4, segments=(2,), heads=1)][:2]  # 100 × 4; 98 + 69 + 49 + 34
    [400, 250]
    """
    cod = cod or CODConfig(num_depths=num_depths)
    n = max(seq_len - 2, 0)  # anchors: the last two tokens have nothing two ahead to predict

    def row(label: str, rows: int) -> MemoryRow:
        return MemoryRow(label, rows, rows * rows * bytes_per_score * heads / GIB, heads)

    out = [row(f"all {num_depths} depths (no COD)", seq_len * num_depths),
           row("COD (quotas)", sum(cod.quota(n, d) for d in range(num_depths)))]
    elements = sample_elements(seq_len, torch.ones(seq_len, dtype=torch.bool), cod, torch.Generator().manual_seed(seed))
    out.append(row("COD, one pass (a real draw)", len(elements)))
    for S in segments:
        out.append(row(f"COD, S = {S} segments (largest)", max(len(p.index) for p in partition(elements, S))))
    return out


def format_training_memory(rows: Sequence[MemoryRow], *, bytes_per_score: int = 2) -> str:
    """The rows as a fixed-width table: rows, then score memory per head and over all heads (GiB)."""
    heads = rows[0].heads if rows else 0
    lines = [f"{'what runs':<34} {'rows':>7} {'GiB per head':>13} {f'GiB, {heads} heads':>13}   ({bytes_per_score} B per score)"]
    lines += [f"{r.label:<34} {r.positions:>7} {r.score_gib_per_head:>13.2f} {r.score_gib:>13.2f}" for r in rows]
    return "\n".join(lines)


# ===================================================================== inference
@dataclass(frozen=True)
class KVWrite:
    """One layer of a drafter KV cache before and after a draft pass's writes (K = V here)."""

    before: torch.Tensor  # [c*max_len + 1] one number per cache row (the last row is the trash row)
    after: torch.Tensor  # [c*max_len + 1]
    slot_mapping: torch.Tensor  # [c*R] the pass's slots, -1 where nothing is written
    writer: torch.Tensor  # [c*R] the value each draft row wrote: its row number + 1
    max_len: int
    num_requests: int

    @property
    def trash_slot(self) -> int:
        return self.num_requests * self.max_len

    @property
    def changed_rows(self) -> list[int]:
        """Cache rows whose contents the pass changed (the trash row included)."""
        return (self.before != self.after).nonzero()[:, 0].tolist()


def kv_write(inputs: DraftInputs, max_len: int, *, context_value: float = -1.0) -> KVWrite:
    """Write one draft pass into a fresh one-layer ``KVCache`` with ``KVCache.write``, the engine's path.

    Before the pass, each request's rows below its first slot position hold ``context_value``
    (the prompt and the tokens kept so far); the rest are 0. Draft row r writes the value r + 1
    to its slot, so ``after`` shows which row wrote where. ``max_len`` must be the one the
    layout used (its slot mapping is ``b * max_len + position``).

    >>> from peagle_lab.lab.layout import layout_toy_batch
    >>> w = kv_write(layout_toy_batch([2, 3], 3, max_len=16), 16)
    >>> w.trash_slot in w.changed_rows, w.after[5:10].tolist()  # request 0 wrote rows 1..5 at positions 5..9
    (True, [1.0, 2.0, 3.0, 4.0, 5.0])
    """
    c, R = inputs.num_requests, inputs.rows_per_request
    cache = KVCache.allocate(1, c, max_len, num_kv_heads=1, head_dim=1, dtype=torch.float32, device="cpu")
    first = inputs.positions.view(c, R)[:, 0]
    for b in range(c):
        cache.k[0][b * max_len: b * max_len + int(first[b])] = context_value
    cache.v[0].copy_(cache.k[0])
    before = cache.k[0][:, 0, 0].clone()
    writer = torch.arange(1, c * R + 1, dtype=torch.float32)
    cache.write(0, inputs.slot_mapping, writer.view(-1, 1, 1), writer.view(-1, 1, 1))
    return KVWrite(before, cache.k[0][:, 0, 0].clone(), inputs.slot_mapping.clone(), writer, max_len, c)


@dataclass(frozen=True)
class SlotInput:
    """What one slot feeds the drafter: Input_i = embed(token_i) ⊕ h_i."""

    slot: int
    kind: str  # context / bonus / mask / padding
    position: int
    token: int
    embed_label: str  # "emb(11)", "emb(MASK)" (the learned mask embedding)
    hidden_label: str  # "h[5]" (the target's taps at position 5, after fc), "h_shared", "0"


def slot_inputs(inputs: DraftInputs, request: int = 0, *, mask_token_id: int | None = None) -> list[SlotInput]:
    """The R slots of one request as ``embed(token) ⊕ h`` pairs, from ``describe_draft_batch``.

    Context and bonus slots take the target's hidden state at their own position (the bonus
    slot's is the last kept position, the blog's h_context); mask slots take
    ``shared_hidden`` = fc(mask_hidden); padding takes zeros.

    >>> from peagle_lab.lab.layout import layout_toy_batch
    >>> [(s.embed_label, s.hidden_label) for s in slot_inputs(layout_toy_batch([2, 3], 3), 0)][1:4]
    [('emb(12)', 'h[6]'), ('emb(100)', 'h[7]'), ('emb(MASK)', 'h_shared')]
    """
    out = []
    for r in describe_draft_batch(inputs):
        if r.request != request:
            continue
        masked = r.is_masked or (mask_token_id is not None and r.token == mask_token_id)
        emb = "emb(MASK)" if masked else f"emb({r.token})"
        hidden = {"mask": "h_shared", "padding": "0"}.get(r.kind, f"h[{r.position}]")
        out.append(SlotInput(r.slot, r.kind, r.position, r.token, emb, hidden))
    return out


@dataclass(frozen=True)
class InferenceMask:
    """What the R slots of one request attend to in the drafter's cache during one pass."""

    positions: list[int]  # [R] slot positions (query rows)
    kinds: list[str]  # [R] slot kinds
    visible: torch.Tensor  # [R, max_len] bool: attention_mask of the slot positions over the cache positions
    key_kind: list[str]  # [max_len] "context" (cached before the pass), "this pass" or "empty"


def inference_mask(inputs: DraftInputs, max_len: int, request: int = 0) -> InferenceMask:
    """One request's drafter attention over its cache block, by ``models.kv_cache.attention_mask``.

    The engine's drafter pass masks by position: a query at position p sees every cache row
    of its request at a position ≤ p. Rows this pass writes (slot mapping ≥ 0) hold the new
    keys; rows below the first slot position hold the context cached by earlier passes.
    Padding writes nothing, so no query sees a padding key; a padding slot's own query (at
    position 0) runs but its output is never sampled.
    """
    R = inputs.rows_per_request
    rows = slice(request * R, (request + 1) * R)
    pos = inputs.positions[rows]
    visible = attention_mask(pos[None], torch.arange(max_len)[None])[0, 0]  # [R, max_len]
    slots = inputs.slot_mapping[rows]
    written = set((slots[slots >= 0] - request * max_len).tolist())
    first = int(pos[0])
    key_kind = ["this pass" if p in written else "context" if p < first else "empty" for p in range(max_len)]
    kinds = [r.kind for r in describe_draft_batch(inputs)[rows]]
    return InferenceMask(pos.tolist(), kinds, visible, key_kind)
