"""GPU-only scripts say so on a machine without CUDA (exit 2, one line) instead of failing half-way."""
from __future__ import annotations

import json
import random
import subprocess
import tarfile
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def decode_attention_script():
    """``scripts/gpu/decode_attention_gpu.py`` imported as a module (it is not a package's)."""
    from peagle_lab.testing import script_module

    return script_module("gpu/decode_attention_gpu.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("script", ["prefill_cold_gpu.py", "prefill_batch_gpu.py", "decode_attention_gpu.py",
                                    "verify_profile_gpu.py", "admission_profile_gpu.py"])
def test_a_gpu_script_refuses_without_cuda(script):
    run = subprocess.run([sys.executable, f"scripts/gpu/{script}"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2 and run.stderr.strip() == f"{script}: needs CUDA"


def test_decode_attention_script_names_a_bad_variant_and_times_an_earlier_kernel_file(tmp_path):
    """--variants are checked before any GPU work; --baseline-kernel loads an earlier kernel file
    beside today's, its custom op renamed so the two registrations do not clash."""
    run = subprocess.run([sys.executable, "scripts/gpu/decode_attention_gpu.py", "--variants", "stages=0"],
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2 and "variant 'stages=0': expected comma-separated" in run.stderr
    script = decode_attention_script()
    assert script.parse_variant("stages=1,splits=4") == {"num_stages": 1, "num_splits": 4}
    baseline = script.load_baseline_kernel(str(REPO / "peagle_lab" / "kernels" / "decode_attention.py"))
    assert hasattr(torch.ops.peagle_lab, "decode_attention_baseline")
    q, k, v = torch.randn(1, 3, 2, 16), torch.randn(1, 1, 20, 16), torch.randn(1, 1, 20, 16)
    mask = torch.ones(1, 1, 2, 20, dtype=torch.bool)
    torch.testing.assert_close(baseline.decode_attention(q, k, v, mask, backend="torch"),
                               torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                                enable_gqa=True))


def test_decode_attention_script_engine_rows_take_every_path_through_the_model():
    """The engine half swaps llama.attend for the grouped candidate; the swap must take every argument
    the model's attention passes (kv_len included), here on a tiny CPU target."""
    from peagle_lab.testing import tiny_target

    script = decode_attention_script()
    rows = script.engine_rows(tiny_target(), [2], prompt_len=6, new_tokens=4, paths=("enable_gqa", "grouped"))
    assert [r["attention"] for r in rows] == ["enable_gqa", "grouped"] and all(r["step_ms"] > 0 for r in rows)


def test_decode_attention_script_checks_its_shapes_before_any_gpu_work():
    """--shapes (c,T,S[,shortest,longest]) replaces the built-in attention shapes; a bad one is refused by name."""
    for bad, why in (("1,1", "expected c,T,S"), ("1,8,640,4,600", "T <= shortest"), ("1,1,640,150,700", "longest <= S")):
        run = subprocess.run([sys.executable, "scripts/gpu/decode_attention_gpu.py", "--shapes", "1,1,640", bad],
                             cwd=REPO, capture_output=True, text=True, timeout=120,
                             env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
        assert run.returncode == 2 and f"shape {bad!r}" in run.stderr and why in run.stderr
    script = decode_attention_script()
    assert script.parse_shape("8,1,4096") == (8, 1, 4096, 1024, 4095)
    assert script.parse_shape("64,3,640,150,600") == (64, 3, 640, 150, 600)


def test_admission_profile_labels_every_part_of_an_admission_on_a_tiny_cpu_run(tmp_path):
    """The profile's labels come from wrappers around the engine's admission parts; a tiny CPU run has them all
    (one admission prefill, first draft, state update and a KV copy per cache each time) and decode steps."""
    out = tmp_path / "a.json"
    run = subprocess.run([sys.executable, "scripts/gpu/admission_profile_gpu.py", "--tiny", "--device", "cpu", "-c", "4",
                          "--requests", "10", "--max-new-tokens", "8", "--refill-divisor", "2", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    import json

    doc = json.loads(out.read_text())
    labels = doc["labels"]
    admits = labels["admit"]["calls"]
    assert admits >= 3 and labels["admit.prefill"]["calls"] == labels["admit.draft"]["calls"] == admits
    assert labels["admit.state"]["calls"] == admits and labels["admit.copy_kv"]["calls"] == 2 * admits  # target, drafter
    assert labels["decode_step"]["calls"] == doc["call"]["steps"] > 0
    # host time is the wrappers' own wall clock (the profiler's read 0.0 on the H200): the parts nest inside "admit"
    parts = sum(labels[f"admit.{p}"]["host_ms"] for p in ("prefill", "draft", "copy_kv"))
    assert 0 < parts <= labels["admit"]["host_ms"] < doc["call"]["wall_ms"]
    assert doc["commit"] and doc["top_device_ops"]


def test_h200_wait_fetches_a_finished_pipeline_over_several_calls_within_a_byte_budget(tmp_path):
    """A call brings back about 64 MiB: the small outputs come first, then the heads' parts in order, as many
    as fit; the next calls fetch the rest until nothing is left. A folder comes as one FOLDER.tgz."""
    root = tmp_path / "root"
    (root / "pipeline_out").mkdir(parents=True)
    (root / "pipeline.log").write_text("### done\n")
    (root / "pipeline_out" / "results.json").write_text("{}" * 50)
    for i in range(6):
        (root / "pipeline_out" / f"heads.tgz.part-{i}").write_bytes(bytes([i]) * 3000)
    (root / "pipeline_out" / "gpu_suite").mkdir()  # a folder (the GPU suite beside the session) comes as one .tgz
    noise = random.Random(0).randbytes(1500)  # incompressible: the .tgz takes budget like a real log
    (root / "pipeline_out" / "gpu_suite" / "gpu_tests.log").write_bytes(noise)
    (root / "pipeline.rc").write_text("0\n")
    got, said = [], []
    for call in range(4):
        out = tmp_path / f"out{call}"
        out.mkdir()
        run = subprocess.run(["bash", "scripts/gpu/h200_wait.sh", "0"], cwd=REPO, capture_output=True, text=True,
                             timeout=60, env={"PATH": "/usr/bin:/bin", "OUT": str(out), "PIPE_ROOT": str(root),
                                              "FETCH_BYTES": "10000"})
        assert run.returncode == 0, run.stderr
        got.append(sorted(p.name for p in out.iterdir()))
        said.append(run.stdout)
    assert got[0] == ["gpu_suite.tgz", "heads.tgz.part-0", "heads.tgz.part-1", "results.json"]
    with tarfile.open(tmp_path / "out0" / "gpu_suite.tgz") as tar:
        assert tar.extractfile("gpu_suite/gpu_tests.log").read() == noise
    assert "not fetched yet (4): heads.tgz.part-2 heads.tgz.part-3 heads.tgz.part-4 heads.tgz.part-5" in said[0]
    assert got[1] == ["heads.tgz.part-2", "heads.tgz.part-3", "heads.tgz.part-4"]
    assert "not fetched yet (1): heads.tgz.part-5" in said[1]
    assert got[2] == ["heads.tgz.part-5"] and got[3] == []
    assert "every output fetched" in said[2] and "every output fetched" in said[3]
    assert (tmp_path / "out1" / "heads.tgz.part-4").read_bytes() == bytes([4]) * 3000


def test_h200_wait_fetches_only_the_heads_named_in_fetch_heads(tmp_path):
    """FETCH_HEADS packs the named heads alone (head-NAME.tar.part-N) and leaves heads.tgz, which holds every
    run's head, behind; a name that is no head stops the call with the names there are."""
    root, ship = tmp_path / "root", tmp_path / "ship"
    (root / "pipeline_out").mkdir(parents=True)
    (root / "pipeline.log").write_text("### done\n")
    (root / "pipeline_out" / "results.json").write_text("{}")
    (root / "pipeline_out" / "heads.tgz.part-0").write_bytes(b"every head" * 100)
    for name in ("eagle3-1l", "peagle-4l"):
        (ship / "heads" / name).mkdir(parents=True)
        (ship / "heads" / name / "config.json").write_text(f'{{"name": "{name}"}}')
    (root / "pipeline.rc").write_text("0\n")

    def call(out, heads):
        out.mkdir()
        return subprocess.run(["bash", "scripts/gpu/h200_wait.sh", "0"], cwd=REPO, capture_output=True, text=True,
                              timeout=60, env={"PATH": "/usr/bin:/bin", "OUT": str(out), "PIPE_ROOT": str(root),
                                               "SHIP": str(ship), "FETCH_HEADS": heads})

    bad = call(tmp_path / "bad", "eagle3-1l peagle-9l")
    assert bad.returncode == 2 and "'peagle-9l', which is no head" in bad.stderr and "peagle-4l" in bad.stderr
    assert not list((root / "pipeline_out").glob("head-*"))  # the good name before it packed nothing either
    run = call(tmp_path / "out", "eagle3-1l")
    assert run.returncode == 0, run.stderr
    got = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert got == ["head-eagle3-1l.tar.part-0", "results.json"] and "every output fetched" in run.stdout
    with tarfile.open(tmp_path / "out" / "head-eagle3-1l.tar.part-0") as tar:
        assert json.loads(tar.extractfile("eagle3-1l/config.json").read()) == {"name": "eagle3-1l"}
        assert not any(m.name.startswith("peagle-4l") for m in tar.getmembers())


# sweep_session_h200.sh's tests are in tests/test_session_script.py, beside train_heads_h200.sh's.


def test_h200_wait_says_at_once_that_no_pipeline_runs_on_a_fresh_machine(tmp_path):
    """A machine released between calls comes back bare: with no log and no exit status the script must not
    sleep out its limit (the 28th session lost 540 s of device time that way) but exit 3 with the reason."""
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run(["bash", "scripts/gpu/h200_wait.sh", "540"], cwd=REPO, capture_output=True, text=True,
                         timeout=30, env={"PATH": "/usr/bin:/bin", "OUT": str(out), "PIPE_ROOT": str(tmp_path)})
    assert run.returncode == 3
    assert "no pipeline on this machine" in run.stderr and "released between calls" in run.stderr
    assert list(out.iterdir()) == []


# Variables that compilers and torch.compile read from the environment: a shell script that assigns one
# (4ca382f's train_heads_h200.sh set CC to a folder) breaks inductor's C++ builds in every child process.
TOOLCHAIN_VARS = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "LD", "AR", "CPATH", "LIBRARY_PATH")


def test_no_shell_script_assigns_a_variable_that_compilers_read():
    import re

    assign = re.compile(r"(?:^|[\s;(])(?:export\s+|local\s+)?(" + "|".join(TOOLCHAIN_VARS) + r")=", re.M)
    scripts = sorted((REPO / "scripts").rglob("*.sh")) + sorted((REPO / ".ci").glob("*"))
    assert len(scripts) > 5
    found = [f"{p.relative_to(REPO)}: {m.group(1)}=" for p in scripts if p.is_file()
             for m in assign.finditer(p.read_text(errors="replace"))]
    assert not found, found
