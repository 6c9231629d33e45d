"""Triton kernels of the decode step, each beside the PyTorch reference that specifies it.

Every module here follows one shape: ``*_ref`` (plain PyTorch, the spec), then the
``@triton.jit`` kernel, then a wrapper taking ``backend="auto" | "torch" | "triton"``,
resolved at each call by :mod:`peagle_lab.kernels.backend`. On a CPU the kernels run under
Triton's interpreter when ``TRITON_INTERPRET=1`` was set before Triton was imported.
"""
