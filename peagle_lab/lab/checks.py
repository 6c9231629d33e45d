"""The checks behind the notebooks' exercise cells: each fails with a hint until the answer is right.

An exercise cell (tagged ``exercise``) asks for a function or a number; the cell after it
calls ``check_<name>(answer)``. The check tries the answer on inputs of its own, compares
it with the worked solution in :mod:`peagle_lab.lab.exercises`, and either raises an
``AssertionError`` whose message says what is off and where to look, or prints one line
starting with ``correct:``. A stub still raising ``NotImplementedError`` gets a hint too.
Every check needs only what the notebook's first code cell imports, so a student can retry
one exercise without re-running the notebook.

| notebook | exercise                                        | check                          |
| -------- | ----------------------------------------------- | ------------------------------ |
| 1        | acceptance length of independent drafts         | :func:`check_acceptance_length` |
| 1        | tokens/s of each method from one step's parts    | :func:`check_tokens_per_second` |
| 2        | ``draft_row``: one request's slots, by hand       | :func:`check_draft_row`         |
| 2        | padding slots of a decode step                   | :func:`check_padding_slots`     |
| 3        | ``leaky_mask`` and what it does to partitioning  | :func:`check_leaky_mask`        |
| 3        | elements COD keeps at n = 1000, K_train = 8      | :func:`check_cod_kept`          |
| 4        | ``fill_draft_hidden`` as one gather              | :func:`check_fill_by_gather`    |
| 4        | bytes the fused kernels move at c = 64, K = 7    | :func:`check_moved_bytes`       |
| 5        | P-EAGLE ÷ EAGLE-3 TPS at equal acceptance        | :func:`check_speedup_at_equal_acceptance` |
| 6        | train a head of either method on the tiny data   | :func:`check_train_head`        |
"""
from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from . import exercises

__all__ = ["check_acceptance_length", "check_tokens_per_second", "check_draft_row", "check_padding_slots",
           "check_leaky_mask", "check_cod_kept", "check_fill_by_gather", "check_moved_bytes",
           "check_train_head", "check_speedup_at_equal_acceptance"]

_STUB = ("not answered yet: replace the line `raise NotImplementedError(\"your code here\")` in the exercise "
         "cell above with your code, run that cell, then this one")


