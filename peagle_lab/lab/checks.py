"""The checks behind the notebooks' exercise cells: each fails with a hint until the answer is right.

An exercise cell (tagged ``exercise``) asks for a function or a number; the cell after it
calls ``check_<name>(answer)``. The check tries the answer on inputs of its own, compares
it with the worked solution in :mod:`peagle_lab.lab.exercises`, and either raises an
``AssertionError`` whose message says what is off and where to look, or prints one line
starting with ``correct:``. A stub still raising ``NotImplementedError`` gets a hint too.
Every check needs only what the notebook's first code cell imports, so a student can retry
one exercise without re-running the notebook.

The notebooks call every check as ``checks.check_<name>``; this module re-exports them from
the modules that hold them, one per pair of notebooks, over the shared machinery in
:mod:`peagle_lab.lab.checks_base` (the ``correct:`` and ``not answered yet:`` lines, and
``_WORKED``, the worked answers a check hands on while its exercise is unanswered).

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
>>> check_verify_by_hand is checks_mechanics.check_verify_by_hand
True
>>> sorted(_WORKED) == sorted(__all__)
True
"""
from __future__ import annotations

# The shared machinery too, for code and tests that reach it as checks._WORKED and the like.
from .checks_base import _STUB, _WORKED, _call, _correct, _hands_on_answers, _unanswered  # noqa: F401
from .checks_kernels import check_chain_mask, check_cod_kept, check_fill_by_gather, check_moved_bytes
from .checks_mechanics import check_draft_row, check_drafter_work, check_padding_slots, check_verify_by_hand
from .checks_throughput import check_speedup_at_equal_acceptance, check_weakest_depth

__all__ = ["check_verify_by_hand", "check_drafter_work", "check_draft_row", "check_padding_slots",
           "check_chain_mask", "check_cod_kept", "check_fill_by_gather", "check_moved_bytes",
           "check_weakest_depth", "check_speedup_at_equal_acceptance"]
