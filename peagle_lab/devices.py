"""Device and dtype names, as every command line takes them: one parser for all of them.

``--device auto | cpu | cuda | cuda:N`` and ``--dtype auto | float32 | bfloat16 | float16``;
``auto`` means CUDA when torch sees a GPU, and bfloat16 on CUDA, float32 elsewhere.
"""
from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

__all__ = ["DTYPES", "resolve_device", "resolve_dtype"]


def resolve_device(name: str) -> torch.device:
    """The device ``--device name`` asks for, or a ValueError that names the value.

    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("gpu0")
    Traceback (most recent call last):
    ValueError: --device 'gpu0' is not a device (auto | cpu | cuda[:N])
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {name} asked for CUDA, but torch sees no GPU")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name!r} is not a device (auto | cpu | cuda[:N])") from None


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The dtype ``--dtype name`` asks for; ``auto`` is bfloat16 on CUDA, else float32.

    >>> resolve_dtype("auto", torch.device("cpu")), resolve_dtype("float16", torch.device("cpu"))
    (torch.float32, torch.float16)
    """
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ValueError(f"--dtype {name!r}: expected auto or one of {', '.join(DTYPES)}")
    return DTYPES[name]
