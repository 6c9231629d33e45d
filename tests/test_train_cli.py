"""The CLI: a smoke run that is killed mid-way resumes to the very same head."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.heads.io import load_head
from peagle_lab.testing import tiny_target
from peagle_lab.train.cli import main
from peagle_lab.train.vocab import draft_to_target_ids

STEPS = 60
ARGS = ["train", "--tiny", "--method", "peagle", "--steps", str(STEPS), "--ckpt-every", "5", "--batch-size", "4",
        "--row-len", "64",
        "--k-train", "4", "--draft-vocab-size", "64", "--tiny-examples", "48", "--lr", "3e-3", "--no-eval",
        "--no-progress", "--log-every", "1"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def cli(*extra) -> list[str]:
    return [sys.executable, "-m", "peagle_lab.train.cli", *ARGS, *extra]


def steps_in_log(run) -> list[int]:
    return [r["step"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if "event" not in r]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    full, killed = root / "full", root / "killed"
    subprocess.run(cli("--out", str(full)), check=True, env=ENV, capture_output=True, timeout=300)

    proc = subprocess.Popen(cli("--out", str(killed)), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (killed / "checkpoints" / "latest.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)  # no clean-up code runs: a real crash
    proc.wait(timeout=30)
    at_kill = steps_in_log(killed)
    saved = json.loads((killed / "checkpoints" / "latest.json").read_text())["step"]
    resumed = subprocess.run(cli("--out", str(killed), "--resume"), env=ENV, capture_output=True, text=True,
                             timeout=300)
    return full, killed, proc.returncode, at_kill, saved, resumed


def test_killed_run_resumes_from_its_checkpoint_to_the_same_head(runs):
    full, killed, rc, at_kill, saved, resumed = runs
    assert rc == -signal.SIGKILL and max(at_kill) < STEPS  # it really died mid-way
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = [json.loads(line) for line in (killed / "log.jsonl").read_text().splitlines()]
    assert {"event": "resume", "step": saved, "from": f"step-{saved:07d}"} in log
    assert steps_in_log(killed) == list(range(1, STEPS + 1))  # no step lost or repeated
    assert json.loads((killed / "summary.json").read_text())["steps"] == STEPS
    # On a CPU the continuation is bitwise identical: same data order, COD draws, optimiser state.
    a, b = load_file(str(full / "head" / "model.safetensors")), load_file(str(killed / "head" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    full_summary = json.loads((full / "summary.json").read_text())
    assert full_summary["last_loss"] == json.loads((killed / "summary.json").read_text())["last_loss"]
    assert full_summary["last_loss"] < full_summary["first_loss"]


def test_trained_head_loads_and_decodes_losslessly(runs):
    full = runs[0]
    target = tiny_target(seed=0)
    drafter = load_head(full / "head", target)
    prompts = [[5, 6, 7, 8], [40, 41, 3], [9] * 6]
    base = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=20)).generate(prompts).tokens
    spec = SpecDecoder(target, drafter, SpecConfig(method="peagle", num_speculative_tokens=4, max_new_tokens=20))
    assert spec.generate(prompts).tokens == base
    assert "P-EAGLE head" in (full / "head" / "README.md").read_text()


def test_errors_are_reported_not_raised(tmp_path, capsys):
    assert main(["train", "--method", "eagle3", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "--data is required" in capsys.readouterr().err
    assert main(["train", "--tiny", "--method", "eagle3", "--out", str(tmp_path), "--steps", "0"]) == 2
    assert "steps=0" in capsys.readouterr().err


def test_a_fresh_head_declares_the_default_drafting_window(runs):
    from peagle_lab.config import DEFAULT_SLIDING_WINDOW

    layer = json.loads((runs[0] / "head" / "config.json").read_text())["transformer_layer_config"]
    assert layer["sliding_window"] == DEFAULT_SLIDING_WINDOW and set(layer["layer_types"]) == {"sliding_attention"}
    # and its card says so (a card without the section once shipped beside a config with the window)
    assert f"declares a {DEFAULT_SLIDING_WINDOW}-position drafting attention window" in \
        (runs[0] / "head" / "README.md").read_text()


def test_a_bad_sliding_window_fails_before_anything_loads(tmp_path, capsys):
    assert main(["train", "--tiny", "--method", "peagle", "--out", str(tmp_path), "--sliding-window", "0"]) == 2
    assert "--sliding-window '0' must be a positive int or 'none'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_eval_exports_a_bf16_head_with_its_card(runs, tmp_path):
    full = runs[0]
    common = ["--tiny", "--no-progress"]
    assert main(["data", "--out", str(tmp_path / "data"), "--num-magpie", "16", "--max-code-prompts", "16",
                 "--max-math-prompts", "8", "--max-writing-prompts", "8",
                 "--response-max-tokens", "8", "--concurrency", "16", "--heldout-fraction", "0.3", *common]) == 0
    assert main(["eval", "--run", str(full), "--data", str(tmp_path / "data"), "--export", str(tmp_path / "heads"),
                 "--eval-ks", "2,4", "--eval-prompts", "3", "--eval-max-new-tokens", "8", *common]) == 0
    head = tmp_path / "heads" / full.name
    summary = json.loads((head / "summary.json").read_text())
    assert [r["k"] for r in summary["acceptance"]] == [2, 4] and summary["heldout_loss"] > 0
    tensors = load_file(str(head / "model.safetensors"))
    assert all(t.dtype in (torch.bfloat16, torch.long, torch.bool) for t in tensors.values())  # shipped in bf16
    card = (head / "README.md").read_text()
    assert "| K | AL |" in card and "python -m peagle_lab.train.cli eval" in card
    assert "## Drafting window" in card  # the exported card keeps the window's section
    drafter = load_head(head, tiny_target(seed=0))  # loads back and fits the target
    assert drafter.config.method == "peagle"


def test_warm_start_continues_a_head_and_adds_up_its_token_passes(runs, tmp_path):
    """--init-from: the head's weights and vocabulary, a fresh schedule, cumulative token passes."""
    full = runs[0]
    first = json.loads((full / "summary.json").read_text())
    out = tmp_path / "continued"
    r = subprocess.run([sys.executable, "-m", "peagle_lab.train.cli", "train", "--tiny", "--method", "peagle",
                        "--init-from", str(full / "head"), "--steps", "3", "--lr", "0", "--batch-size", "4",
                        "--row-len", "64", "--k-train", "4", "--tiny-examples", "48", "--no-eval", "--no-progress",
                        "--ckpt-every", "0", "--out", str(out)], env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    second = json.loads((out / "summary.json").read_text())
    assert second["prior"]["tokens"] == first["tokens"] > 0
    assert second["cumulative"]["tokens"] == first["tokens"] + second["tokens"]
    assert [run["steps"] for run in second["cumulative"]["runs"]] == [STEPS, 3]
    a, b = load_file(str(full / "head" / "model.safetensors")), load_file(str(out / "head" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)  # lr 0: the warm start is exactly the head it read
    assert "token passes in all (2 run(s), warm-started from" in (out / "head" / "README.md").read_text()
    bad = subprocess.run([sys.executable, "-m", "peagle_lab.train.cli", "train", "--tiny", "--method", "eagle3",
                          "--init-from", str(full / "head"), "--steps", "1", "--out", str(tmp_path / "x")],
                         env=ENV, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "is a peagle head" in bad.stderr


def test_a_warm_start_can_grow_the_draft_vocabulary(runs, tmp_path):
    """--init-from with a larger --draft-vocab-size: the head's ids plus the data's most frequent others."""
    full = runs[0]
    head = load_head(full / "head", tiny_target(seed=0))
    size = head.config.draft_vocab_size + 8
    out = tmp_path / "grown"
    r = subprocess.run([sys.executable, "-m", "peagle_lab.train.cli", "train", "--tiny", "--method", "peagle",
                        "--init-from", str(full / "head"), "--draft-vocab-size", str(size), "--steps", "2",
                        "--batch-size", "4", "--row-len", "64", "--k-train", "4", "--tiny-examples", "48", "--no-eval",
                        "--no-progress", "--ckpt-every", "0", "--out", str(out)], env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    grown = load_head(out / "head", tiny_target(seed=0))
    assert grown.config.draft_vocab_size == size
    assert set(draft_to_target_ids(head).tolist()) < set(draft_to_target_ids(grown).tolist())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["draft_vocab_size"] == size and summary["vocab_coverage"] >= json.loads(
        (full / "summary.json").read_text())["vocab_coverage"]
    bad = subprocess.run([sys.executable, "-m", "peagle_lab.train.cli", "train", "--tiny", "--method", "peagle",
                          "--init-from", str(full / "head"), "--draft-vocab-size", "4", "--steps", "1",
                          "--out", str(tmp_path / "x")], env=ENV, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "can only grow its draft vocabulary" in bad.stderr


def test_a_warm_start_can_widen_the_mlps(runs, tmp_path):
    """--init-from with a larger --intermediate-size: the head's units kept (lr 0), the new ones' outputs at zero."""
    full = runs[0]
    old = load_file(str(full / "head" / "model.safetensors"))
    width = old["layers.0.mlp.down_proj.weight"].shape[1]
    out = tmp_path / "wide"
    base = [sys.executable, "-m", "peagle_lab.train.cli", "train", "--tiny", "--method", "peagle", "--init-from",
            str(full / "head"), "--batch-size", "4", "--row-len", "64", "--k-train", "4", "--tiny-examples", "48",
            "--no-eval", "--no-progress", "--ckpt-every", "0"]
    r = subprocess.run([*base, "--intermediate-size", str(width + 32), "--steps", "2", "--lr", "0", "--out", str(out)],
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert load_head(out / "head", tiny_target(seed=0)).config.intermediate_size == width + 32
    assert json.loads((out / "summary.json").read_text())["intermediate_size"] == width + 32
    assert f"(1 layer(s), MLP width {width + 32})" in (out / "head" / "README.md").read_text()
    resumed = subprocess.run([*base, "--steps", "2", "--resume", "--out", str(out)], env=ENV, capture_output=True,
                             text=True, timeout=300)  # without the width its checkpoint was written with
    assert resumed.returncode == 2 and "its drafter has other shapes than this run's" in resumed.stderr
    assert "--intermediate-size of the run that wrote it" in resumed.stderr, resumed.stderr[-2000:]
    new = load_file(str(out / "head" / "model.safetensors"))
    for name, w in old.items():
        if name.endswith("down_proj.weight"):
            assert torch.equal(new[name][:, :width], w) and torch.count_nonzero(new[name][:, width:]) == 0, name
        elif name.endswith(("gate_proj.weight", "up_proj.weight")):
            assert torch.equal(new[name][:width], w) and new[name].shape[0] == width + 32, name
        else:
            assert torch.equal(new[name], w), name
    for size, message in ((width - 1, "can only widen its MLPs"), (0, "--intermediate-size 0 is not a positive")):
        bad = subprocess.run([*base, "--intermediate-size", str(size), "--steps", "1", "--out", str(tmp_path / "x")],
                             env=ENV, capture_output=True, text=True, timeout=300)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr[-2000:]


def test_top1_weight_reaches_the_objective_the_summary_and_the_card(tmp_path):
    out = tmp_path / "top1"
    base = [sys.executable, "-m", "peagle_lab.train.cli", "train", "--tiny", "--method", "peagle", "--batch-size", "4",
            "--row-len", "64", "--k-train", "4", "--draft-vocab-size", "64", "--tiny-examples", "48", "--no-eval",
            "--no-progress", "--ckpt-every", "0"]
    r = subprocess.run([*base, "--top1-weight", "0.3", "--steps", "2", "--out", str(out)], env=ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["config"]["top1_weight"] == 0.3
    card = (out / "head" / "README.md").read_text()
    assert "plus 0.3 × the hard cross-entropy of the target's top draft token" in card
    bad = subprocess.run([*base, "--top1-weight", "11", "--steps", "1", "--out", str(tmp_path / "x")], env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "top1_weight=11.0 is out of range" in bad.stderr, bad.stderr[-2000:]


def test_the_summary_times_the_first_step_and_loads_no_compile_cache_unasked(runs):
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert 0 < summary["first_step_s"] < summary["wall_s"]
    assert summary["compile_cache"] is None  # no --compile-cache, and an eager CPU run compiles nothing