def _call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; a stub or a wrong signature becomes an AssertionError with a hint."""
    if not callable(fn):
        raise AssertionError(f"expected a function, got {type(fn).__name__}: define it with `def` in the cell above")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise AssertionError(_STUB) from None
    except TypeError as e:
        raise AssertionError(f"calling your function failed ({e}): keep the signature the exercise gives") from None


def _correct(message: str) -> None:
    print(f"correct: {message}")


# ---------------------------------------------------------------- notebook 1
def check_acceptance_length(acceptance_length) -> None:
    """Check ``acceptance_length(alpha, k)``: tokens per step when each draft is accepted with probability alpha.

    >>> check_acceptance_length(exercises.expected_acceptance_length)
    correct: AL(0.8, K=9) = 4.46 against 3.69 at K=5: four more drafts buy 0.77 tokens per step
    >>> check_acceptance_length(lambda alpha, k: alpha * k)
    Traceback (most recent call last):
    AssertionError: with K = 0 nothing is drafted, yet every step still yields the target's own token: AL(alpha, 0) must be 1, yours is 0.0
    """
    if _call(acceptance_length, 0.5, 0) != 1:
        raise AssertionError("with K = 0 nothing is drafted, yet every step still yields the target's own token: "
                             f"AL(alpha, 0) must be 1, yours is {_call(acceptance_length, 0.5, 0)}")
    got = _call(acceptance_length, 1.0, 4)
    if not math.isclose(got, 5.0):
        raise AssertionError(f"with alpha = 1 every draft is accepted, so AL = K + 1 (K drafts and the bonus token): "
                             f"AL(1.0, 4) must be 5, yours is {got} (watch a division by 1 - alpha)")
    for alpha, k in ((0.8, 9), (0.8, 5), (0.5, 1), (0.0, 3), (0.95, 12)):
        got, want = _call(acceptance_length, alpha, k), exercises.expected_acceptance_length(alpha, k)
        if not math.isclose(got, want, rel_tol=1e-6):
            raise AssertionError(
                f"AL(alpha={alpha}, K={k}) should be {want:.4f}, yours is {got:.4f}. Draft i counts only if drafts "
                f"1..i were all accepted, with probability alpha^i; the bonus token always counts: "
                f"AL = 1 + alpha + alpha^2 + ... + alpha^K")
    al9, al5 = _call(acceptance_length, 0.8, 9), _call(acceptance_length, 0.8, 5)
    _correct(f"AL(0.8, K=9) = {al9:.2f} against {al5:.2f} at K=5: four more drafts buy {al9 - al5:.2f} tokens per step")


def check_tokens_per_second(tokens_per_second) -> None:
    """Check ``tokens_per_second(method, *, verify_ms, pass_ms, k, alpha, prep_ms=0.0)`` against the step model.

    >>> check_tokens_per_second(exercises.predicted_tokens_per_second)
    correct: with verify 10 ms, a 2 ms drafter pass, alpha = 0.5, K = 4: EAGLE-3 107.6 tok/s, P-EAGLE 161.5 tok/s
    """
    base = dict(verify_ms=10.0, pass_ms=2.0, k=4, alpha=0.5)
    got = {m: _call(tokens_per_second, m, **base) for m in ("eagle3", "peagle")}
    want = {m: exercises.predicted_tokens_per_second(m, **base) for m in ("eagle3", "peagle")}
    for m in got:
        if math.isclose(got[m], want[m] / 1000, rel_tol=1e-6):
            raise AssertionError(f"{m}: {got[m]:.4f} is tokens per millisecond; the times are in ms, so multiply by 1000")
    if math.isclose(got["eagle3"], got["peagle"], rel_tol=1e-9):
        raise AssertionError("EAGLE-3 and P-EAGLE came out equal at K = 4: EAGLE-3 pays K drafter passes per step, "
                             "P-EAGLE one")
    cases = [dict(base), dict(base, prep_ms=1.5), dict(verify_ms=20.0, pass_ms=3.0, k=9, alpha=0.8, prep_ms=0.5),
             dict(verify_ms=5.0, pass_ms=0.0, k=1, alpha=0.0)]
    for kw in cases:
        for m in ("eagle3", "peagle"):
            g, w = _call(tokens_per_second, m, **kw), exercises.predicted_tokens_per_second(m, **kw)
            if not math.isclose(g, w, rel_tol=1e-6):
                hint = ("include prep_ms in the step's time" if kw.get("prep_ms") else
                        "a step costs verify_ms + prep_ms + (passes x pass_ms) and yields AL tokens "
                        "(exercises.expected_acceptance_length); tokens/s = 1000 x AL / step_ms")
                args = ", ".join(f"{key}={v}" for key, v in kw.items())
                raise AssertionError(f"{m} with {args}: expected {w:.2f} tok/s, yours is {g:.2f}; {hint}")
    _correct(f"with verify 10 ms, a 2 ms drafter pass, alpha = 0.5, K = 4: EAGLE-3 {want['eagle3']:.1f} tok/s, "
             f"P-EAGLE {want['peagle']:.1f} tok/s")


# ---------------------------------------------------------------- notebook 2
_ROW_FIELDS = ("input_ids", "positions", "hidden_mapping", "is_masked")
_SLOT_RULES = {
    "context": "a context slot i carries the next token, token_ids[i + 1], with positions[i] and hidden source i: "
               "EAGLE's shift by one",
    "bonus": "the bonus slot (slot n, right after the n context slots) carries bonus_token with the last kept "
             "position, positions[n], and that position's hidden state (hidden source n)",
    "mask": "the K - 1 mask slots carry mask_token_id, no target row (hidden source -1) and is_masked True; their "
            "positions keep counting after the bonus slot's",
    "padding": "the K - n padding slots (the rejected drafts' slots) go to the end of the row: token 0, position 0, "
               "hidden source -1, not masked",
}


def _slot_kind(i: int, n: int, k: int) -> str:
    return "context" if i < n else "bonus" if i == n else "mask" if i < n + k else "padding"


def _rows_to_check():
    from .layout import random_decode_batch

    yield [50, 51, 52, 53, 54], [20, 21, 22, 23, 24], 1, 500, 4  # the exercise's request first
    for k, seed in ((3, 0), (1, 1), (6, 2), (2, 5), (5, 8)):
        b = random_decode_batch(1, k, seed=seed)
        for n in (int(b.num_accepted[0]), 0, k):  # a random count, then nothing and everything kept
            yield b.token_ids[0].tolist(), b.positions[0].tolist(), n, int(b.bonus_tokens[0]), k


def check_draft_row(draft_row) -> None:
    """Check ``draft_row(token_ids, positions, num_accepted, bonus_token, *, k, mask_token_id)``: one request's
    R = T + K - 1 slots, as lists ``input_ids``, ``positions``, ``hidden_mapping`` and ``is_masked``.

    Compared slot by slot with ``exercises.draft_row_by_hand`` (itself tested against
    ``prepare_draft_inputs``), on the exercise's request and on random ones.

    >>> check_draft_row(exercises.draft_row_by_hand)
    correct: the request's 8 slots (bonus at slot 1, mask positions 22-24, 3 padding slots) and 15 random requests' slots are the kernel's
    >>> def no_shift(token_ids, positions, num_accepted, bonus_token, *, k, mask_token_id):
    ...     row = exercises.draft_row_by_hand(token_ids, positions, num_accepted, bonus_token, k=k,
    ...                                       mask_token_id=mask_token_id)
    ...     return dict(row, input_ids=token_ids[:num_accepted] + row["input_ids"][num_accepted:])
    >>> check_draft_row(no_shift)
    Traceback (most recent call last):
    AssertionError: T = 5, K = 4, 1 kept, bonus 500: slot 0 (context) has input_ids 50, expected 51; a context slot i carries the next token, token_ids[i + 1], with positions[i] and hidden source i: EAGLE's shift by one
    """
    cases = list(_rows_to_check())
    for tokens, pos, n, bonus, k in cases:
        got = _call(draft_row, list(tokens), list(pos), n, bonus, k=k, mask_token_id=99)
        want = exercises.draft_row_by_hand(tokens, pos, n, bonus, k=k, mask_token_id=99)
        if not isinstance(got, dict) or any(f not in got for f in _ROW_FIELDS):
            raise AssertionError(f"return a dict with the lists {', '.join(_ROW_FIELDS)}; got "
                                 f"{sorted(got) if isinstance(got, dict) else type(got).__name__}")
        got = {f: got[f].tolist() if isinstance(got[f], torch.Tensor) else list(got[f]) for f in _ROW_FIELDS}
        where, R = f"T = {len(tokens)}, K = {k}, {n} kept, bonus {bonus}", len(tokens) + k - 1
        for f in _ROW_FIELDS:
            if len(got[f]) != R:
                raise AssertionError(f"{where}: {f} has {len(got[f])} slots, the request has R = T + K - 1 = {R} "
                                     "(every request gets the same number: n context, the bonus, K - 1 mask slots "
                                     "and K - n padding)")
        for i in range(R):
            for f in _ROW_FIELDS:
                if got[f][i] != want[f][i]:
                    kind = _slot_kind(i, n, k)
                    raise AssertionError(f"{where}: slot {i} ({kind}) has {f} {got[f][i]!r}, expected "
                                         f"{want[f][i]!r}; {_SLOT_RULES[kind]}")
    _correct(f"the request's 8 slots (bonus at slot 1, mask positions 22-24, 3 padding slots) and {len(cases) - 1} "
             "random requests' slots are the kernel's")


def check_padding_slots(padding) -> None:
    """Check the count of padding slots in a decode step with K = 4 and accepted counts ``[0, 4, 2, 1]``.

    >>> check_padding_slots(exercises.num_padding_slots([0, 4, 2, 1], k=4))
    correct: 9 of the batch's 32 slots are padding: K - n = 4, 0, 2, 3 per request, the rejected drafts; none writes KV (slot -1) or is sampled
    >>> check_padding_slots(7)
    Traceback (most recent call last):
    AssertionError: 7 is the number of drafts the requests kept; padding takes the slots of the drafts they rejected
    """
    accepted, k = [0, 4, 2, 1], 4
    want = exercises.num_padding_slots(accepted, k)
    if padding is None:
        raise AssertionError(_STUB)
    if isinstance(padding, bool) or not isinstance(padding, (int, float)) or not math.isfinite(padding) \
            or padding != int(padding):
        raise AssertionError(f"expected a whole number of slots, got {padding!r}")
    slots, live = len(accepted) * 2 * k, sum(n + k for n in accepted)
    hints = {
        sum(accepted): f"{sum(accepted)} is the number of drafts the requests kept; padding takes the slots of the "
                       "drafts they rejected",
        want - len(accepted): "the bonus slot does not use up a rejected draft's slot: after the n context slots come "
                              "the bonus slot and K - 1 mask slots, n + K live slots of R = 2K",
        len(accepted) * (k - 1): f"{len(accepted) * (k - 1)} is the number of mask slots, and those are live: they "
                                 "draft tokens 2..K",
        live: f"{live} is the number of live slots (n + K per request); padding is the rest of the R = 2K slots",
        slots: f"{slots} is every slot of the batch (R = 2K = 8 per request); only the unused ones are padding",
    }
    if padding != want:
        raise AssertionError(hints.get(int(padding), f"{int(padding)} is off: each request has R = T + K - 1 = 2K = 8 "
                                       "slots, of which n context, 1 bonus and K - 1 mask slots are live; count the "
                                       "rest, request by request"))
    _correct(f"{want} of the batch's {slots} slots are padding: K - n = {', '.join(str(k - n) for n in accepted)} per "
             "request, the rejected drafts; none writes KV (slot -1) or is sampled")


# ---------------------------------------------------------------- notebook 3
def _mask_cases():
    from ..train import CODConfig, sample_elements

    g = torch.Generator().manual_seed(0)
    for lengths in ((12,), (14, 9)):
        els = [sample_elements(n, torch.arange(n) >= 2, CODConfig(num_depths=3), g) for n in lengths]
        S = max(len(e) for e in els)
        anchor, depth = torch.zeros(len(els), S, dtype=torch.long), torch.zeros(len(els), S, dtype=torch.long)
        valid = torch.zeros(len(els), S, dtype=torch.bool)  # [B, S]: the second row is padded
        for b, e in enumerate(els):
            anchor[b, :len(e)], depth[b, :len(e)], valid[b, :len(e)] = e.anchor, e.depth, True
        yield anchor, depth, valid


def _mask_hint(q: tuple[int, int], key: tuple[int, int], shown: bool, valid: bool) -> str:
    (a, d), (ak, dk) = q, key
    pair = f"query (a={a}, d={d}) {'sees' if shown else 'does not see'} key (a'={ak}, d'={dk})"
    if shown and not valid:
        return f"{pair}, a padding key: padding stays hidden"
    if shown and ak > a:
        return f"{pair}, a later anchor's element: that is the future, hidden even with the leak"
    if shown and ak == a:
        return f"{pair}, a deeper draft of its own chain, which comes after it: keep d' <= d within the chain"
    if not shown and ak < a and dk > 0:
        return (f"{pair}: that is the leak asked for, earlier anchors' deeper elements must be visible "
                "(drop d' = 0 for a' < a)")
    return f"{pair}, which the correct mask shows (context d' = 0 with a' <= a, or its own chain up to d): keep it"


def check_leaky_mask(leaky_mask, partitions_still_match) -> None:
    """Check ``leaky_mask`` (``chain_mask`` with the deeper elements of earlier chains visible too), then the
    prediction ``partitions_still_match`` (True or False) with one run of the partitioned gradient check.

    >>> check_leaky_mask(exercises.leaky_chain_mask, False)  # doctest: +ELLIPSIS
    correct: your mask leaks as asked; one pass still trains, but with S = 2 segments the gradients differ from one pass's by ...
    """
    from ..train import chain_mask

    for anchor, depth, valid in _mask_cases():
        got = _call(leaky_mask, anchor, depth, anchor, depth, valid)
        want = exercises.leaky_chain_mask(anchor, depth, anchor, depth, valid)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shown = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise AssertionError(f"expected a boolean mask {tuple(want.shape)} ([B, 1, Q, S], as chain_mask), "
                                 f"got {shown}")
        got = got.bool()
        if torch.equal(got, chain_mask(anchor, depth, anchor, depth, valid)):
            raise AssertionError("that is the correct chain mask, nothing leaks: let a query also see the deeper "
                                 "elements (d' > 0) of earlier anchors (a' < a), i.e. drop d' = 0 for earlier anchors")
        bad = (got != want)[:, 0] & valid[:, :, None]  # [B, Q, S]: padding queries do not count
        if bad.any():
            b, q, s = bad.nonzero()[0].tolist()
            query, key = (int(anchor[b, q]), int(depth[b, q])), (int(anchor[b, s]), int(depth[b, s]))
            raise AssertionError(_mask_hint(query, key, bool(got[b, 0, q, s]), bool(valid[b, s])))
    if partitions_still_match is None:
        raise AssertionError(_STUB)
    if not isinstance(partitions_still_match, bool):
        raise AssertionError(f"partitions_still_match should be True or False, got {partitions_still_match!r}")
    from .train_walkthrough import partition_gradient_check

    err = partition_gradient_check((2,), mask=leaky_mask)[2]["max_grad_rel_error"]
    why = ("a segment recomputes only its own chains and earlier anchors' depth-0 context, not the other chains' "
           "drafts a leaky query reads")
    if partitions_still_match:
        raise AssertionError(f"your mask leaks as asked, but the prediction is off: with S = 2 segments the gradients "
                             f"differ from one pass's by {err:.2g} (relative); {why}")
    _correct(f"your mask leaks as asked; one pass still trains, but with S = 2 segments the gradients differ from one "
             f"pass's by {err:.2g} (relative): {why}. At inference those drafts do not exist yet")


def check_cod_kept(kept, without_cod) -> None:
    """Check the elements COD keeps for n = 1000 loss-bearing anchors at K_train = 8 (r = 0.7, r_min = 0.2), and
    the count without COD.

    >>> check_cod_kept(exercises.cod_kept_elements(1000, 8), 8 * 1000)
    correct: COD keeps 3374 of 8000 elements (42%): 1000, 700, 490, 343, 241, then 200 at each of depths 5-7
    >>> check_cod_kept(3373.1, 8000)
    Traceback (most recent call last):
    AssertionError: 3373.1 is close: a depth keeps a whole number of elements, ceil(n * max(r^d, r_min)), so round each depth up (240.1 -> 241) before adding
    """
    from ..train import CODConfig

    n, depths = 1000, 8
    quotas = [CODConfig(depths, 0.7, 0.2).quota(n, d) for d in range(depths)]  # [1000, 700, 490, 343, 241, 200, ...]
    want = exercises.cod_kept_elements(n, depths)
    for name, value in (("kept", kept), ("without_cod", without_cod)):
        if value is None:
            raise AssertionError(_STUB)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AssertionError(f"{name} should be a number of elements, got {value!r}")
    if without_cod != n * depths:
        raise AssertionError(f"without COD every anchor keeps every depth: n x K_train = {n} x {depths} elements "
                             f"(depths 0..{depths - 1}), not {without_cod}")
    if kept == want:
        _correct(f"COD keeps {want} of {n * depths} elements ({100 * want / (n * depths):.0f}%): "
                 f"{', '.join(map(str, quotas[:5]))}, then {quotas[5]} at each of depths 5-{depths - 1}")
        return
    unrounded = sum(n * max(0.7 ** d, 0.2) for d in range(depths))  # 3373.1
    no_floor = sum(n * 0.7 ** d for d in range(depths))  # 3141.2: r_min forgotten
    if math.floor(unrounded) <= kept < want:
        raise AssertionError(f"{kept} is close: a depth keeps a whole number of elements, ceil(n * max(r^d, r_min)), "
                             "so round each depth up (240.1 -> 241) before adding")
    hints = [(math.floor(no_floor) <= kept <= math.ceil(no_floor) + depths,
              "without the floor r_min: depth d keeps n * max(r^d, r_min), so depths 5-7 keep 200 each, not 168.1, "
              "117.6 and 82.4"),
             (kept == want + 200, f"K_train = {depths} means depths 0..{depths - 1}: one depth too many"),
             (kept in (want - n, want - n + 200), "depth 0 keeps every anchor: start the sum with n, then depths "
                                                 f"1..{depths - 1}"),
             (kept == n * depths, "that is every element, without COD")]
    raise AssertionError(next((h for cond, h in hints if cond),
                              f"{kept} is off: COD keeps all n = {n} anchors at depth 0 and ceil(n * max(r^d, r_min)) "
                              f"at depth d = 1..{depths - 1} (CODConfig.quota(n, d) gives one depth's count)"))


# ---------------------------------------------------------------- notebook 4
class _WhereShapes(TorchFunctionMode):
    """Record the shapes ``torch.where`` returns inside the block (to spot a where over [N, H])."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.where, torch.Tensor.where) and isinstance(out, torch.Tensor):
            self.shapes.append(tuple(out.shape))
        return out


