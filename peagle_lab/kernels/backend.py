"""Which implementation runs a fused kernel, Triton or the PyTorch reference: one resolver.

Every kernel wrapper takes ``backend="auto" | "torch" | "triton"`` and asks :func:`resolve`
at each call, for the device its tensors are on:

- ``"torch"``: the PyTorch reference, on any device.
- ``"triton"``: the Triton kernel: compiled for CUDA tensors; for CPU tensors, Triton's
  interpreter (each program run in Python: for checking bits, not for speed).
- ``"auto"``: compiled Triton for CUDA tensors, the reference for CPU tensors.

The interpreter is a per-process choice: ``triton.language`` defines some of its own
functions (``tl.zeros``, ``tl.max``, …) with ``@triton.jit`` when Triton is imported,
compiled or interpreted by ``TRITON_INTERPRET`` at that moment, and Triton asserts that the
mode stays the same afterwards. So this module makes the choice when it imports Triton: on a
machine without a CUDA device, where compiled Triton cannot run at all, it turns the
interpreter on (unless ``TRITON_INTERPRET`` is already set, or something imported Triton
first). Notebooks and scripts need no environment preamble; ``TRITON_INTERPRET=0`` opts out.
"""
from __future__ import annotations

import os
import sys

import torch

if "triton" not in sys.modules and "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

try:
    import triton
except ImportError:  # Triton ships Linux wheels only; backend="torch" works everywhere.
    triton = None

BACKENDS = ("auto", "torch", "triton")

__all__ = ["BACKENDS", "interpreted", "resolve", "runs_here", "triton"]


def interpreted() -> bool:
    """Whether Triton runs in its interpreter in this process (decided when Triton was imported)."""
    if triton is None:
        return False
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    return not isinstance(tl.zeros, JITFunction)


def resolve(backend: str, device: torch.device | str) -> str:
    """``backend`` resolved to ``"torch"`` or ``"triton"`` for tensors on ``device``.

    >>> resolve("torch", "cpu")
    'torch'
    >>> resolve("cuda", "cpu")
    Traceback (most recent call last):
    ValueError: backend='cuda': expected 'auto', 'torch' or 'triton'
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected 'auto', 'torch' or 'triton'")
    device = torch.device(device)
    if backend == "torch":
        return "torch"
    if backend == "auto":
        return "triton" if triton is not None and device.type == "cuda" else "torch"
    runnable = triton is not None and (device.type == "cuda" or (device.type == "cpu" and interpreted()))
    if triton is None:
        raise ValueError("backend='triton' needs the triton package, which is not installed here "
                         "(Triton ships Linux wheels only); use backend='torch'")
    if not runnable:
        raise ValueError(f"backend='triton' with tensors on {device}: expected CUDA tensors, or CPU tensors "
                         "with Triton's interpreter on (TRITON_INTERPRET=1 when Triton was imported; "
                         "peagle_lab turns it on by itself on machines without a CUDA device)")
    return "triton"


def runs_here(device: torch.device | str | None = None) -> bool:
    """Whether ``backend="triton"`` can run on ``device`` (default: CUDA if present, else CPU)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        return resolve("triton", device) == "triton"
    except ValueError:
        return False
