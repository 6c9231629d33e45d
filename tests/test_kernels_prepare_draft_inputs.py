"""prepare_draft_inputs: the worked example as a table, a slot-by-slot oracle, kernel parity."""
from __future__ import annotations

import os
from contextlib import contextmanager
from unittest import mock

import torch

# Triton chooses between compiling and interpreting when a kernel is decorated, that is
# when its module is imported, so this must run before triton and peagle_lab.kernels are
# imported. Without CUDA the interpreter lets CI run the Triton kernels on CPU tensors;
# with CUDA we leave it off so the gpu-marked tests run the compiled kernels.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
from hypothesis import given, strategies as st  # noqa: E402

from peagle_lab.kernels.prepare_draft_inputs import (  # noqa: E402
    DraftInputs,
    prepare_draft_inputs,
    prepare_draft_inputs_ref,
)

M = 49151  # a mask id no test token collides with by accident
FIELDS = ("input_ids", "positions", "slot_mapping", "is_masked", "hidden_mapping", "sample_indices")
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"

# (device, backend): the reference, the kernel under the interpreter, the compiled kernel.
TARGETS = [
    pytest.param("cpu", "torch", id="cpu-torch"),
    pytest.param("cpu", "triton", id="cpu-triton-interpreted", marks=pytest.mark.skipif(
        not INTERPRETING, reason="CUDA present: the interpreter is off, cuda-triton runs")),
    pytest.param("cuda", "triton", id="cuda-triton", marks=pytest.mark.gpu),
    pytest.param("cuda", "torch", id="cuda-torch", marks=pytest.mark.gpu),
]


def _run(device, backend, token_ids, positions, num_accepted, bonus_tokens, **kw) -> DraftInputs:
    t = [torch.as_tensor(x).to(device) for x in (token_ids, positions, num_accepted, bonus_tokens)]
    return prepare_draft_inputs(*t, backend=backend, **kw)


