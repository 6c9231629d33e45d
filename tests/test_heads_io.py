"""Drafter checkpoints: speculators and research formats round-trip; misfits are refused."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from peagle_lab.models.checkpoints import CheckpointError
from peagle_lab.heads.io import head_digest, load_head, save_head
from peagle_lab.testing import tiny_drafter, tiny_target


@pytest.fixture(scope="module")
def target():
    return tiny_target()


def same_outputs(a, b, target):
    c, T, H = 2, 5, target.config.hidden_size
    ids = torch.randint(0, target.config.vocab_size, (c, T))
    ids[:, -1] = a.config.mask_token_id or 0
    h = torch.randn(c, T, H)
    pos = torch.arange(T).expand(c, T)
    return torch.equal(a(ids, h, pos).logits, b(ids, h, pos).logits) and (
        a.mask_hidden is None or torch.equal(a.shared_hidden(), b.shared_hidden()))


@pytest.mark.parametrize("method, layers", [("eagle3", 1), ("peagle", 2)])
def test_speculators_round_trip(tmp_path, target, method, layers):
    d = tiny_drafter(target, method, num_hidden_layers=layers, draft_vocab_size=40)
    with torch.no_grad():
        d.d2t.copy_(torch.arange(40) % 7)
        if method == "peagle":
            d.mask_embedding.normal_()
    save_head(d, tmp_path / "h")
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    assert cfg["speculators_model_type"] == method and cfg["draft_vocab_size"] == 40
    again = load_head(tmp_path / "h", target)
    assert torch.equal(again.d2t, d.d2t)
    assert same_outputs(d, again, target)


def test_sharding_keeps_every_shard_under_15_mib(tmp_path):
    big = tiny_target(vocab_size=4096, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                      num_key_value_heads=3, head_dim=64)
    d = tiny_drafter(big, "peagle")
    save_head(d, tmp_path / "h")
    shards = sorted((tmp_path / "h").glob("*.safetensors"))
    assert len(shards) > 1 and all(f.stat().st_size <= 15 * 2**20 + 4096 for f in shards)
    assert same_outputs(d, load_head(tmp_path / "h", big), big)


def test_research_format_with_midlayer_names(tmp_path, target):
    d = tiny_drafter(target, "eagle3")
    sd = {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v
          for k, v in d.state_dict().items() if k != "t2d"}
    (tmp_path / "r").mkdir()
    save_file(sd, str(tmp_path / "r" / "model.safetensors"))
    c = target.config
    (tmp_path / "r" / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": c.hidden_size, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": c.intermediate_size,
        "vocab_size": c.vocab_size, "draft_vocab_size": c.vocab_size, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 1024,
        "eagle_aux_hidden_state_layer_ids": list(c.taps)}))
    again = load_head(tmp_path / "r", target)
    assert same_outputs(d, again, target)


def test_corrupted_shard_is_detected(tmp_path, target):
    save_head(tiny_drafter(target, "peagle"), tmp_path / "h")
    f = tmp_path / "h" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(CheckpointError, match="sha256 does not match"):
        load_head(tmp_path / "h")


def test_a_heads_digest_follows_its_weights_not_its_folder(tmp_path, target):
    save_head(tiny_drafter(target, "peagle", seed=1), tmp_path / "a")
    save_head(tiny_drafter(target, "peagle", seed=1), tmp_path / "copy")
    save_head(tiny_drafter(target, "peagle", seed=2), tmp_path / "other")
    a = head_digest(tmp_path / "a")
    assert len(a) == 16 and a == head_digest(tmp_path / "copy") != head_digest(tmp_path / "other")
    with pytest.raises(CheckpointError, match="no weights"):
        head_digest(tmp_path)


def test_head_for_another_target_is_refused(tmp_path, target):
    save_head(tiny_drafter(tiny_target(vocab_size=50), "peagle"), tmp_path / "h")
    with pytest.raises(ValueError, match="does not fit the target"):
        load_head(tmp_path / "h", target)


def test_unknown_tensor_is_named(tmp_path, target):
    save_head(tiny_drafter(target, "eagle3"), tmp_path / "h")
    f = tmp_path / "h" / "model.safetensors"
    from safetensors.torch import load_file
    sd = load_file(str(f))
    sd["surprise.weight"] = torch.zeros(2)
    save_file(sd, str(f))
    (tmp_path / "h" / "checksums.json").unlink()
    with pytest.raises(CheckpointError, match="unknown \\['surprise.weight'\\]"):
        load_head(tmp_path / "h")


def test_a_drafting_window_round_trips_as_vllm_reads_it(tmp_path, target):
    # vLLM's Llama layers read sliding_window where layer_types says "sliding_attention" for each draft layer.
    import dataclasses

    d = tiny_drafter(target, "peagle", num_hidden_layers=2)
    d.config = dataclasses.replace(d.config, sliding_window=64)
    save_head(d, tmp_path / "h")
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    layer = cfg["transformer_layer_config"]
    assert layer["sliding_window"] == 64 and layer["layer_types"] == ["sliding_attention"] * 2
    assert load_head(tmp_path / "h", target).config.sliding_window == 64
    save_head(tiny_drafter(target, "peagle"), tmp_path / "full")
    assert "layer_types" not in json.loads((tmp_path / "full" / "config.json").read_text())["transformer_layer_config"]
    assert load_head(tmp_path / "full", target).config.sliding_window is None


@pytest.mark.parametrize("layer_types, window, message", [
    (["sliding_attention", "full_attention"], 64, "mixes sliding and full attention"),
    (["sliding_attention"], 64, "for each of the 2 draft layers"),
    (["sliding_attention"] * 2, 0, "sliding_window=0 must be a positive int"),
    (["chunked_attention"] * 2, 64, "must name 'sliding_attention' or 'full_attention'"),
])
def test_a_bad_drafting_window_is_named(tmp_path, target, layer_types, window, message):
    save_head(tiny_drafter(target, "peagle", num_hidden_layers=2), tmp_path / "h")
    path = tmp_path / "h" / "config.json"
    cfg = json.loads(path.read_text())
    cfg["transformer_layer_config"].update(layer_types=layer_types, sliding_window=window)
    path.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=message):
        load_head(tmp_path / "h", target)


def test_default_head_names_the_folder_its_weights_came_from():
    """A head that cannot serve the target falls back to random, with no folder to fingerprint."""
    from peagle_lab.heads import default_drafter, default_head

    target = tiny_target()
    drafter, origin, path = default_head(target, "peagle", seed=3)
    assert (origin, path) == ("random (untrained)", None)  # the shipped heads are SmolLM2's, not the tiny target's
    assert drafter.config.method == "peagle"
    assert default_drafter(target, "peagle", seed=3)[1] == origin
