"""Carry torch.compile's work from one machine to the next.

A fresh GPU machine starts with empty inductor caches, so the first training step compiles
everything again, which can take a large share of a short time budget (each run's
``summary.json`` records ``first_step_s``). ``torch.compiler.save_cache_artifacts`` packs what this process compiled (inductor
graphs, AOTAutograd entries, Triton kernels) into one blob; loading it before compiling on a
machine with the same torch, Triton and GPU turns those compiles into cache hits. A blob
that does not match (another torch, another GPU, changed code) costs nothing: its entries
miss and compilation runs as before.

The file is the blob gzip-compressed: a raw blob is tens to hundreds of MB, mostly GPU
binaries that gzip shrinks several times, which is what lets it travel between machines.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import torch

from ..models.checkpoints import atomic_path

GZIP_MAGIC = b"\x1f\x8b"


def load_compile_cache(path: Path | str) -> dict:
    """Warm torch.compile's caches from ``path`` (written by :func:`save_compile_cache`).

    Returns what was loaded: ``{"path", "bytes", "artifacts"}`` (artifact counts by kind); a
    missing file loads nothing (``bytes`` 0). The cache only saves time, so a file torch cannot
    read is not fatal: nothing is loaded and ``"error"`` says why, for the caller to report.
    """
    path = Path(path)
    if not path.is_file():
        return {"path": str(path), "bytes": 0, "artifacts": {}}
    raw = path.read_bytes()
    try:
        blob = gzip.decompress(raw) if raw[:2] == GZIP_MAGIC else raw
        info = torch.compiler.load_cache_artifacts(blob)
        error = None if info is not None or not blob else "torch could not unpickle it (a corrupt or truncated file?)"
    except Exception as e:  # noqa: BLE001 - a truncated gzip stream, or torch's several kinds on a foreign blob
        info, error = None, f"{type(e).__name__}: {e}"
    if error:
        return {"path": str(path), "bytes": len(raw), "artifacts": {},
                "error": f"compile cache {path} ({len(raw)} bytes) not loaded by torch {torch.__version__}: {error}"}
    return {"path": str(path), "bytes": len(raw), "artifacts": _counts(info)}


def save_compile_cache(path: Path | str) -> dict:
    """Write everything this process has compiled so far to ``path`` (gzip, atomically).

    Returns ``{"path", "bytes", "raw_bytes", "artifacts"}`` (``bytes`` on disk, ``raw_bytes``
    before compression); when nothing was compiled (eager, or CPU without a compiler) no file
    is written and ``bytes`` is 0.
    """
    path = Path(path)
    saved = torch.compiler.save_cache_artifacts()
    if saved is None or not saved[0]:
        return {"path": str(path), "bytes": 0, "artifacts": {}}
    blob, info = saved
    packed = gzip.compress(blob, compresslevel=1, mtime=0)
    with atomic_path(path) as tmp:
        tmp.write_bytes(packed)
    return {"path": str(path), "bytes": len(packed), "raw_bytes": len(blob), "artifacts": _counts(info)}


def _counts(info) -> dict[str, int]:
    artifacts = getattr(info, "artifacts", None) or {}
    return {kind: len(keys) for kind, keys in sorted(artifacts.items()) if keys}