def _fill_cases():
    from ..kernels.fill_draft_hidden import fill_draft_hidden_ref
    from .layout import random_decode_batch

    for c, k, dtype, seed in ((4, 3, torch.float32, 7), (1, 1, torch.float32, 1), (5, 6, torch.bfloat16, 3)):
        batch = random_decode_batch(c, k, seed=seed)
        d = batch.layout(k, mask_token_id=16, max_len=4096, backend="torch")
        g = torch.Generator().manual_seed(seed)
        hidden = torch.randn(c * (k + 1), 32, generator=g).to(dtype)  # [c*T, H]
        shared = torch.randn(32, generator=g).to(dtype)  # [H]
        yield (hidden, d.hidden_mapping, d.is_masked, shared), fill_draft_hidden_ref(hidden, d.hidden_mapping,
                                                                                    d.is_masked, shared)


def check_fill_by_gather(fill_by_gather) -> None:
    """Check ``fill_by_gather(hidden, hidden_mapping, is_masked, shared_hidden)``: bit-equal to the reference,
    with no ``torch.where`` over the ``[N, H]`` output.

    >>> check_fill_by_gather(exercises.fill_draft_hidden_by_gather)
    correct: bit-identical to fill_draft_hidden_ref on 3 ragged batches, float32 and bfloat16, one gather
    """
    for args, want in _fill_cases():
        with _WhereShapes() as seen:
            got = _call(fill_by_gather, *args)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            shown = f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else type(got).__name__
            raise AssertionError(f"expected a tensor {tuple(want.shape)} {want.dtype} ([N, H], the dtype of hidden), "
                                 f"got {shown}")
        bad = (got != want).any(-1)  # [N]
        if bad.any():
            mapping, masked = args[1], args[2]
            kind = ["mask slots (they take shared_hidden)" if masked[i] else
                    "padding slots (they are zeros)" if mapping[i] < 0 else
                    "context/bonus slots (they copy hidden[hidden_mapping])" for i in bad.nonzero()[:, 0].tolist()]
            raise AssertionError(f"{int(bad.sum())} of {len(bad)} rows differ from fill_draft_hidden_ref, "
                                 f"first among the {kind[0]}")
        wide = [s for s in seen.shapes if len(s) >= 2]
        if wide:
            raise AssertionError(f"right values, but torch.where produced a {list(wide[0])} tensor: choose the rows "
                                 "with one index vector [N] and gather them all at once (index_select on a table "
                                 "with two extra rows, shared_hidden and zeros)")
    _correct("bit-identical to fill_draft_hidden_ref on 3 ragged batches, float32 and bfloat16, one gather")


