"""The checks behind the notebooks' exercise cells: each fails with a hint until the answer is right.

An exercise cell (tagged ``exercise``) asks for a function or a number; the cell after it
calls ``check_<name>(answer)``. The check tries the answer on inputs of its own, compares
it with the worked solution in :mod:`peagle_lab.lab.exercises`, and either raises an
``AssertionError`` whose message says what is off and where to look, or prints one line
starting with ``correct:``. A stub still raising ``NotImplementedError`` gets a hint too.
Every check needs only what the notebook's first code cell imports, so a student can retry
one exercise without re-running the notebook.

The notebooks call every check as ``checks.check_<name>``. The checks live in one module per
pair of notebooks, over :mod:`peagle_lab.lab.checks_base` (the stub's hint, calling the
answer, the ``correct:`` line); this module imports them and wraps each so that it returns
the answers it checked and, while its exercise is unanswered, prints a line starting with
``not answered yet:`` and hands on the worked answer listed in ``_WORKED``.

| notebook | exercise                                        | check (module)                                  |
| -------- | ----------------------------------------------- | ----------------------------------------------- |
| 1        | ``verify_by_hand``: the tokens a step gains       | ``check_verify_by_hand`` (:mod:`~peagle_lab.lab.checks_mechanics`) |
| 1        | each method's drafter passes and slot-layers     | ``check_drafter_work`` (:mod:`~peagle_lab.lab.checks_mechanics`)   |
| 2        | ``draft_row``: one request's slots, by hand       | ``check_draft_row`` (:mod:`~peagle_lab.lab.checks_mechanics`)      |
| 2        | padding slots of a decode step                   | ``check_padding_slots`` (:mod:`~peagle_lab.lab.checks_mechanics`)  |
| 3        | ``sees``: the chain mask; what a causal one leaks | ``check_chain_mask`` (:mod:`~peagle_lab.lab.checks_kernels`)       |
| 3        | elements COD keeps at n = 1000, K_train = 8      | ``check_cod_kept`` (:mod:`~peagle_lab.lab.checks_kernels`)         |
| 4        | ``fill_draft_hidden`` as one gather              | ``check_fill_by_gather`` (:mod:`~peagle_lab.lab.checks_kernels`)   |
| 4        | bytes the fused kernels move at c = 64, K = 7    | ``check_moved_bytes`` (:mod:`~peagle_lab.lab.checks_kernels`)      |
| 5        | P-EAGLE ÷ EAGLE-3 TPS at equal acceptance        | ``check_speedup_at_equal_acceptance`` (:mod:`~peagle_lab.lab.checks_throughput`) |
| 6        | which head's agreement falls first with depth    | ``check_weakest_depth`` (:mod:`~peagle_lab.lab.checks_throughput`) |

>>> from peagle_lab.lab import checks_mechanics
>>> check_verify_by_hand.__wrapped__ is checks_mechanics.check_verify_by_hand
True
>>> sorted(_WORKED) == sorted(__all__)
True
"""
from __future__ import annotations

import functools

from . import exercises
from .checks_base import STUB
from .checks_kernels import check_chain_mask, check_cod_kept, check_fill_by_gather, check_moved_bytes
from .checks_mechanics import check_draft_row, check_drafter_work, check_padding_slots, check_verify_by_hand
from .checks_throughput import check_speedup_at_equal_acceptance, check_weakest_depth

__all__ = ["check_verify_by_hand", "check_drafter_work", "check_draft_row", "check_padding_slots",
           "check_chain_mask", "check_cod_kept", "check_fill_by_gather", "check_moved_bytes",
           "check_weakest_depth", "check_speedup_at_equal_acceptance"]


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
    return isinstance(error, NotImplementedError) or (isinstance(error, AssertionError) and str(error) == STUB)


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
            print(f"{STUB}. Until then the cells below go on with "
                  + ("the worked answer (peagle_lab.lab.exercises)" if worked else "your stub"))
            return worked() if worked else (answers[0] if len(answers) == 1 else answers)
        return answers[0] if len(answers) == 1 else answers
    return wrapper



# Every check hands on its answers, and lets an unanswered exercise pass by (see _hands_on_answers).
for _name in [n for n in __all__ if n.startswith("check_")]:
    globals()[_name] = _hands_on_answers(globals()[_name])