@contextmanager
def _poisoned_empty():
    """Make torch.empty return garbage, so an output slot the kernel forgets shows up."""
    real = torch.empty

    def poisoned(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(True if t.dtype == torch.bool else -12345)

    with mock.patch.object(torch, "empty", poisoned):
        yield


# --- the worked example and edge cases as a table ---------------------------------------

# Each row: tokens [c, T], start positions [c], n [c], bonus [c], K, max_len, then the
# expected input_ids / positions / slot_mapping / hidden_mapping / sample_indices per request.
TABLE = {
    "design-worked-example": (
        [[10, 11, 12, 13], [20, 21, 22, 23]], [5, 10], [2, 3], [100, 200], 3, 1000,
        [[11, 12, 100, M, M, 0], [21, 22, 23, 200, M, M]],
        [[5, 6, 7, 8, 9, 0], [10, 11, 12, 13, 14, 15]],
        [[5, 6, 7, 8, 9, -1], [1010, 1011, 1012, 1013, 1014, 1015]],
        [[0, 1, 2, -1, -1, -1], [4, 5, 6, 7, -1, -1]],
        [[2, 3, 4], [9, 10, 11]]),
    # all drafts rejected: only the bonus slot is context, the rest of the row is padding
    "all-rejected": (
        [[10, 11, 12, 13]], [5], [0], [100], 3, 1000,
        [[100, M, M, 0, 0, 0]], [[5, 6, 7, 0, 0, 0]], [[5, 6, 7, -1, -1, -1]],
        [[0, -1, -1, -1, -1, -1]], [[0, 1, 2]]),
    # K=1 is EAGLE-3's first pass: R = T, no mask slots
    "eagle3-k1": (
        [[10, 11, 12], [20, 21, 22]], [0, 7], [2, 1], [100, 200], 1, 1000,
        [[11, 12, 100], [21, 200, 0]], [[0, 1, 2], [7, 8, 0]],
        [[0, 1, 2], [1007, 1008, -1]], [[0, 1, 2], [3, 4, -1]], [[2], [4]]),
    # cache of 9 slots per request: position 9 and above get no KV write (-1)
    "cache-limit": (
        [[10, 11, 12, 13], [20, 21, 22, 23]], [5, 7], [2, 1], [100, 200], 3, 9,
        [[11, 12, 100, M, M, 0], [21, 200, M, M, 0, 0]],
        [[5, 6, 7, 8, 9, 0], [7, 8, 9, 10, 0, 0]],
        [[5, 6, 7, 8, -1, -1], [16, 17, -1, -1, -1, -1]],
        [[0, 1, 2, -1, -1, -1], [4, 5, -1, -1, -1, -1]],
        [[2, 3, 4], [7, 8, 9]]),
    # prefill: a padded prompt row (T=5 > K+1) with prompt lengths 5 and 2
    "prefill": (
        [[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]], [0, 0], [4, 1], [50, 60], 2, 1000,
        [[2, 3, 4, 5, 50, M], [7, 60, M, 0, 0, 0]],
        [[0, 1, 2, 3, 4, 5], [0, 1, 2, 0, 0, 0]],
        [[0, 1, 2, 3, 4, 5], [1000, 1001, 1002, -1, -1, -1]],
        [[0, 1, 2, 3, 4, -1], [5, 6, -1, -1, -1, -1]],
        [[4, 5], [7, 8]]),
}


@pytest.mark.parametrize("device,backend", TARGETS)
@pytest.mark.parametrize("case", TABLE)
def test_table(case, device, backend):
    tokens, start, n, bonus, K, max_len, ids, pos, slots, hidden, sample = TABLE[case]
    T = len(tokens[0])
    positions = torch.tensor(start)[:, None] + torch.arange(T)
    d = _run(device, backend, torch.tensor(tokens), positions, torch.tensor(n), torch.tensor(bonus),
             num_speculative_tokens=K, mask_token_id=M, max_len=max_len)
    assert (d.num_requests, d.rows_per_request) == (len(tokens), T + K - 1)
    assert torch.equal(d.input_ids.cpu(), torch.tensor(ids).flatten())
    assert torch.equal(d.positions.cpu(), torch.tensor(pos).flatten())
    assert torch.equal(d.slot_mapping.cpu(), torch.tensor(slots).flatten())
    assert torch.equal(d.hidden_mapping.cpu(), torch.tensor(hidden).flatten())
    assert torch.equal(d.sample_indices.cpu(), torch.tensor(sample).flatten())
    assert torch.equal(d.is_masked.cpu(), d.input_ids.cpu() == M)


# --- random ragged batches ---------------------------------------------------------------

@st.composite
def batches(draw):
    """A random verify (T = K+1) or prefill (any T) step, positions near the cache limit."""
    K = draw(st.integers(1, 16))
    c = draw(st.integers(1, 64))
    T = K + 1 if draw(st.booleans()) else draw(st.integers(1, K + 24))
    n = draw(st.lists(st.integers(0, T - 1), min_size=c, max_size=c))
    max_len = draw(st.integers(1, 2 * (T + K)))
    # Starts up to max_len put mask and context slots past the cache end often.
    start = draw(st.lists(st.integers(0, max_len), min_size=c, max_size=c))
    dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    token_ids = torch.randint(0, M, (c, T), generator=g, dtype=dtype)
    if draw(st.booleans()):  # a strided view, as a slice of the target's [c, T+...] buffer
        token_ids = torch.zeros(c, 2 * T, dtype=dtype)[:, ::2].copy_(token_ids)
    positions = (torch.tensor(start)[:, None] + torch.arange(T)).to(dtype)
    return dict(token_ids=token_ids, positions=positions,
                num_accepted=torch.tensor(n, dtype=dtype),
                bonus_tokens=torch.randint(0, M, (c,), generator=g, dtype=dtype),
                num_speculative_tokens=K, mask_token_id=M, max_len=max_len)


def _by_hand(token_ids, positions, num_accepted, bonus_tokens, *, num_speculative_tokens,
             mask_token_id, max_len):
    """The layout read literally off the spec, one slot at a time (slow, plainly right)."""
    K, (c, T) = num_speculative_tokens, token_ids.shape
    R = T + K - 1
    tok, pos, n_all, bonus = (x.tolist() for x in (token_ids, positions, num_accepted, bonus_tokens))
    out = {f: [] for f in FIELDS}
    for b in range(c):
        n = n_all[b]
        for i in range(R):
            if i < n:  # context: x[p+1] with the hidden state of p = positions[b, i]
                row = (tok[b][i + 1], pos[b][i], False, b * T + i)
            elif i == n:  # bonus
                row = (bonus[b], pos[b][n], False, b * T + n)
            elif i < n + K:  # mask slots, positions counting on
                row = (mask_token_id, pos[b][n] + i - n, True, -1)
            else:  # padding (rejected tokens)
                row = (0, 0, False, -1)
            live = i < n + K
            out["input_ids"].append(row[0])
            out["positions"].append(row[1])
            out["is_masked"].append(row[2])
            out["hidden_mapping"].append(row[3])
            out["slot_mapping"].append(b * max_len + row[1] if live and row[1] < max_len else -1)
        out["sample_indices"] += [b * R + n + j for j in range(K)]
    return {f: torch.tensor(v, dtype=torch.bool if f == "is_masked" else torch.int64)
            for f, v in out.items()}


def _check_definition(d: DraftInputs, batch: dict) -> None:
    """Properties that follow from the spec, independent of how the layout is computed."""
    c, T = batch["token_ids"].shape
    K, R = batch["num_speculative_tokens"], d.rows_per_request
    n = batch["num_accepted"].to(torch.int64)
    assert (d.num_requests, R) == (c, T + K - 1)
    for f in FIELDS:
        t = getattr(d, f)
        assert t.dtype == (torch.bool if f == "is_masked" else torch.int64), f
        assert t.shape == ((c * K,) if f == "sample_indices" else (c * R,)), f
    masked = d.is_masked.view(c, R)
    assert int(d.is_masked.sum()) == c * (K - 1)
    assert torch.equal(masked.sum(1), torch.full((c,), K - 1))
    assert bool((d.input_ids[d.is_masked] == M).all())
    # Each request has exactly K sample rows, inside its own rows: the bonus slot, then masks.
    sample = d.sample_indices.view(c, K)
    assert bool((sample // R == torch.arange(c)[:, None]).all())
    assert torch.equal(d.input_ids[sample[:, 0]], batch["bonus_tokens"].to(torch.int64))
    assert bool(d.is_masked[sample[:, 1:]].all())
    # Context rows (n+1 per request) point at their own request's target rows.
    has_hidden = d.hidden_mapping >= 0
    assert int(has_hidden.sum()) == int((n + 1).sum())
    src = d.hidden_mapping.view(c, R)
    in_own = (src // T == torch.arange(c)[:, None]) | (src == -1)
    assert bool(in_own.all())
    assert torch.equal(d.positions[has_hidden],
                       batch["positions"].reshape(-1).to(torch.int64)[d.hidden_mapping[has_hidden]])
    # Padding: the T-1-n rejected slots per request, token 0, position 0, no KV write.
    padding = ~has_hidden & ~d.is_masked
    assert int(padding.sum()) == int((T - 1 - n).sum())
    assert not bool(d.input_ids[padding].any()) and not bool(d.positions[padding].any())
    assert bool((d.slot_mapping[padding] == -1).all())
    # A KV write lands in the request's own cache at its position, else nothing is written.
    live = ~padding
    writes = d.slot_mapping >= 0
    owner = torch.arange(c).repeat_interleave(R)
    assert torch.equal(writes, live & (d.positions < batch["max_len"]))
    assert torch.equal(d.slot_mapping[writes], owner[writes] * batch["max_len"] + d.positions[writes])


def _assert_equal(got: DraftInputs, want) -> None:
    for f in FIELDS:
        w = want[f] if isinstance(want, dict) else getattr(want, f)
        assert torch.equal(getattr(got, f).cpu(), w.cpu()), f


@given(batch=batches())
def test_reference_matches_slot_by_slot_oracle(batch):
    d = prepare_draft_inputs_ref(**batch)
    _assert_equal(d, _by_hand(**batch))
    _check_definition(d, batch)


@pytest.mark.skipif(not INTERPRETING, reason="CUDA present: the interpreter is off, the gpu twin runs")
@given(batch=batches())
def test_interpreted_kernel_matches_reference(batch):
    with _poisoned_empty():
        d = prepare_draft_inputs(**batch, backend="triton")
    _assert_equal(d, prepare_draft_inputs_ref(**batch))
    _check_definition(d, batch)


@pytest.mark.gpu
@given(batch=batches())
def test_compiled_kernel_matches_reference(batch):
    on_gpu = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    _assert_equal(prepare_draft_inputs(**on_gpu, backend="triton"), prepare_draft_inputs_ref(**batch))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_no_host_sync_on_cuda(backend):
    tokens = torch.randint(0, M, (8, 4), device="cuda")
    positions = torch.arange(4, device="cuda").expand(8, 4) + 100
    n = torch.randint(0, 4, (8,), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host synchronisation raises
    try:
        prepare_draft_inputs(tokens, positions, n, tokens[:, 0], num_speculative_tokens=3,
                             mask_token_id=M, max_len=128, backend=backend)
    finally:
        torch.cuda.set_sync_debug_mode("default")


# --- validation ----------------------------------------------------------------------------

def _good(**over):
    kw = dict(token_ids=torch.zeros(2, 4, dtype=torch.int64), positions=torch.zeros(2, 4, dtype=torch.int64),
              num_accepted=torch.zeros(2, dtype=torch.int64), bonus_tokens=torch.zeros(2, dtype=torch.int64),
              num_speculative_tokens=3, mask_token_id=M, max_len=16)
    kw.update(over)
    return kw


@pytest.mark.parametrize("over,match", [
    (dict(token_ids=torch.zeros(8, dtype=torch.int64)), r"token_ids must be a 2-D tensor \[c, T\], got \[8\]"),
    (dict(token_ids=torch.zeros(2, 4)), r"token_ids must be an int32 or int64.*torch.float32"),
    (dict(token_ids=torch.zeros(2, 0, dtype=torch.int64)), r"T >= 1\), got T=0"),
    (dict(positions=torch.zeros(2, 5, dtype=torch.int64)), r"positions .* \[2, 4\], got shape \[2, 5\]"),
    (dict(num_accepted=torch.zeros(3, dtype=torch.int64)), r"num_accepted .* \[2\], got shape \[3\]"),
    (dict(bonus_tokens=torch.zeros(2, dtype=torch.int16)), r"bonus_tokens .*dtype torch.int16"),
    (dict(num_speculative_tokens=0), r"num_speculative_tokens must be an integer >= 1, got 0"),
    (dict(num_speculative_tokens=True), r"num_speculative_tokens .* got True"),
    (dict(num_speculative_tokens=2.5), r"num_speculative_tokens .* got 2.5"),
    (dict(mask_token_id=-1), r"mask_token_id must be an integer >= 0, got -1"),
    (dict(max_len=0), r"max_len must be an integer >= 1, got 0"),
    (dict(bonus_tokens=torch.zeros(2, dtype=torch.int64, device="meta")), r"one device, got \['cpu', 'meta'\]"),
    (dict(backend="cuda"), r"backend='cuda': expected 'auto', 'torch' or 'triton'"),
])
def test_bad_inputs_raise(over, match):
    with pytest.raises(ValueError, match=match):
        prepare_draft_inputs(**_good(**over))


def test_triton_on_cpu_without_interpreter_raises(monkeypatch):
    from peagle_lab.kernels import backend

    monkeypatch.setattr(backend, "interpreted", lambda: False)  # Triton imported for CUDA
    with pytest.raises(ValueError, match="tensors on cpu: expected CUDA tensors, or CPU tensors with Triton's interpreter on"):
        prepare_draft_inputs(**_good(), backend="triton")


def test_auto_on_a_cpu_is_the_reference(monkeypatch):
    from peagle_lab.kernels import backend

    monkeypatch.setattr(backend, "interpreted", lambda: False)
    assert backend.resolve("auto", "cpu") == "torch"
    _assert_equal(prepare_draft_inputs(**_good()), prepare_draft_inputs_ref(**_good()))
