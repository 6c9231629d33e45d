"""What every exercise check uses: the hint for a stub, calling the answer, the ``correct:`` line.

The checks live by notebook in :mod:`peagle_lab.lab.checks_mechanics` (notebooks 1-2),
:mod:`peagle_lab.lab.checks_kernels` (notebooks 3-4) and :mod:`peagle_lab.lab.checks_throughput`
(notebooks 5-6); each imports these three names from here, and this module imports none of
them. :mod:`peagle_lab.lab.checks` lists the checks and wraps each so that an unanswered
exercise hands on the worked answer.

>>> call_answer(lambda a, b: a + b, 1, 2)
3
>>> correct("1 + 2 is 3")
correct: 1 + 2 is 3
>>> call_answer(lambda a: a, 1, 2)  # doctest: +ELLIPSIS
Traceback (most recent call last):
AssertionError: calling your function failed (...): keep the signature the exercise gives
"""
from __future__ import annotations

__all__ = ["STUB", "call_answer", "correct"]

#: What a check says while its exercise still holds the stub (the exercise cell still raises
#: ``NotImplementedError``, or a value is still ``None``).
STUB = ("not answered yet: write your answer in the exercise cell above, where it says \"your code here\", run "
        "that cell, then this one")


def call_answer(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; a stub or a wrong signature becomes an AssertionError with a hint."""
    if not callable(fn):
        raise AssertionError(f"expected a function, got {type(fn).__name__}: define it with `def` in the cell above")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise AssertionError(STUB) from None
    except TypeError as e:
        raise AssertionError(f"calling your function failed ({e}): keep the signature the exercise gives") from None


def correct(message: str) -> None:
    """Print the line a check ends with when the answer is right: ``correct: <message>``."""
    print(f"correct: {message}")