def check_moved_bytes(moved: float) -> None:
    """Check the estimate of the bytes the fused pair moves at c = 64, K = 7, H = 576, bf16, 3 accepted.

    Within 15 % of the full count passes: the hidden states are most of it.

    >>> check_moved_bytes(exercises.draft_batch_bytes([3] * 64, 7, 576))
    correct: 1.38 MB (the full count, index arrays included, is 1.38 MB)
    """
    want = exercises.draft_batch_bytes([3] * 64, 7, 576, hidden_bytes=2)
    if moved is None:
        raise AssertionError(_STUB)
    if not isinstance(moved, (int, float)) or isinstance(moved, bool):
        raise AssertionError(f"expected a number of bytes, got {type(moved).__name__}")
    out_rows = 64 * 14 * 576 * 2  # the [c*R, H] output alone
    if moved < 0.5 * want:
        raise AssertionError(f"{moved / 1e6:.3f} MB is too little: the fill writes c x R rows of H bfloat16 values "
                             f"(R = 2K = 14 slots per request: {out_rows / 1e6:.2f} MB alone) and reads the n + 1 "
                             "target rows each request uses")
    if moved > 1.15 * want:
        raise AssertionError(f"{moved / 1e6:.3f} MB is too much: count each row once, 2 bytes per bfloat16 value, "
                             "and only the n + 1 = 4 target rows each request uses (not all K + 1)")
    if moved < 0.85 * want:
        raise AssertionError(f"{moved / 1e6:.3f} MB is close but short: did you count both the rows read (n + 1 per "
                             "request, and shared_hidden) and the rows written (c x R)?")
    _correct(f"{moved / 1e6:.2f} MB (the full count, index arrays included, is {want / 1e6:.2f} MB)")


