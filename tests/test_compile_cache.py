"""train.compile_cache: a blob written by one process turns another's compilation into cache hits."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from peagle_lab.train.compile_cache import load_compile_cache, save_compile_cache

# Compiles f in a fresh inductor cache folder, after loading argv[1] if it exists; prints the
# FX-graph cache hits and misses, then saves what it compiled to argv[2].
CHILD = """
import json, sys, torch
from torch._dynamo.utils import counters
from peagle_lab.train.compile_cache import load_compile_cache, save_compile_cache
loaded = load_compile_cache(sys.argv[1])
def f(x, w):
    return torch.nn.functional.gelu(x @ w).softmax(-1)
x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 16)
torch.compile(f)(x, w).sum().backward()
saved = save_compile_cache(sys.argv[2])
print(json.dumps({"loaded": loaded, "saved": saved, "hits": counters["inductor"]["fxgraph_cache_hit"],
                  "misses": counters["inductor"]["fxgraph_cache_miss"]}))
"""


def child(tmp_path, name: str, load, save) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{name}"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(load), str(save)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_saved_cache_makes_a_fresh_process_hit_instead_of_compiling(tmp_path):
    blob = tmp_path / "cache.bin"
    first = child(tmp_path, "a", tmp_path / "missing.bin", blob)
    assert first["loaded"]["bytes"] == 0 and first["hits"] == 0 and first["misses"] >= 1
    assert first["saved"]["bytes"] == blob.stat().st_size > 0 and first["saved"]["artifacts"]["inductor"] >= 1
    assert blob.read_bytes()[:2] == b"\x1f\x8b" and first["saved"]["raw_bytes"] > 0  # stored gzip-compressed
    second = child(tmp_path, "b", blob, tmp_path / "again.bin")  # another empty inductor folder
    assert second["loaded"]["bytes"] == blob.stat().st_size
    assert second["loaded"]["artifacts"] == first["saved"]["artifacts"]
    assert second["misses"] == 0 and second["hits"] == first["misses"]


def test_a_missing_file_loads_nothing(tmp_path):
    assert load_compile_cache(tmp_path / "none.bin") == {"path": str(tmp_path / "none.bin"), "bytes": 0,
                                                         "artifacts": {}}


def test_a_corrupt_file_loads_nothing_and_says_why(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a cache")
    got = load_compile_cache(bad)
    assert got["bytes"] == 11 and got["artifacts"] == {}
    assert "bad.bin (11 bytes) not loaded by torch" in got["error"]


def test_a_truncated_file_loads_nothing_and_says_why(tmp_path):
    cut = tmp_path / "cut.bin"
    cut.write_bytes(gzip.compress(b"x" * 1000)[:20])
    got = load_compile_cache(cut)
    assert got["artifacts"] == {} and "cut.bin (20 bytes) not loaded" in got["error"]


def test_saving_when_nothing_was_compiled_writes_no_file(tmp_path):
    code = ("import sys; from peagle_lab.train.compile_cache import save_compile_cache; "
            "print(save_compile_cache(sys.argv[1])['bytes'])")
    out = tmp_path / "nothing.bin"
    done = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0" and not out.exists()
