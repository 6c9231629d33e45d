"""The drafter's input batch, slot by slot: toy batches, a readable description, parity checks.

``prepare_draft_inputs`` returns six flat tensors (see its module docstring for the layout
sketch). The notebooks, figures and widgets want the same information one slot at a time,
with the slot's role spelled out:

```
 kind      token            hidden-state source          position        KV write
 context   x[i+1] (shifted) target row b*T + i           positions[b,i]  yes
 bonus     the new token    target row b*T + n           positions[b,n]  yes
 mask      mask_token_id    shared_hidden = fc(mask_hidden)  counts on   yes (below max_len)
 padding   0                zeros                        0               no (slot -1)
```
``describe_draft_batch`` produces those rows; ``format_draft_batch`` prints them;
``toy_decode_batch`` and ``random_decode_batch`` make verify outputs to lay out;
``compare_draft_inputs`` says, field by field, whether two layouts are identical;
``kernel_parity`` and ``time_draft_batch`` compare the Triton kernels with their references.
"""
from __future__ import annotations

from dataclasses import dataclass

import statistics
import time

import torch

from ..kernels.fill_draft_hidden import fill_draft_hidden
from ..kernels import backend as kernel_backend
from ..kernels.prepare_draft_inputs import DraftInputs, prepare_draft_inputs

__all__ = ["SlotRow", "SLOT_KINDS", "DecodeBatch", "describe_draft_batch", "format_draft_batch",
           "toy_decode_batch", "random_decode_batch", "compare_draft_inputs", "layout_toy_batch", "kernel_bench_summary",
           "kernel_parity", "time_draft_batch", "triton_runs_here"]

SLOT_KINDS = ("context", "bonus", "mask", "padding")
DRAFT_FIELDS = ("input_ids", "positions", "slot_mapping", "is_masked", "hidden_mapping", "sample_indices")


@dataclass(frozen=True)
class SlotRow:
    """One slot of the drafter batch, in plain Python values."""

    row: int  # flat row b*R + slot
    request: int  # b
    slot: int  # index inside the request's R slots
    kind: str  # one of SLOT_KINDS
    token: int  # input id fed to the drafter
    hidden_source: int  # flat target row whose (fc-projected) taps feed this slot; -1 for none
    position: int
    slot_mapping: int  # KV-cache slot written; -1 writes nothing
    is_masked: bool
    sampled: bool  # its output is one of the request's K drafts

    @property
    def hidden_label(self) -> str:
        """Where this slot's hidden state comes from, in words."""
        if self.hidden_source >= 0:
            return f"target row {self.hidden_source}"
        return "shared_hidden" if self.is_masked else "zeros"


@dataclass(frozen=True)
class DecodeBatch:
    """What a verify step hands to ``prepare_draft_inputs`` (one row of T = K+1 per request)."""

    token_ids: torch.Tensor  # [c, T] the previous new token, then the K drafts
    positions: torch.Tensor  # [c, T]
    num_accepted: torch.Tensor  # [c] drafts kept, 0..K
    bonus_tokens: torch.Tensor  # [c] the token the target produced after the kept drafts

    def layout(self, k: int, *, mask_token_id: int, max_len: int, backend: str = "auto") -> DraftInputs:
        """``prepare_draft_inputs`` on this batch with K = ``k`` draft slots."""
        return prepare_draft_inputs(self.token_ids, self.positions, self.num_accepted, self.bonus_tokens,
                                    num_speculative_tokens=k, mask_token_id=mask_token_id,
                                    max_len=max_len, backend=backend)


