"""Loading and saving targets: HF folders round-trip; bad files give errors naming the file."""
from __future__ import annotations

import json

import pytest
import torch

from peagle_lab.models.checkpoints import (
    CheckpointError, atomic_path, load_hf_folder, load_target, save_hf_folder, write_json,
)
from peagle_lab.testing import tiny_target


def test_hf_folder_round_trip(tmp_path):
    model = tiny_target(seed=5)
    save_hf_folder(model, tmp_path / "m")
    again = load_hf_folder(tmp_path / "m")
    ids = torch.randint(0, 96, (1, 9))
    pos = torch.arange(9)[None]
    assert torch.equal(model(ids, pos).logits, again(ids, pos).logits)
    assert again.lm_head.weight is again.embed_tokens.weight  # tied stays tied


def test_unknown_path(tmp_path):
    with pytest.raises(CheckpointError, match="no such model file or folder"):
        load_target(tmp_path / "nope")


def test_truncated_gguf_names_the_file(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 10)
    with pytest.raises(CheckpointError, match=r"model\.gguf: not a readable GGUF file"):
        load_target(bad)


def test_truncated_safetensors_names_the_file(tmp_path):
    save_hf_folder(tiny_target(), tmp_path / "m")
    f = tmp_path / "m" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: cannot read"):
        load_hf_folder(tmp_path / "m")


@pytest.mark.parametrize("patch, message", [
    ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
    ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope type 'yarn' is not supported"),
    ({"mlp_bias": True}, "mlp_bias=true is not supported"),
    ({"use_sliding_window": True}, "sliding-window attention is not supported"),
    ({"num_key_value_heads": 3}, "must be a multiple of num_key_value_heads=3"),
])
def test_unsupported_config_fields(tmp_path, patch, message):
    save_hf_folder(tiny_target(), tmp_path / "m")
    cfg_file = tmp_path / "m" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg.update(patch)
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=message) as info:
        load_hf_folder(tmp_path / "m")
    assert "config.json" in str(info.value)


def test_pickles_are_refused(tmp_path):
    save_hf_folder(tiny_target(), tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").rename(tmp_path / "m" / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="never unpickles"):
        load_hf_folder(tmp_path / "m")


def test_wrong_tensor_shape_is_named(tmp_path):
    from safetensors.torch import load_file, save_file
    save_hf_folder(tiny_target(), tmp_path / "m")
    f = tmp_path / "m" / "model.safetensors"
    sd = load_file(str(f))
    sd["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(3, 3)
    save_file(sd, str(f))
    with pytest.raises(CheckpointError, match=r"q_proj.weight has shape \(3, 3\)"):
        load_hf_folder(tmp_path / "m")


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
