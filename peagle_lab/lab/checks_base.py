"""The machinery every exercise check shares: the hints for a stub, the ``correct:`` line, the worked answers.

:mod:`peagle_lab.lab.checks` lists the checks; they live by notebook in
:mod:`peagle_lab.lab.checks_mechanics` (notebooks 1-2), :mod:`peagle_lab.lab.checks_kernels`
(notebooks 3-4) and :mod:`peagle_lab.lab.checks_throughput` (notebooks 5-6), and each of those
imports what it needs from here. This module imports none of them.

A check calls the answer through :func:`_call`, so a stub still raising ``NotImplementedError``
or a wrong signature becomes an ``AssertionError`` with a hint, and ends with :func:`_correct`,
which prints one line starting with ``correct:``. :func:`_hands_on_answers` wraps every check:
a correct answer is returned, a wrong one raises the check's hint, and an unanswered one prints
a line starting with ``not answered yet:`` and returns the worked answer listed in ``_WORKED``,
so "Run All" on a student copy reaches the last cell.

>>> _call(lambda: 1 + 1)
2
>>> _correct("two")
correct: two
"""
from __future__ import annotations

import functools

from . import exercises

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

