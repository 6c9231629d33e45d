"""Where a figure came from: device, versions, command, commit and date, for every result JSON."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def git_commit() -> str | None:
    """``$PEAGLE_LAB_COMMIT`` (set by whoever ships the tree to a machine without .git), else git."""
    env = os.environ.get("PEAGLE_LAB_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def run_info(command: str | None = None) -> dict:
    """Provenance fields to store beside every measured number."""
    import torch

    info = {
        "device": device_name(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "command": command or " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    for mod in ("triton", "transformers"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            info[mod] = None
    return info
