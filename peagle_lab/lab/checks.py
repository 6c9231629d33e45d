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
| 1        | ``verify_by_hand``: the tokens a step gains       | :func:`check_verify_by_hand`    |
| 1        | each method's drafter passes and slot-layers     | :func:`check_drafter_work`      |
| 2        | ``draft_row``: one request's slots, by hand       | :func:`check_draft_row`         |
| 2        | padding slots of a decode step                   | :func:`check_padding_slots`     |
| 3        | ``sees``: the chain mask; what a causal one leaks | :func:`check_chain_mask`        |
| 3        | elements COD keeps at n = 1000, K_train = 8      | :func:`check_cod_kept`          |
| 4        | ``fill_draft_hidden`` as one gather              | :func:`check_fill_by_gather`    |
| 4        | bytes the fused kernels move at c = 64, K = 7    | :func:`check_moved_bytes`       |
| 5        | P-EAGLE ÷ EAGLE-3 TPS at equal acceptance        | :func:`check_speedup_at_equal_acceptance` |
| 6        | which head's agreement falls first with depth    | :func:`check_weakest_depth`     |
"""
from __future__ import annotations

import functools
import math

import torch
from torch.overrides import TorchFunctionMode

from . import exercises

__all__ = ["check_verify_by_hand", "check_drafter_work", "check_draft_row", "check_padding_slots",
           "check_chain_mask", "check_cod_kept", "check_fill_by_gather", "check_moved_bytes",
           "check_weakest_depth", "check_speedup_at_equal_acceptance"]

_STUB = ("not answered yet: write your answer in the exercise cell above, where it says \"your code here\", run "
         "that cell, then this one")


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


# ---------------------------------------------------------------- unanswered: print, hand on the worked answer
# The answers each check hands on while its exercise is unanswered, so that "Run All" on a student copy reaches
# the last cell. A check with no entry here hands the student's stub back unchanged.
_WORKED = {
    "check_verify_by_hand": lambda: exercises.verify_by_hand,
    "check_drafter_work": lambda: exercises.drafter_work,
    "check_draft_row": lambda: exercises.draft_row_by_hand,
    "check_padding_slots": lambda: exercises.num_padding_slots([0, 4, 2, 1], k=4),
    "check_chain_mask": lambda: (exercises.chain_sees, exercises.leaked_input_token(1, 2)),
    "check_cod_kept": lambda: (exercises.cod_kept_elements(1000, 8), 8 * 1000),
    "check_fill_by_gather": lambda: exercises.fill_draft_hidden_by_gather,
    "check_moved_bytes": lambda: exercises.draft_batch_bytes([3] * 64, 7, 576),
    "check_speedup_at_equal_acceptance": lambda: exercises.speedup_at_equal_acceptance,
    "check_weakest_depth": lambda: exercises.weakest_depth(exercises.shipped_depth_agreement()),
}


def _unanswered(error: BaseException) -> bool:
    return isinstance(error, NotImplementedError) or (isinstance(error, AssertionError) and str(error) == _STUB)


def _hands_on_answers(check):
    """Wrap ``check`` so that it returns the answers it checked, and an unanswered exercise does not stop the notebook.

    A correct answer returns the answer (a tuple for several), so the check cell reads
    ``answer = checks.check_x(answer)``. A wrong answer raises the check's ``AssertionError``
    with its hint. An unanswered one (the stub still raises ``NotImplementedError``, or a value
    is still ``None``) prints a line starting ``not answered yet:`` and returns the worked
    answer from :mod:`peagle_lab.lab.exercises`, so the cells below still run.
    """
    @functools.wraps(check)
    def wrapper(*answers, **kwargs):
        try:
            check(*answers, **kwargs)
        except (AssertionError, NotImplementedError) as e:
            if not _unanswered(e):
                raise
            worked = _WORKED.get(check.__name__)
            print(f"{_STUB}. Until then the cells below go on with "
                  + ("the worked answer (peagle_lab.lab.exercises)" if worked else "your stub"))
            return worked() if worked else (answers[0] if len(answers) == 1 else answers)
        return answers[0] if len(answers) == 1 else answers
    return wrapper


# ---------------------------------------------------------------- notebook 1
def _verify_cases():
    yield [5, 6, 7], [5, 6, 7, 8]  # all accepted: the bonus token
    yield [5, 9, 7], [5, 6, 7, 8]  # draft 2 rejected; draft 3 matches but must not count
    yield [9, 6, 7], [5, 6, 7, 8]  # the first draft rejected
    yield [], [4]  # K = 0: the target's own token
    g = torch.Generator().manual_seed(0)
    for k in (1, 2, 4, 6) * 5:
        choices = torch.randint(0, 3, (k + 1,), generator=g).tolist()
        yield [c if torch.rand((), generator=g) < 0.7 else (c + 1) % 3 for c in choices[:k]], choices


def _verify_hint(drafts: list[int], choices: list[int], got: list, want: list[int]) -> str:
    n = len(want) - 1  # accepted drafts
    case = f"drafts {drafts} against the target's choices {choices}: expected {want}, yours is {got}"
    if got == want[:-1]:
        return (f"{case}. Every step also gains the target's own token: at the first mismatch it replaces the rejected "
                "draft (recovered), after K accepted drafts it comes free (bonus). The same verify pass computed it")
    if len(got) == n + 1 and got[:n] == want[:n] and n < len(drafts) and got[n] == drafts[n]:
        return (f"{case}. Draft {n + 1} ({drafts[n]}) is rejected: the target chose {choices[n]} there, and a step "
                "gains the target's token, never a rejected draft")
    if len(got) > len(want):
        return (f"{case}. Verification stops at the first mismatch: every later draft was drafted after a token the "
                "target did not choose, so it is discarded even where it happens to equal the target's choice")
    return (f"{case}. target_choices[i] is the target's token after verify slot i; slot 0 holds the new token, so "
            "target_choices[0] checks drafts[0], target_choices[1] checks drafts[1], and target_choices[K] is the bonus")


def check_verify_by_hand(verify_by_hand) -> None:
    """Check ``verify_by_hand(drafts, target_choices)``: the tokens one request gains from greedy verification.

    >>> _ = check_verify_by_hand(exercises.verify_by_hand)
    correct: drafts [5, 9, 7] against the target's [5, 6, 7, 8] gain [5, 6]: draft 1 accepted, 6 recovered for draft 2, and draft 3 never counts although it matches. 24 cases agree
    >>> _ = check_verify_by_hand(lambda drafts, choices: [d for d, c in zip(drafts, choices) if d == c])
    Traceback (most recent call last):
    AssertionError: drafts [5, 6, 7] against the target's choices [5, 6, 7, 8]: expected [5, 6, 7, 8], yours is [5, 6, 7]. Every step also gains the target's own token: at the first mismatch it replaces the rejected draft (recovered), after K accepted drafts it comes free (bonus). The same verify pass computed it
    """
    cases = list(_verify_cases())
    for drafts, choices in cases:
        got = _call(verify_by_hand, list(drafts), list(choices))
        if isinstance(got, torch.Tensor):
            got = got.tolist()
        if not isinstance(got, (list, tuple)):
            raise AssertionError(f"return the list of tokens the step gains, got {type(got).__name__}")
        got, want = [int(t) for t in got], exercises.verify_by_hand(drafts, choices)
        if got != want:
            raise AssertionError(_verify_hint(drafts, choices, got, want))
    _correct(f"drafts [5, 9, 7] against the target's [5, 6, 7, 8] gain [5, 6]: draft 1 accepted, 6 recovered for "
             f"draft 2, and draft 3 never counts although it matches. {len(cases)} cases agree")


_WORK_HINTS = {
    "passes": {"eagle3": "EAGLE-3 drafts one token per pass, each pass feeding back its own output: K passes",
               "peagle": "P-EAGLE drafts all K tokens in one pass: the mask slots stand in for the drafts not made yet"},
    "k_slots": {"eagle3": "EAGLE-3's first pass carries the whole verified row, T = K + 1 slots (context, bonus and "
                          "padding), like P-EAGLE's without the mask slots; only its K - 1 later passes carry one token",
                "peagle": "P-EAGLE's pass carries every slot of the request's row, not only the K it samples: R = T + "
                          "K - 1 = 2K (n context slots, the bonus slot, K - 1 mask slots, K - n padding slots)"},
    "no_layers": "each slot runs through every layer of the head: multiply by the number of layers",
}


def check_drafter_work(drafter_work) -> None:
    """Check ``drafter_work(method, *, k, layers)`` -> ``(passes, slot_layers)`` for one request in a decode step.

    >>> _ = check_drafter_work(exercises.drafter_work)
    correct: at K = 5, EAGLE-3 (1 layer) runs 5 passes and 10 slot-layers, P-EAGLE (4 layers) 1 pass and 40 slot-layers: a fifth of the passes, four times the arithmetic
    >>> _ = check_drafter_work(lambda method, *, k, layers: (k if method == "eagle3" else 1, k * layers))
    Traceback (most recent call last):
    AssertionError: eagle3 at K = 5 with 1 layer(s): 5 slot-layers, expected 10. EAGLE-3's first pass carries the whole verified row, T = K + 1 slots (context, bonus and padding), like P-EAGLE's without the mask slots; only its K - 1 later passes carry one token
    """
    for method, k, layers in (("eagle3", 5, 1), ("peagle", 5, 4), ("peagle", 3, 2), ("eagle3", 7, 2),
                              ("eagle3", 1, 1), ("peagle", 1, 1)):
        got = _call(drafter_work, method, k=k, layers=layers)
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise AssertionError(f"return two numbers, (passes, slot_layers); got {got!r}")
        (passes, work), (want_passes, want_work) = got, exercises.drafter_work(method, k=k, layers=layers)
        where = f"{method} at K = {k} with {layers} layer(s)"
        if passes != want_passes:
            raise AssertionError(f"{where}: {passes} passes, expected {want_passes}. {_WORK_HINTS['passes'][method]}")
        if work != want_work:
            hint = (_WORK_HINTS["no_layers"] if layers > 1 and work == want_work // layers else
                    _WORK_HINTS["k_slots"][method] if work == k * layers else
                    "count the slots of every pass (notebook 2: R = T + K - 1 for P-EAGLE's one pass, T = K + 1 for "
                    "EAGLE-3's first, one token for each later pass), times the layers each slot runs through")
            raise AssertionError(f"{where}: {work} slot-layers, expected {want_work}. {hint}")
    _correct("at K = 5, EAGLE-3 (1 layer) runs 5 passes and 10 slot-layers, P-EAGLE (4 layers) 1 pass and 40 "
             "slot-layers: a fifth of the passes, four times the arithmetic")


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

    >>> _ = check_draft_row(exercises.draft_row_by_hand)
    correct: the request's 8 slots (bonus at slot 1, mask positions 22-24, 3 padding slots) and 15 random requests' slots are the kernel's
    >>> def no_shift(token_ids, positions, num_accepted, bonus_token, *, k, mask_token_id):
    ...     row = exercises.draft_row_by_hand(token_ids, positions, num_accepted, bonus_token, k=k,
    ...                                       mask_token_id=mask_token_id)
    ...     return dict(row, input_ids=token_ids[:num_accepted] + row["input_ids"][num_accepted:])
    >>> _ = check_draft_row(no_shift)
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

    >>> _ = check_padding_slots(exercises.num_padding_slots([0, 4, 2, 1], k=4))
    correct: 9 of the batch's 32 slots are padding: K - n = 4, 0, 2, 3 per request, the rejected drafts; none writes KV (slot -1) or is sampled
    >>> _ = check_padding_slots(7)
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
    for n in (12, 14, 9):
        e = sample_elements(n, torch.arange(n) >= 2, CODConfig(num_depths=4), g)
        yield list(zip(e.anchor.tolist(), e.depth.tolist()))


# Pairs tried first, in the order their hints teach best: one of each kind of key.
_FIRST_PAIRS = (((2, 1), (2, 1)), ((3, 2), (1, 0)), ((1, 2), (1, 1)), ((1, 1), (1, 2)), ((1, 0), (2, 0)),
                ((1, 2), (3, 0)), ((1, 2), (2, 0)), ((3, 1), (1, 1)), ((3, 0), (1, 2)))


def _pair_reason(q: tuple[int, int], key: tuple[int, int]) -> str:
    (a, d), (ak, dk) = q, key
    if (ak, dk) == (a, d):
        return "a query always sees its own key: at inference a slot reads the key and value it has just written"
    if ak == a:
        return ("an earlier slot of its own chain: at inference chain a's slots 0..d are written by the same pass, "
                "and slot d attends to them (to their states, not to tokens drafted from them)" if dk < d else
                "a deeper element of its own chain is a later slot of the pass: the future")
    if dk == 0 and ak < a:
        return "depth-0 elements of anchors up to a are the context, cached by earlier passes"
    if dk == 0 and ak <= a + d:
        return (f"key ({ak}, 0) sits at position {ak}, not after the query's position {a + d}, yet it embeds the "
                f"true token x[{ak + 1}], which chain {a} drafts at depth {ak - a - 1}. At inference that token is "
                "being drafted by this same pass, so the query cannot have it: positions alone do not decide")
    if dk == 0:
        return "a later anchor's context is the future"
    return (f"({ak}, {dk}) is a draft slot of chain {ak}. At inference each chain is drafted in its own pass, after "
            "everything before it is verified: the cache holds depth-0 context only, never another chain's drafts")


def check_chain_mask(sees, leaked_token) -> None:
    """Check ``sees(a, d, a_key, d_key)`` against ``train.chain_visible`` on COD layouts, then ``leaked_token``:
    the index i of x[i], the input token of key (3, 0), which a position-causal mask would show query (1, 2).

    >>> _ = check_chain_mask(exercises.chain_sees, exercises.leaked_input_token(1, 2))  # doctest: +ELLIPSIS
    correct: your rule is the chain mask on 3 COD layouts (... query-key pairs). Key (3, 0) embeds x[4], ...
    >>> _ = check_chain_mask(lambda a, d, ak, dk: ak + dk <= a + d, None)  # causal by position
    Traceback (most recent call last):
    AssertionError: query (1, 2) sees key (3, 0), which it must not: key (3, 0) sits at position 3, not after the query's position 3, yet it embeds the true token x[4], which chain 1 drafts at depth 1. At inference that token is being drafted by this same pass, so the query cannot have it: positions alone do not decide
    """
    layouts = list(_mask_cases())
    pairs = list(_FIRST_PAIRS) + [(q, key) for els in layouts for q in els for key in els]
    for q, key in pairs:
        got, want = _call(sees, *q, *key), exercises.chain_sees(*q, *key)
        if not (isinstance(got, (bool, int)) or type(got).__name__ in ("bool", "bool_")  # numpy's bool too
                or (isinstance(got, torch.Tensor) and got.numel() == 1)):
            raise AssertionError(f"sees({q[0]}, {q[1]}, {key[0]}, {key[1]}) returned {got!r}: return True or False")
        if bool(got) != want:
            raise AssertionError(f"query {q} {'sees' if got else 'does not see'} key {key}, which it "
                                 f"{'must not' if got else 'must'}: {_pair_reason(q, key)}")
    if leaked_token is None:
        raise AssertionError(_STUB)
    if isinstance(leaked_token, bool) or not isinstance(leaked_token, int):
        raise AssertionError(f"leaked_token is the index i of the token x[i], a whole number; got {leaked_token!r}")
    hints = {5: "x[5] is what query (1, 2) must predict (element (a, d) predicts x[a + d + 2]); the key before it in "
                "position carries the token one earlier",
             3: "element (a', 0) embeds the next token x[a' + 1] with the target's state at a' (EAGLE's shift by one, "
                "notebook 2), not x[a']"}
    if leaked_token != 4:
        raise AssertionError(hints.get(leaked_token, f"x[{leaked_token}] is off: element (a', 0) embeds x[a' + 1], and "
                                       "here a' = 3"))
    _correct(f"your rule is the chain mask on {len(layouts)} COD layouts ({len(pairs)} query-key pairs). Key (3, 0) "
             "embeds x[4], the token chain 1 drafts at depth 1, right before query (1, 2). At inference that draft "
             "comes out of the same pass, so mask slot 2 cannot see it (slot 1 holds only the mask embedding and "
             "h_shared); a position-causal training mask would teach the head to lean on a token it never has")


def check_cod_kept(kept, without_cod) -> None:
    """Check the elements COD keeps for n = 1000 loss-bearing anchors at K_train = 8 (r = 0.7, r_min = 0.2), and
    the count without COD.

    >>> _ = check_cod_kept(exercises.cod_kept_elements(1000, 8), 8 * 1000)
    correct: COD keeps 3374 of 8000 elements (42%): 1000, 700, 490, 343, 241, then 200 at each of depths 5-7
    >>> _ = check_cod_kept(3373.1, 8000)
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

    >>> _ = check_fill_by_gather(exercises.fill_draft_hidden_by_gather)
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

    >>> _ = check_moved_bytes(exercises.draft_batch_bytes([3] * 64, 7, 576))
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


