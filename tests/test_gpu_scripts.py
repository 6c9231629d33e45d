"""GPU-only scripts say so on a machine without CUDA (exit 2, one line) instead of failing half-way."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("script", ["prefill_cold_gpu.py", "decode_attention_gpu.py", "verify_profile_gpu.py"])
def test_a_gpu_script_refuses_without_cuda(script):
    run = subprocess.run([sys.executable, f"scripts/gpu/{script}"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2 and run.stderr.strip() == f"{script}: needs CUDA"
