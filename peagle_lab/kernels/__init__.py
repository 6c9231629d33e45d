"""Triton kernels of the decode step, each beside the PyTorch reference that specifies it.

Every module here follows one shape: ``*_ref`` (plain PyTorch, the spec), then the
``@triton.jit`` kernel, then a wrapper taking ``backend="auto" | "torch" | "triton"``,
resolved at each call by :mod:`peagle_lab.kernels.backend`. On a machine without a GPU,
``backend="triton"`` runs the kernels in Triton's interpreter, which that module turns on.
"""
