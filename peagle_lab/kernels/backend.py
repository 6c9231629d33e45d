"""Which implementation runs a fused kernel, Triton or the PyTorch reference: one resolver.

Every kernel wrapper takes ``backend="auto" | "torch" | "triton"`` and asks :func:`resolve`
at each call, for the device its tensors are on:

- ``"torch"``: the PyTorch reference, on any device.
- ``"triton"``: the Triton kernel: compiled for CUDA tensors; for CPU tensors, Triton's
  interpreter, which needs ``TRITON_INTERPRET=1`` set before anything imports ``triton``.
- ``"auto"``: Triton wherever it can run (CUDA tensors, or CPU tensors under the
  interpreter, as in the CPU CI), else the reference.

Why the interpreter is chosen once per process: ``triton.language`` defines some of its own
functions (``tl.zeros``, ``tl.max``, …) with ``@triton.jit`` when Triton is imported, compiled
or interpreted by ``TRITON_INTERPRET`` at that moment, and Triton asserts that the mode stays
the same afterwards. So a notebook that wants the kernels on a CPU sets the variable in its
first cell, before importing ``peagle_lab``.
"""
from __future__ import annotations

import torch

try:
    import triton
except ImportError:  # Triton ships Linux wheels only; backend="torch" works everywhere.
    triton = None

BACKENDS = ("auto", "torch", "triton")

__all__ = ["BACKENDS", "interpreted", "resolve", "runs_here", "triton"]


def interpreted() -> bool:
    """Whether Triton runs in its interpreter in this process (``TRITON_INTERPRET=1`` at import)."""
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
    runnable = triton is not None and (device.type == "cuda" or (device.type == "cpu" and interpreted()))
    if backend == "auto":
        return "triton" if runnable else "torch"
    if triton is None:
        raise ValueError("backend='triton' needs the triton package, which is not installed here "
                         "(Triton ships Linux wheels only); use backend='torch'")
    if not runnable:
        raise ValueError(f"backend='triton' with tensors on {device}: expected CUDA tensors, or CPU tensors "
                         "with TRITON_INTERPRET=1 set before anything imports triton (Triton's interpreter)")
    return "triton"


def runs_here(device: torch.device | str | None = None) -> bool:
    """Whether ``backend="triton"`` can run on ``device`` (default: CUDA if present, else CPU)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        return resolve("triton", device) == "triton"
    except ValueError:
        return False