# ---------------------------------------------------------------- notebook 6
def check_train_head(train_head, *, steps: int = 20) -> None:
    """Check ``train_head(setup, method, steps)`` -> ``(drafter, TrainResult)`` on a short run of each method.

    Trains two one-layer heads for ``steps`` steps on ``train_walkthrough.tiny_setup()`` (a few
    seconds on a CPU).
    """
    from .train_walkthrough import tiny_setup

    setup = tiny_setup()
    for method in ("eagle3", "peagle"):
        out = _call(train_head, setup, method, steps)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise AssertionError(f"train_head should return (drafter, run), got {type(out).__name__}")
        drafter, run = out
        got_method = getattr(getattr(drafter, "config", None), "method", None)
        if got_method != method:
            raise AssertionError(f"train_head(setup, {method!r}, ...) returned a head for {got_method!r}: pass the "
                                 "method on to new_drafter and to TrainConfig")
        if getattr(run, "steps", None) != steps:
            raise AssertionError(f"asked for {steps} steps, the run reports {getattr(run, 'steps', None)}: "
                                 "return what Trainer(...).run() returns, with TrainConfig(steps=steps)")
        if not run.last_loss < run.first_loss:
            raise AssertionError(f"{method}: the loss did not fall ({run.first_loss:.3f} -> {run.last_loss:.3f}): "
                                 "train the drafter you return, on setup.train, with section 2's learning rate")
    _correct(f"both methods train ({steps} steps each: the loss falls, the heads are the methods asked for)")


