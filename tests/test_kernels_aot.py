"""The ahead-of-time build of the kernels for sm_80 / sm_90 / sm_100 / sm_120 and its committed table.

The build runs where Triton compiles (TRITON_INTERPRET=0), so the tests that record or build launch a
fresh process; the table tests read docs/results/cpu/kernels_aot.json.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from peagle_lab.hardware import ARCHS
from peagle_lab.kernels import aot
from peagle_lab.kernels.aot_table import BEGIN, END, check, markdown_table, occupancy

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "docs" / "results" / "cpu" / "kernels_aot.json"
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def table():
    return json.loads(TABLE.read_text())


def compiled_python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="0", **(env or {}))
    return subprocess.run([sys.executable, *( ["-c", code] if code else []), *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def test_the_table_has_every_kernel_for_every_arch(table):
    kernels = set(aot.entry_points())
    assert kernels == {"_decode_attention_split_kernel", "_decode_attention_combine_kernel", "_fill_draft_hidden_kernel",
                       "_prepare_draft_inputs_kernel", "_argmax_chunks_kernel", "_accept_greedy_kernel",
                       "_verify_rejection_kernel"}
    assert {(r["kernel"], r["arch"]) for r in table["rows"]} == {(k, a) for k in kernels for a in ARCHS}
    assert all(r["error"] is None for r in table["rows"])
    assert table["run_info"]["triton"] and table["run_info"]["commit"]


RANDOM_LAUNCHES = textwrap.dedent("""
    import json, random, sys, torch
    from peagle_lab.hardware import ARCHS, DEVICES
    from peagle_lab.engine import KV_BLOCK_ALIGN
    from peagle_lab.kernels import aot
    from peagle_lab.kernels.aot_table import spec_id
    from peagle_lab.kernels.decode_attention import decode_attention
    from peagle_lab.kernels.fill_draft_hidden import fill_draft_hidden
    from peagle_lab.kernels.prepare_draft_inputs import prepare_draft_inputs
    from peagle_lab.kernels.verify import verify_greedy, verify_rejection
    rng, meta, long = random.Random(int(sys.argv[1])), aot._meta, torch.int64
    specs = set()
    for device in DEVICES.values():
        with aot.device_answers(device.sms, ARCHS[device.arch].max_smem_per_block), aot.record(device.arch, specs):
            for _ in range(150):
                m, dt = rng.choice(aot.ENGINE_MODELS), rng.choice(aot.DTYPES)
                c, K = rng.randint(1, 300), rng.randint(1, 16)
                T, S = rng.choice([1, K + 1, 2 * K, rng.randint(1, 48)]), KV_BLOCK_ALIGN * rng.randint(1, 256)
                try:
                    decode_attention(meta(c, m.heads, T, m.head_dim, dtype=dt), meta(c, m.kv_heads, S, m.head_dim, dtype=dt),
                                     meta(c, m.kv_heads, S, m.head_dim, dtype=dt), meta(c, 1, T, S, dtype=torch.bool),
                                     meta(c, dtype=torch.int32), backend="triton")
                except ValueError:
                    pass  # shapes the op leaves to SDPA
                W = rng.choice([K + 1, rng.randint(1, 8192)])
                d = prepare_draft_inputs(meta(c, W, dtype=long), meta(c, W, dtype=long), meta(c, dtype=long),
                                         meta(c, dtype=long), num_speculative_tokens=K, mask_token_id=0,
                                         max_len=8192, backend="triton")
                fill_draft_hidden(meta(c * W, m.hidden, dtype=dt), d.hidden_mapping[: c * W], d.is_masked[: c * W],
                                  meta(m.hidden, dtype=dt), backend="triton")
                verify_greedy(meta(c, K + 1, m.vocab, dtype=dt), meta(c, K, dtype=long), backend="triton")
                verify_rejection(meta(c, K + 1, m.vocab), meta(c, K, m.vocab), meta(c, K, dtype=long), meta(c, K),
                                 meta(c, m.vocab), backend="triton")
    print(json.dumps(sorted({(s.kernel, s.arch, spec_id(s), s.label) for s in specs})))
