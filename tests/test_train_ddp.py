"""torchrun + DDP: two CPU processes (gloo) make the same update as one process on the same global batch."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(out, method, nproc, extra=()):
    args = ["-m", "peagle_lab.train.cli", "train", "--tiny", "--device", "cpu", "--method", method, "--steps", "3",
            "--batch-size", "4", "--row-len", "64", "--k-train", "3", "--lr", "3e-3", "--warmup-fraction", "0.0",
            "--ckpt-every", "0", "--log-every", "1", "--no-eval", "--heldout-rows", "4", "--tiny-examples", "48",
            "--draft-vocab-size", "64", "--compile", "off", "--no-progress", "--out", str(out), *extra]
    if nproc > 1:
        args = ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
                "--master-port", str(free_port()), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return load_file(str(out / "head" / "model.safetensors")) if (out / "head" / "model.safetensors").exists() else \
        {k: v for f in sorted((out / "head").glob("model-*.safetensors")) for k, v in load_file(str(f)).items()}


@pytest.mark.parametrize("method, extra", [("eagle3", ()), ("peagle", ("--cod-ratio", "1", "--cod-ratio-min", "1"))])
def test_two_processes_train_like_one(tmp_path, method, extra):
    one = train(tmp_path / "one", method, 1, extra)
    two = train(tmp_path / "two", method, 2, extra)
    start = train(tmp_path / "zero", method, 1, (*extra, "--lr", "0"))  # no update: where both began
    assert one.keys() == two.keys()
    moved = 0.0
    for k in one:
        torch.testing.assert_close(two[k], one[k], atol=2e-6, rtol=1e-5, msg=k)
        moved = max(moved, float((one[k].float() - start[k].float()).abs().max()))
    assert moved > 1e-4  # the runs really trained
    s1, s2 = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("one", "two"))
    assert s2["world_size"] == 2 and s1["world_size"] == 1
    assert s1["tokens"] == s2["tokens"] > 0  # every rank's rows counted once
    # the held-out curve is scored over both ranks' rows and combined: the same numbers
    assert s1["curve"][-1]["depth_acc"] == pytest.approx(s2["curve"][-1]["depth_acc"], abs=1e-6)