# ---------------------------------------------------------------- notebook 5
def _k_sweep_rows():
    """Pairs of (P-EAGLE, EAGLE-3) rows of the committed H200 K sweep at the same (workload, c, K), as namespaces."""
    import json
    from types import SimpleNamespace as Row

    from ..provenance import REPO

    path = REPO / "docs" / "results" / "h200" / "k_scaling" / "bench.json"
    if not path.exists():  # an installed package without the repository's docs: the check's own rows suffice
        return []
    rows = {}
    for r in json.loads(path.read_text())["rows"]:
        if r["method"] in ("peagle", "eagle3") and r.get("verify_ms") is not None:
            rows.setdefault((r["workload"], r["concurrency"], r["k"]), {})[r["method"]] = Row(**r)
    return [(cell, pair["peagle"], pair["eagle3"]) for cell, pair in sorted(rows.items()) if len(pair) == 2]


def _speedup_hint(got: float, p, e) -> str:
    """Why ``got`` is not P-EAGLE's speed-up at equal acceptance for rows ``p``, ``e``."""
    want = exercises.speedup_at_equal_acceptance(p, e)
    if math.isclose(got, 1 / want, rel_tol=1e-3):
        return ("that is EAGLE-3 over P-EAGLE: at equal acceptance both yield the same tokens per step, so TPS goes "
                "as 1 / step time; divide EAGLE-3's step by P-EAGLE's")
    if math.isclose(got, e.draft_ms / p.draft_ms, rel_tol=1e-6):
        return ("that compares the drafting alone; every step of both methods also pays the target's verify pass "
                "and the draft-batch preparation, which dilute the cheaper drafting")
    al = getattr(p, "acceptance_length", None), getattr(e, "acceptance_length", None)
    if all(al) and math.isclose(got, (al[0] / p.step_ms) / (al[1] / e.step_ms), rel_tol=1e-6):
        return ("that is the measured ratio, acceptance included; at equal acceptance both heads yield the same "
                "tokens per step, so the acceptance lengths cancel and only the step times remain")
    return (f"expected {want:.3f}: a step costs the verify pass + prep_ms + draft_ms (either method's verify time, "
            "or their mean: both verify the same K + 1 tokens)")