""")


def test_the_sweeps_cache_lengths_are_ones_the_engine_makes():
    from peagle_lab.engine import KV_BLOCK_ALIGN

    assert all(S % KV_BLOCK_ALIGN == 0 for S in aot.CACHE_LENGTHS)


def test_random_engine_launches_on_every_gpu_preset_are_in_the_committed_table(table):
    # Fresh draws of what the engine can pass (c up to 300, K 1..16, prompts up to 8192, cache blocks of whole
    # KV_BLOCK_ALIGN positions up to 16384, every model shape and dtype), through the real wrappers: each launch
    # must be one the table built.
    seed = int.from_bytes(os.urandom(2), "little")
    out = compiled_python(RANDOM_LAUNCHES, str(seed))
    assert out.returncode == 0, out.stderr
    launched = {tuple(x[:3]): x[3] for x in json.loads(out.stdout)}
    built = {(r["kernel"], r["arch"], r["id"]) for r in table["rows"]}
    missing = [f"{k[0]} [{label}] on {k[1]}" for k, label in launched.items() if k not in built]
    assert len(launched) > 50 and not missing, (f"seed {seed}: {len(missing)} launches the table lacks; the sweep "
                                                f"in peagle_lab/kernels/aot.py misses them: {missing[:5]}")


def test_the_engine_passes_the_argument_types_the_table_was_built_for(table, monkeypatch):
    # The sweep assumes the engine's argument dtypes (int64 ids, float32 probabilities, the model's dtype
    # elsewhere): record what a real engine passes, in Triton's interpreter, with every kernel on.
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import mangle_type

    from peagle_lab.config import SpecConfig
    from peagle_lab.engine import SpecDecoder
    from peagle_lab.testing import tiny_drafter, tiny_target

    seen = set()
    real = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        seen.add((self.fn.__name__, ",".join(mangle_type(a)[1:] for a in args if isinstance(a, torch.Tensor))))
        return real(self, *args, grid=grid, warmup=warmup, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", run)
    target = tiny_target()
    prompts = [[3 + (7 * i) % 90 for i in range(150)], [8, 9]]  # 150 keys: two key blocks, so splits and a combine
    for method, temperature in (("peagle", 0.0), ("eagle3", 1.0)):
        cfg = SpecConfig(method=method, num_speculative_tokens=3, max_new_tokens=3, temperature=temperature,
                         kernel_backend="triton", decode_attention="triton")
        SpecDecoder(target, tiny_drafter(target, method), cfg).generate(prompts)
    assert {k for k, _ in seen} == set(aot.entry_points())
    built = {(r["kernel"], r["pointers"]) for r in table["rows"]}
    assert seen <= built, seen - built


def test_a_kernel_that_needs_too_much_shared_memory_fails_the_check_naming_kernel_spec_and_arch():
    out = compiled_python("", "-m", "peagle_lab.kernels.aot_table", "--check", str(TABLE),
                          "--extra", "tests/aot_broken_kernel.py", "--archs", "sm_120", "--workers", "1")
    assert out.returncode == 1
    assert "kernels-aot: _too_wide_kernel [fp32 BLOCK=256 w4 s3] on sm_120: needs" in out.stderr
    assert "bytes of shared memory, sm_120 allows 101376 a block" in out.stderr


def test_the_check_builds_only_kernels_whose_source_differs_from_the_table(table, tmp_path):
    # The committed table is the cache a fresh clone has: rows of the same kernel source and Triton are taken
    # from it; a kernel whose source hash differs (here: faked for fill_draft_hidden) is built again.
    for r in table["rows"]:
        if r["kernel"] == "_fill_draft_hidden_kernel":
            r["source"] = "0" * 16
    (tmp_path / "table.json").write_text(json.dumps(table))
    fill = sum(r["kernel"] == "_fill_draft_hidden_kernel" and r["arch"] == "sm_120" for r in table["rows"])
    env = {"PEAGLE_LAB_AOT_CACHE": str(tmp_path / "cache")}
    out = compiled_python("", "-m", "peagle_lab.kernels.aot_table", "--check", str(tmp_path / "table.json"),
                          "--archs", "sm_120", env=env)
    assert out.returncode == 0, out.stderr
    built = sum(r["arch"] == "sm_120" for r in table["rows"])
    assert f": {fill} built (or read from the cache" in out.stdout and f"{built - fill} taken from the committed" \
        in out.stdout, out.stdout


def row(**kw):
    base = dict(kernel="_k", arch="sm_100", spec="bf16 B=64 w4 s3", id="abc", registers=40, shared=1024,
                spills=0, error=None)
    return base | kw


@pytest.mark.parametrize("committed, now, message", [
    ([row()], [row(spills=64)], "_k [bf16 B=64 w4 s3] on sm_100: spills 64 bytes a thread"),
    ([row()], [row(error="CompilationError: bad")], "on sm_100: build failed: CompilationError: bad"),
    ([row()], [row(shared=300_000)], "needs 300000 bytes of shared memory, sm_100 allows 232448 a block"),
    ([row()], [row(), row(id="new", spec="fp16 B=64 w4 s3")], "_k [fp16 B=64 w4 s3] on sm_100: not in the committed"),
    ([row(), row(id="old")], [row()], "in the committed table but no longer launched"),
])
def test_check_names_what_fails(committed, now, message):
    problems = check(now, committed)
    assert len(problems) == 1 and message in problems[0]


def test_check_passes_a_spill_the_committed_table_already_has():
    assert check([row(spills=64)], [row(spills=32)]) == []
    assert check([row()], [row()]) == []


def test_occupancy_is_limited_by_whichever_resource_runs_out_first():
    sm90 = ARCHS["sm_90"]
    assert occupancy(sm90, 255, 0, 8) == (1, 0.125)       # 255 registers: 8 warps a block, one block
    assert occupancy(sm90, 32, 0, 4) == (16, 1.0)        # threads: 2048 / 128
    assert occupancy(sm90, 32, 120_000, 4) == (1, 0.0625)  # shared memory: 228 KiB / (120000 + 1 KiB)
    assert occupancy(ARCHS["sm_120"], 32, 120_000, 4)[0] == 0  # over sm_120's 99 KiB a block


def test_the_docs_block_is_the_committed_table():
    page = (REPO / "docs" / "kernels.md").read_text()
    block = page.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    table = json.loads(TABLE.read_text()) | {"path": "docs/results/cpu/kernels_aot.json"}
    assert block == markdown_table(table), ("docs/kernels.md's kernels-aot block is stale: run python -m "
                                            "peagle_lab.kernels.aot_table --markdown docs/results/cpu/kernels_aot.json "
                                            "docs/kernels.md")