# ---------------------------------------------------------------- notebook 5
def check_speedup_at_equal_acceptance(speedup_at_equal_acceptance) -> None:
    """Check ``speedup_at_equal_acceptance(peagle_row, eagle3_row)``: P-EAGLE ÷ EAGLE-3 TPS at equal AL.

    A row needs only ``verify_ms``, ``prep_ms`` and ``draft_ms`` (a sweep row has them all).

    >>> check_speedup_at_equal_acceptance(exercises.speedup_at_equal_acceptance)
    correct: verify 1.2 ms, drafting 0.22 ms (P-EAGLE) against 0.63 ms (EAGLE-3): 1.28x at equal acceptance
    """
    from types import SimpleNamespace as Row

    # Roughly the H200 K sweep's c = 1, K = 7 chat cells, rounded.
    peagle, eagle3 = Row(verify_ms=1.20, prep_ms=0.017, draft_ms=0.22), Row(verify_ms=1.22, prep_ms=0.014, draft_ms=0.63)
    got, want = _call(speedup_at_equal_acceptance, peagle, eagle3), exercises.speedup_at_equal_acceptance(peagle, eagle3)
    if not isinstance(got, (int, float)):
        raise AssertionError(f"return one number (P-EAGLE's TPS over EAGLE-3's), got {type(got).__name__}")
    if math.isclose(got, 1 / want, rel_tol=1e-3):
        raise AssertionError(f"{got:.3f} is EAGLE-3 over P-EAGLE: at equal acceptance both yield the same tokens per "
                             "step, so TPS is inversely proportional to step time; divide EAGLE-3's step by P-EAGLE's")
    if math.isclose(got, (1.22 + 0.014 + 0.63) / (1.20 + 0.017 + 0.22), rel_tol=1e-6):
        raise AssertionError("close, but each step used its own verify time: both verify the same K + 1 tokens "
                             "through the same target, so the two measurements differ only by noise; use their mean")
    if math.isclose(got, (1.21 + 0.63) / (1.21 + 0.22), rel_tol=1e-6):
        raise AssertionError("close, but the draft-batch preparation (prep_ms) is left out of the step")
    cases = [(peagle, eagle3), (Row(verify_ms=10.0, prep_ms=0.5, draft_ms=2.0), Row(verify_ms=10.0, prep_ms=0.5, draft_ms=7.5)),
             (Row(verify_ms=2.0, prep_ms=0.0, draft_ms=0.4), Row(verify_ms=2.2, prep_ms=0.0, draft_ms=0.4))]
    for p, e in cases:
        g, w = _call(speedup_at_equal_acceptance, p, e), exercises.speedup_at_equal_acceptance(p, e)
        if not math.isclose(g, w, rel_tol=1e-6):
            raise AssertionError(f"P-EAGLE {vars(p)} against EAGLE-3 {vars(e)}: expected {w:.3f}, yours is {g:.3f}. "
                                 "A step costs verify (the mean of the two) + prep + drafting")
    _correct(f"verify {(peagle.verify_ms + eagle3.verify_ms) / 2:.1f} ms, drafting {peagle.draft_ms:.2f} ms (P-EAGLE) "
             f"against {eagle3.draft_ms:.2f} ms (EAGLE-3): {want:.2f}x at equal acceptance")