def check_speedup_at_equal_acceptance(speedup_at_equal_acceptance) -> None:
    """Check ``speedup_at_equal_acceptance(peagle_row, eagle3_row)``: P-EAGLE ÷ EAGLE-3 TPS at equal AL.

    Any sound verify convention passes (``exercises.speedup_conventions``: the mean of the two
    verify times, each row's own, either row's for both, or the whole step). Tried on rows of
    its own and on every (workload, c, K) of the committed H200 K sweep.

    >>> _ = check_speedup_at_equal_acceptance(exercises.speedup_at_equal_acceptance)  # doctest: +ELLIPSIS
    correct: at equal acceptance P-EAGLE would reach ...x EAGLE-3's tokens/s at c = 1, K = 7 on chat ...
    """
    from types import SimpleNamespace as Row

    cases = [(("own", 1, 4), Row(verify_ms=10.0, prep_ms=0.5, draft_ms=2.0), Row(verify_ms=10.0, prep_ms=0.5, draft_ms=7.5)),
             (("own", 1, 4), Row(verify_ms=2.0, prep_ms=0.0, draft_ms=0.4), Row(verify_ms=2.2, prep_ms=0.1, draft_ms=1.6))]
    sweep = _k_sweep_rows()
    for cell, p, e in sweep + cases:  # the sweep's rows first: they have acceptance, so every hint can fire
        got = _call(speedup_at_equal_acceptance, p, e)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise AssertionError(f"return one number (P-EAGLE's TPS over EAGLE-3's), got {type(got).__name__}")
        ok = exercises.speedup_conventions(p, e).values()
        if not min(ok) * (1 - 1e-6) <= got <= max(ok) * (1 + 1e-6):
            where = "the check's own rows" if cell[0] == "own" else f"the H200 K sweep, {cell[0]}, c = {cell[1]}, K = {cell[2]}"
            raise AssertionError(f"{where}: yours is {got:.3f}; {_speedup_hint(got, p, e)}")
    at = next(((p, e) for (w, c, k), p, e in sweep if (w, c, k) == ("chat", 1, 7)), None)
    if at is None:
        _correct("P-EAGLE's speed-up at equal acceptance is right on the check's rows")
        return
    got = _call(speedup_at_equal_acceptance, *at)
    _correct(f"at equal acceptance P-EAGLE would reach {got:.2f}x EAGLE-3's tokens/s at c = 1, K = 7 on chat "
             f"(drafting {at[0].draft_ms:.2f} against {at[1].draft_ms:.2f} ms); right on all {len(sweep)} cells "
             "of the H200 K sweep")


