"""The checks of notebooks 1 and 2: the tokens a verify step gains, the drafter's work, one request's draft row.

How a check answers, and how the notebooks call it, is :mod:`peagle_lab.lab.checks`'s to say; the shared
machinery is :mod:`peagle_lab.lab.checks_base`.
"""
from __future__ import annotations

import math

import torch

from . import exercises
from .checks_base import STUB, call_answer, correct

__all__ = ["check_verify_by_hand", "check_drafter_work", "check_draft_row", "check_padding_slots"]


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
        got = call_answer(verify_by_hand, list(drafts), list(choices))
        if isinstance(got, torch.Tensor):
            got = got.tolist()
        if not isinstance(got, (list, tuple)):
            raise AssertionError(f"return the list of tokens the step gains, got {type(got).__name__}")
        got, want = [int(t) for t in got], exercises.verify_by_hand(drafts, choices)
        if got != want:
            raise AssertionError(_verify_hint(drafts, choices, got, want))
    correct(f"drafts [5, 9, 7] against the target's [5, 6, 7, 8] gain [5, 6]: draft 1 accepted, 6 recovered for "
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
        got = call_answer(drafter_work, method, k=k, layers=layers)
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
    correct("at K = 5, EAGLE-3 (1 layer) runs 5 passes and 10 slot-layers, P-EAGLE (4 layers) 1 pass and 40 "
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
        got = call_answer(draft_row, list(tokens), list(pos), n, bonus, k=k, mask_token_id=99)
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
    correct(f"the request's 8 slots (bonus at slot 1, mask positions 22-24, 3 padding slots) and {len(cases) - 1} "
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
        raise AssertionError(STUB)
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
    correct(f"{want} of the batch's {slots} slots are padding: K - n = {', '.join(str(k - n) for n in accepted)} per "
             "request, the rejected drafts; none writes KV (slot -1) or is sampled")