def describe_draft_batch(inputs: DraftInputs) -> list[SlotRow]:
    """One ``SlotRow`` per slot of ``inputs``, request-major.

    The bonus slot is the first sample row of its request; other rows with a hidden source
    are context, masked rows are mask slots, everything else is padding.

    >>> d = toy_decode_batch([2, 3], k=3).layout(3, mask_token_id=99, max_len=64)
    >>> [r.kind for r in describe_draft_batch(d)[:6]]
    ['context', 'context', 'bonus', 'mask', 'mask', 'padding']
    """
    c, R = inputs.num_requests, inputs.rows_per_request
    K = inputs.sample_indices.numel() // c if c else 0
    sampled = set(inputs.sample_indices.tolist())
    bonus_rows = set(inputs.sample_indices.view(c, K)[:, 0].tolist()) if c else set()
    cols = [getattr(inputs, f).tolist() for f in DRAFT_FIELDS[:5]]
    rows = []
    for r, (tok, pos, slot, masked, src) in enumerate(zip(*cols)):
        if r in bonus_rows:
            kind = "bonus"
        elif masked:
            kind = "mask"
        elif src >= 0:
            kind = "context"
        else:
            kind = "padding"
        rows.append(SlotRow(r, r // R, r % R, kind, tok, src, pos, slot, bool(masked), r in sampled))
    return rows


def format_draft_batch(inputs: DraftInputs, token_text=None) -> str:
    """A fixed-width table of ``describe_draft_batch(inputs)``; ``token_text(id)`` labels tokens.

    >>> print(format_draft_batch(toy_decode_batch([1], k=2).layout(2, mask_token_id=99, max_len=64)))
    req slot kind     token  hidden source    pos  kv slot masked sampled
      0    0 context     11  target row 0       5        5     no      no
      0    1 bonus      100  target row 1       6        6     no     yes
      0    2 mask        99  shared_hidden      7        7    yes     yes
      0    3 padding      0  zeros              0       -1     no      no
    """
    head = f"{'req':>3} {'slot':>4} {'kind':<8} {'token':>5}  {'hidden source':<15} {'pos':>4} {'kv slot':>8} " \
           f"{'masked':>6} {'sampled':>7}"
    lines = [head]
    for s in describe_draft_batch(inputs):
        tok = str(s.token) if token_text is None else repr(token_text(s.token))
        lines.append(f"{s.request:>3} {s.slot:>4} {s.kind:<8} {tok:>5}  {s.hidden_label:<15} {s.position:>4} "
                     f"{s.slot_mapping:>8} {'yes' if s.is_masked else 'no':>6} {'yes' if s.sampled else 'no':>7}")
    return "\n".join(lines)


def toy_decode_batch(accepted: list[int], k: int) -> DecodeBatch:
    """A readable decode batch: request b has tokens 10(b+1)+i at positions 5(b+1)+i.

    The bonus token of request b is 100(b+1). ``toy_decode_batch([2, 3], k=3)`` is the
    worked example of ``prepare_draft_inputs`` and notebook 2.

    Raises:
        ValueError: ``k < 1``, no requests, or an accepted count outside [0, k].
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k={k!r} must be an integer >= 1")
    if not accepted:
        raise ValueError("accepted must list one count per request (at least one request)")
    if any(not 0 <= int(n) <= k for n in accepted):
        raise ValueError(f"accepted={list(accepted)}: each count must lie in [0, K={k}]")
    c, T = len(accepted), k + 1
    b = torch.arange(c)[:, None]
    i = torch.arange(T)
    return DecodeBatch(token_ids=10 * (b + 1) + i, positions=5 * (b + 1) + i,
                       num_accepted=torch.tensor([int(n) for n in accepted]),
                       bonus_tokens=100 * torch.arange(1, c + 1))


def layout_toy_batch(accepted: list[int], k: int, *, mask_token_id: int = 99, max_len: int = 64,
                     backend: str = "auto") -> DraftInputs:
    """``toy_decode_batch(accepted, k)`` laid out with K = ``k`` (what the widget redraws)."""
    return toy_decode_batch(accepted, k).layout(k, mask_token_id=mask_token_id, max_len=max_len,
                                                backend=backend)


def random_decode_batch(c: int, k: int, *, seed: int = 0, vocab_size: int = 49152,
                        max_start: int = 1000, device: str | torch.device = "cpu") -> DecodeBatch:
    """A ragged random decode batch: random tokens, start positions and accepted counts."""
    g = torch.Generator().manual_seed(seed)
    T = k + 1
    start = torch.randint(0, max_start, (c, 1), generator=g)
    batch = DecodeBatch(token_ids=torch.randint(0, vocab_size, (c, T), generator=g),
                        positions=start + torch.arange(T),
                        num_accepted=torch.randint(0, T, (c,), generator=g),
                        bonus_tokens=torch.randint(0, vocab_size, (c,), generator=g))
    return DecodeBatch(*(t.to(device) for t in (batch.token_ids, batch.positions, batch.num_accepted,
                                                 batch.bonus_tokens)))


def compare_draft_inputs(a: DraftInputs, b: DraftInputs) -> dict[str, bool]:
    """For each of the six fields, whether ``a`` and ``b`` hold identical tensors.

    >>> d = layout_toy_batch([0, 2], k=2, backend="torch")
    >>> all(compare_draft_inputs(d, d).values())
    True
    """
    return {f: bool(torch.equal(getattr(a, f).cpu(), getattr(b, f).cpu())) for f in DRAFT_FIELDS}


def triton_runs_here(device: str | torch.device | None = None) -> bool:
    """Whether ``backend="triton"`` can run on ``device``: compiled on CUDA, interpreted on a CPU.

    False only where Triton is not installed (macOS, Windows); the notebooks then skip their
    kernel cells.
    """
    return kernel_backend.runs_here(device)


def _draft_batch(batch: DecodeBatch, k: int, hidden: torch.Tensor, shared: torch.Tensor, backend: str,
                 max_len: int = 4096) -> tuple[DraftInputs, torch.Tensor]:
    """Both draft-batch kernels, as the engine calls them: layout, then the hidden-state fill."""
    d = batch.layout(k, mask_token_id=16, max_len=max_len, backend=backend)
    return d, fill_draft_hidden(hidden, d.hidden_mapping, d.is_masked, shared, backend=backend)


def _random_hidden(c: int, k: int, hidden_size: int, dtype: torch.dtype, seed: int, device):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(c * (k + 1), hidden_size, generator=g).to(device=device, dtype=dtype)
    return hidden, torch.randn(hidden_size, generator=g).to(device=device, dtype=dtype)


def kernel_parity(num_batches: int = 20, *, max_c: int = 8, max_k: int = 8, hidden_size: int = 64,
                  seed: int = 0, backend: str = "triton", device: str | torch.device = "cpu") -> dict[str, str]:
    """Run the kernels and their references on random ragged batches; count identical outputs.

    Each batch draws c in [1, max_c], K in [1, max_k], ragged accepted counts, random max_len
    (so some positions get no KV slot) and float32 or bfloat16 hidden states.

    Returns:
        ``{field: "identical in m/num_batches batches"}`` for the six layout fields and the
        filled ``hidden`` (compared bit for bit).
    """
    g = torch.Generator().manual_seed(seed)
    same = dict.fromkeys(DRAFT_FIELDS + ("hidden",), 0)
    for i in range(num_batches):
        c, k = (int(torch.randint(1, m + 1, (1,), generator=g)) for m in (max_c, max_k))
        max_len = int(torch.randint(1, 1100, (1,), generator=g))
        dtype = (torch.float32, torch.bfloat16)[i % 2]
        batch = random_decode_batch(c, k, seed=seed + i, device=device)
        hidden, shared = _random_hidden(c, k, hidden_size, dtype, seed + i, device)
        ref = _draft_batch(batch, k, hidden, shared, "torch", max_len)
        out = _draft_batch(batch, k, hidden, shared, backend, max_len)
        for f, ok in compare_draft_inputs(ref[0], out[0]).items():
            same[f] += ok
        same["hidden"] += bool(torch.equal(ref[1], out[1]))
    return {f: f"identical in {n}/{num_batches} batches" for f, n in same.items()}


def time_draft_batch(c: int, k: int, *, backends: tuple[str, ...] = ("torch", "triton"), hidden_size: int = 576,
                     dtype: torch.dtype = torch.bfloat16, repeats: int = 20,
                     device: str | torch.device | None = None) -> dict[str, float]:
    """Median microseconds per draft-batch construction (layout + hidden fill) per backend.

    On CUDA this is ``triton.testing.do_bench`` (warm-up excluded, synchronised); on CPU a
    wall-clock median over ``repeats`` calls after one warm-up, where "triton" means the
    interpreter: a correctness tool, thousands of times slower than compiled code.
    """
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    batch = random_decode_batch(c, k, seed=0, device=device)
    hidden, shared = _random_hidden(c, k, hidden_size, dtype, 0, device)
    out = {}
    for backend in backends:
        def call():
            return _draft_batch(batch, k, hidden, shared, backend)
        if device.type == "cuda":
            from triton.testing import do_bench

            out[backend] = 1000.0 * do_bench(call, return_mode="median")
            continue
        call()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        out[backend] = 1e6 * statistics.median(times)
    return out


def kernel_bench_summary(results: dict, dtype: str = "bf16") -> dict[str, tuple[float, float]]:
    """The range over c and K of each timing in ``scripts/bench/bench_kernels.py``'s JSON, for one dtype.

    Returns:
        ``{"reference_launches", "fused_launches", "fused_graph_us", "reference_graph_us", "speedup_graph",
        "fused_eager_us", "reference_eager_us", "speedup_eager": (min, max)}``.

    >>> r = dict(dtype="bf16", reference_launches=46, fused_launches=2, fused_graph_us=3.0, reference_graph_us=60.0,
    ...          speedup_graph=20.0, fused_eager_us=100.0, reference_eager_us=500.0, speedup_eager=5.0)
    >>> kernel_bench_summary({"rows": [r, dict(r, fused_graph_us=4.0)]})["fused_graph_us"]
    (3.0, 4.0)
    """
    rows = [r for r in results["rows"] if r["dtype"] == dtype]
    if not rows:
        raise ValueError(f"no rows of dtype {dtype!r}; the file has {sorted({r['dtype'] for r in results['rows']})}")
    keys = ("reference_launches", "fused_launches", "fused_graph_us", "reference_graph_us", "speedup_graph",
            "fused_eager_us", "reference_eager_us", "speedup_eager")
    return {k: (min(r[k] for r in rows), max(r[k] for r in rows)) for k in keys}