# ---------------------------------------------------------------- notebook 6
def check_weakest_depth(head, depth, reason) -> None:
    """Check the prediction: which shipped head's held-out agreement falls most with depth, its weakest depth, and why.

    Checked against the shipped heads' ``summary.json`` (``exercises.shipped_depth_agreement``);
    ``reason`` is a key of ``exercises.DEPTH_REASONS``.

    >>> _ = check_weakest_depth("peagle", 7, "a")  # doctest: +ELLIPSIS
    correct: P-EAGLE's agreement falls from 0.84 at depth 0 to 0.48 at depth 7, EAGLE-3's only from 0.80 to 0.76: ...
    >>> _ = check_weakest_depth("peagle", 7, "c")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    AssertionError: distance alone does not explain it: EAGLE-3's depth 6 also predicts 7 tokens ahead ...
    """
    acc = exercises.shipped_depth_agreement()
    want_head, want_depth, _ = exercises.weakest_depth(acc)
    if head is None or depth is None or reason is None:
        raise AssertionError(_STUB)
    p, e = acc["peagle"], acc["eagle3"]
    if head not in acc:
        raise AssertionError(f"head should be 'eagle3' or 'peagle', got {head!r}")
    if head != want_head:
        raise AssertionError(f"EAGLE-3 drafts one token a pass and feeds each draft back: its depth d sees the d "
                             "tokens drafted before it, in training (training-time test) as at inference. So its "
                             f"agreement falls only from {e[0]:.2f} at depth 0 to {min(e):.2f}. Which head's deeper "
                             "slots know no more than its first?")
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth < len(p):
        raise AssertionError(f"depth should be a whole number from 0 to {len(p) - 1}, got {depth!r}")
    if depth != want_depth:
        first = ("depth 0 is the one slot fed the target's own hidden state of the token before it: it agrees most"
                 if depth == 0 else f"depth {depth} agrees {p[depth]:.2f}, not the least")
        raise AssertionError(f"{first}. Each deeper P-EAGLE slot is given the same mask embedding and shared_hidden "
                             "as the one before, yet must guess one token further ahead")
    if reason not in exercises.DEPTH_REASONS:
        raise AssertionError(f"reason should be one of {sorted(exercises.DEPTH_REASONS)}, got {reason!r}")
    if reason == "b":
        import json

        from ..heads import HEADS_DIR

        curve = json.loads((HEADS_DIR / "peagle" / "summary.json").read_text())["curve"]
        a, z = curve[0], curve[-1]
        raise AssertionError(f"COD does train the deep depths on fewer positions (at least r_min = 20 % of them), but "
                             f"fewer examples slow learning, they do not cap it: over the shipped head's last "
                             f"{(z['tokens'] - a['tokens']) / 1e6:.0f} M training tokens its depth-{want_depth} agreement "
                             f"moved from {a['depth_acc'][want_depth]:.3f} to {z['depth_acc'][want_depth]:.3f}, still far "
                             f"under depth 0's {z['depth_acc'][0]:.2f}. Look at what a deep slot is given as input")
    if reason == "c":
        raise AssertionError(f"distance alone does not explain it: EAGLE-3's depth {len(e) - 1} also predicts "
                             f"{len(e)} tokens ahead of the last verified one and still agrees {e[-1]:.2f}. What "
                             "does its slot see that P-EAGLE's does not?")
    _correct(f"P-EAGLE's agreement falls from {p[0]:.2f} at depth 0 to {p[want_depth]:.2f} at depth {want_depth}, "
             f"EAGLE-3's only from {e[0]:.2f} to {min(e):.2f}: {exercises.DEPTH_REASONS['a']}, which EAGLE-3's "
             "slot sees")


# Every check hands on its answers, and lets an unanswered exercise pass by (see _hands_on_answers).
for _name in [n for n in __all__ if n.startswith("check_")]:
    globals()[_name] = _hands_on_answers(globals()[_name])
