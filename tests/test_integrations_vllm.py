"""vLLM integration without vLLM: exported folders pass vLLM's contract and round-trip, every public
layout imports to the same computation, bad heads get our clear errors, the driver writes our schema."""
from __future__ import annotations

import argparse
import json
import shlex

import pytest
import torch
from safetensors.torch import load_file, save_file

from peagle_lab.integrations.vllm import (
    VllmHeadError, check_head_folder, export_for_vllm, import_head, serve_lines, speculative_config,
)
from peagle_lab.integrations.vllm_bench import VllmUnavailable, find_vllm_python, rows_from_result, write_results
from peagle_lab.integrations.vllm_check import draft_agreement, draft_positions, judge
from peagle_lab.integrations.vllm_runner import counter_delta
from peagle_lab.models.checkpoints import save_hf_folder
from peagle_lab.testing import tiny_drafter, tiny_target

H = 64  # tiny_target's hidden size


@pytest.fixture(scope="module")
def target():
    return tiny_target()


@pytest.fixture(scope="module")
def target_dir(target, tmp_path_factory):
    return save_hf_folder(target, tmp_path_factory.mktemp("t") / "target")


def drafter(target, method="peagle", layers=1, draft_vocab=None, seed=1):
    d = tiny_drafter(target, method, num_hidden_layers=layers, draft_vocab_size=draft_vocab, seed=seed)
    with torch.no_grad():
        if draft_vocab:
            d.d2t.copy_(torch.arange(draft_vocab) % 5)
        if method == "peagle":
            d.mask_embedding.normal_(generator=torch.Generator().manual_seed(seed))
    return d


def same_computation(a, b, target) -> bool:
    """Equal logits and pre-norm hidden states on ids that include the mask token."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, target.config.vocab_size, (2, 6), generator=g)
    ids[:, -2:] = a.config.mask_token_id or 0
    h = torch.randn(2, 6, H, generator=g)
    pos = torch.arange(6).expand(2, 6)
    oa, ob = a(ids, h, pos), b(ids, h, pos)
    shared = a.mask_hidden is None or torch.equal(a.shared_hidden(), b.shared_hidden())
    return torch.equal(oa.logits, ob.logits) and torch.equal(oa.hidden, ob.hidden) and shared and \
        torch.equal(a.to_target_ids(torch.arange(a.config.draft_vocab_size)),
                    b.to_target_ids(torch.arange(b.config.draft_vocab_size)))


def write_head(path, config: dict, tensors: dict, bin_file: bool = False):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    if bin_file:
        torch.save(tensors, path / "pytorch_model.bin")
    else:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"))
    return path


def exported(tmp_path, target, target_dir, method="peagle", layers=1, draft_vocab=None, fmt="vllm"):
    d = drafter(target, method, layers, draft_vocab)
    out = export_for_vllm(d, tmp_path / f"{method}-{fmt}", fmt, target_dir, k=3)
    return d, out, json.loads((out / "config.json").read_text()), load_file(str(out / "model.safetensors"))


# ------------------------------------------------------------------ export round trips

@pytest.mark.parametrize("method, layers, draft_vocab, fmt", [
    ("eagle3", 1, None, "vllm"), ("eagle3", 2, 40, "speculators"),
    ("peagle", 2, None, "vllm"), ("peagle", 1, 40, "speculators"),
])
def test_export_round_trip(tmp_path, target, target_dir, method, layers, draft_vocab, fmt):
    d, out, cfg, sd = exported(tmp_path, target, target_dir, method, layers, draft_vocab, fmt)
    spec = check_head_folder(out)
    assert (spec.method, spec.layout, spec.num_hidden_layers) == (method, fmt, layers)
    assert same_computation(d, import_head(out, target), target)
    assert ("d2t" in sd) == (draft_vocab is not None)  # vLLM has no slot for d2t with a full vocabulary
    assert "mask_embedding" not in sd and "t2d" in sd if fmt == "speculators" else "t2d" not in sd


@pytest.mark.parametrize("fmt", ["vllm", "speculators"])
def test_the_drafting_window_is_exported_where_vllm_reads_it(tmp_path, target, target_dir, fmt):
    import dataclasses

    d = drafter(target, "peagle", 2, None)
    d.config = dataclasses.replace(d.config, sliding_window=8)
    out = export_for_vllm(d, tmp_path / fmt, fmt, target_dir, k=3)
    cfg = json.loads((out / "config.json").read_text())
    layer = cfg.get("transformer_layer_config", cfg)  # the flat vLLM layout keeps the layer keys at the top
    assert layer["sliding_window"] == 8 and layer["layer_types"] == ["sliding_attention"] * 2
    assert import_head(out, target).config.sliding_window == 8
    plain = export_for_vllm(drafter(target, "peagle", 2, None), tmp_path / f"{fmt}-full", fmt, target_dir, k=3)
    cfg = json.loads((plain / "config.json").read_text())
    assert "layer_types" not in cfg.get("transformer_layer_config", cfg)


def test_vllm_config_states_every_semantic_choice(tmp_path, target, target_dir):
    d, _, cfg, sd = exported(tmp_path, target, target_dir, "peagle", 2)
    taps = list(target.config.taps)
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["mask_token_id"] == d.config.mask_token_id
    assert cfg["eagle_aux_hidden_state_layer_ids"] == cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == taps
    assert cfg["norm_before_residual"] is False
    assert cfg["norm_before_fc"] is cfg["fc_norm"] is cfg["norm_output"] is cfg["eagle_config"]["norm_before_fc"] is False
    assert cfg["rope_theta"] == target.config.rope_theta and cfg["rms_norm_eps"] == target.config.rms_norm_eps
    assert cfg["target_hidden_size"] == H and cfg["num_aux_hidden_states"] == len(taps)
    assert sd["mask_hidden"].shape == (1, 3 * H)
    assert cfg["peagle_lab"]["speculative_config"]["parallel_drafting"] is True


def test_learned_mask_row_travels_in_embed_tokens(tmp_path, target, target_dir):
    d, _, _, sd = exported(tmp_path, target, target_dir, "peagle")
    table, mask = target.embed_tokens.weight, d.config.mask_token_id
    assert torch.equal(sd["embed_tokens.weight"][mask], d.mask_embedding.detach())
    others = torch.arange(table.shape[0]) != mask
    assert torch.equal(sd["embed_tokens.weight"][others], table[others].detach())


def test_embed_tokens_left_out_when_it_equals_the_targets(tmp_path, target, target_dir):
    _, _, _, sd = exported(tmp_path, target, target_dir, "eagle3")
    assert "embed_tokens.weight" not in sd  # vLLM then shares the target's table
    d = tiny_drafter(target, "peagle")  # mask_embedding starts as the token's own row
    out = export_for_vllm(d, tmp_path / "p", target_dir=target_dir)
    assert "embed_tokens.weight" not in load_file(str(out / "model.safetensors"))


def test_bfloat16_export(tmp_path, target, target_dir):
    out = export_for_vllm(drafter(target), tmp_path / "bf", target_dir=target_dir, dtype=torch.bfloat16)
    sd = load_file(str(out / "model.safetensors"))
    assert sd["fc.weight"].dtype == torch.bfloat16 and json.loads((out / "config.json").read_text())[
        "torch_dtype"] == "bfloat16"
    assert sd["embed_tokens.weight"].dtype == torch.float32  # rounding it would replace every row in vLLM


def test_exporter_refuses_what_vllm_cannot_express(tmp_path, target):
    d = tiny_drafter(target, "eagle3")
    with torch.no_grad():
        d.d2t[3] = 1  # a permuted full-size vocabulary
    with pytest.raises(VllmHeadError, match="not all zeros"):
        export_for_vllm(d, tmp_path / "x")
    p = drafter(target)
    p._embed = None
    with pytest.raises(VllmHeadError, match="embedding table"):
        export_for_vllm(p, tmp_path / "y")
    with pytest.raises(ValueError, match="format="):
        export_for_vllm(tiny_drafter(target, "eagle3"), tmp_path / "z", format="gguf")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# ------------------------------------------------------------------ import of public layouts

def flat_config(target, **extra) -> dict:
    c = target.config
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
            "intermediate_size": c.intermediate_size, "num_hidden_layers": 1, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": c.vocab_size, "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": c.rope_theta, "max_position_embeddings": 1024, **extra}


def tensors_of(d, drop=("t2d", "mask_embedding")) -> dict:
    return {k: v.detach().clone() for k, v in d.state_dict().items() if k not in drop}


def test_aws_peagle_layout(tmp_path, target):
    """vLLM/AWS P-EAGLE: flat config, ptd_token_id, mask_hidden [1, 3H], the target's embeddings."""
    d = tiny_drafter(target, "peagle")
    sd = tensors_of(d, drop=("t2d", "mask_embedding", "d2t"))
    sd["mask_hidden"] = sd["mask_hidden"].reshape(1, -1)
    cfg = flat_config(target, ptd_token_id=d.config.mask_token_id,
                      eagle_aux_hidden_state_layer_ids=list(target.config.taps))
    head = write_head(tmp_path / "aws", cfg, sd)
    assert check_head_folder(head).method == "peagle"
    got = import_head(head, target)
    assert torch.equal(got.mask_embedding, target.embed_tokens.weight[d.config.mask_token_id])  # vLLM: target's row
    assert same_computation(d, got, target)


def test_speculators_peagle_with_trained_embeddings(tmp_path, target):
    """speculators 'peagle': mask_hidden [1, 1, 3H] and its own (trained) embedding table."""
    d = tiny_drafter(target, "peagle", num_hidden_layers=2)
    from peagle_lab.heads.io import head_config_dict

    cfg = head_config_dict(d.config)
    del cfg["norm_before_residual"]  # vLLM's default for peagle: False
    sd = tensors_of(d)
    sd["mask_hidden"] = sd["mask_hidden"].reshape(1, 1, -1)
    own = target.embed_tokens.weight.detach() + 0.01 * torch.randn(target.embed_tokens.weight.shape)
    sd["embed_tokens.weight"] = own
    got = import_head(write_head(tmp_path / "spec", cfg, sd), target)
    assert torch.equal(got._embed, own) and not got.config.norm_before_residual  # vLLM keeps a differing table
    assert torch.equal(got.mask_embedding, own[d.config.mask_token_id])
    ref = tiny_drafter(target, "peagle", num_hidden_layers=2).attach_embeddings(own)
    with torch.no_grad():
        ref.mask_embedding.copy_(own[d.config.mask_token_id])
    assert same_computation(ref, got, target)


def test_speculators_eagle3_defaults_norm_before_residual_true(tmp_path, target):
    from peagle_lab.heads.io import head_config_dict

    d = tiny_drafter(target, "eagle3")
    cfg = head_config_dict(d.config)
    del cfg["norm_before_residual"]
    head = write_head(tmp_path / "e3", cfg, tensors_of(d, ("t2d", "d2t")))
    assert check_head_folder(head).norm_before_residual is True
    assert import_head(head, target).config.norm_before_residual is True


def test_research_eagle3_bin_with_midlayer_names(tmp_path, target):
    """yuhuili/EAGLE3-*: midlayer.*, pytorch_model.bin, no tap ids (the target's defaults apply)."""
    d = tiny_drafter(target, "eagle3", draft_vocab_size=40)
    with torch.no_grad():
        d.d2t.copy_(torch.arange(40) % 3)
    sd = {("midlayer." + k[9:] if k.startswith("layers.0.") else k): v for k, v in tensors_of(d, ()).items()}
    head = write_head(tmp_path / "r", flat_config(target, draft_vocab_size=40), sd, bin_file=True)
    got = import_head(head, target)
    assert got.config.aux_layer_ids == tuple(target.config.taps) and same_computation(d, got, target)


def test_import_tolerates_model_prefix_and_unused_hidden_norms(tmp_path, target):
    d = tiny_drafter(target, "eagle3", num_hidden_layers=2)
    sd = {"model." + k: v for k, v in tensors_of(d, ("t2d", "d2t")).items()}
    sd["model.layers.1.hidden_norm.weight"] = torch.ones(H)  # vLLM builds it, never uses it
    head = write_head(tmp_path / "m", flat_config(target, num_hidden_layers=2,
                                                  eagle_aux_hidden_state_layer_ids=list(target.config.taps)), sd)
    assert same_computation(d, import_head(head, target), target)
    with pytest.raises(VllmHeadError, match="start with 'model.'"):
        check_head_folder(head)  # … but vLLM itself would reject the prefix


def test_pickled_objects_are_never_loaded(tmp_path, target):
    head = tmp_path / "evil"
    head.mkdir()
    (head / "config.json").write_text(json.dumps(flat_config(target)))
    torch.save({"fc.weight": argparse.Namespace(x=1)}, head / "pytorch_model.bin")
    with pytest.raises(VllmHeadError, match="not a plain tensor checkpoint"):
        import_head(head, target)


# ------------------------------------------------------------------ bad heads → our errors

def broken(tmp_path, target, target_dir, edit_cfg=None, edit_sd=None):
    _, out, cfg, sd = exported(tmp_path, target, target_dir, "peagle")
    if edit_cfg:
        edit_cfg(cfg)
    if edit_sd:
        edit_sd(sd)
    return write_head(tmp_path / "bad", cfg, sd)


@pytest.mark.parametrize("edit_cfg, edit_sd, message", [
    (None, lambda sd: sd.pop("mask_hidden"), "no mask_hidden tensor"),
    (lambda c: (c.pop("mask_token_id"), c.pop("pard_token")), None, "names no mask-token id"),
    (lambda c: c.update(pard_token=3), None, "mask-token keys disagree"),
    (None, lambda sd: sd.update(mask_hidden=torch.zeros(1, 2 * H)), "mask_hidden has 128 elements"),
    (None, lambda sd: sd.update({"layers.0.self_attn.q_proj.weight": torch.zeros(64, H)}),
     r"q_proj.weight has shape \(64, 64\), vLLM expects \(64, 128\)"),
    (None, lambda sd: sd.update(surprise=torch.zeros(2)), r"unknown tensors \['surprise'\]"),
    (None, lambda sd: sd.update({"layers.0.self_attn.q_proj.bias": torch.zeros(64)}), "silently drop"),
    (None, lambda sd: sd.update({"model.fc.weight": sd.pop("fc.weight")}), "start with 'model.'"),
    (None, lambda sd: sd.pop("norm.weight"), r"missing tensors \['norm.weight'\]"),
    (None, lambda sd: sd.update(d2t=torch.zeros(96, dtype=torch.long)), "d2t is present"),
    (None, lambda sd: sd.update(mask_embedding=torch.zeros(H)), "peagle_lab's own tensor"),
    (lambda c: c.update(mask_token_id=500, pard_token=500), None, "outside the vocabulary"),
    (lambda c: c["eagle_config"].update(norm_before_fc=True), None, "norm_before_fc=True"),
    (lambda c: c.update(fc_norm=True), None, "fc_norm=True"),
    (lambda c: (c.pop("num_aux_hidden_states"), c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[1, 2])),
     None, "sizes fc for 2 taps"),
    (lambda c: c.update(architectures=["LlamaForCausalLM"]), None, "not an EAGLE-3 drafter"),
    (lambda c: c.pop("hidden_size"), None, "no 'hidden_size'"),
])
def test_bad_heads_get_clear_errors(tmp_path, target, target_dir, edit_cfg, edit_sd, message):
    head = broken(tmp_path, target, target_dir, edit_cfg, edit_sd)
    with pytest.raises(VllmHeadError, match=message):
        check_head_folder(head)


def test_speculators_peagle_needs_top_level_mask_token_id(tmp_path, target, target_dir):
    _, out, cfg, sd = exported(tmp_path, target, target_dir, "peagle", fmt="speculators")
    cfg.pop("mask_token_id")
    with pytest.raises(VllmHeadError, match="top-level mask_token_id"):
        check_head_folder(write_head(tmp_path / "bad", cfg, sd))


# ------------------------------------------------------------------ speculative_config and CLI lines

def test_speculative_config(tmp_path):
    sc = speculative_config("peagle", tmp_path, 7)
    assert sc == {"method": "eagle3", "model": str(tmp_path.resolve()), "num_speculative_tokens": 7,
                  "parallel_drafting": True, "draft_sample_method": "probabilistic"}
    assert speculative_config("eagle3", tmp_path, 3)["parallel_drafting"] is False
    assert speculative_config("baseline", tmp_path, 3) is None
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        speculative_config("peagle", tmp_path, 0)
    lines = serve_lines(tmp_path, "peagle", tmp_path, 7)
    serve = next(line for line in lines.splitlines() if line.startswith("vllm serve"))
    assert json.loads(shlex.split(serve)[-1]) == sc


def test_cli_export_reads_a_shared_mask_row_from_the_target(tmp_path, target, target_dir):
    """A head without its own table (AWS layout) keeps the target's mask row, also without a loaded target."""
    from peagle_lab.integrations.vllm import import_for_export

    d = tiny_drafter(target, "peagle")
    sd = tensors_of(d, drop=("t2d", "mask_embedding", "d2t"))
    head = write_head(tmp_path / "aws", flat_config(target, ptd_token_id=d.config.mask_token_id,
                                                    eagle_aux_hidden_state_layer_ids=list(target.config.taps)), sd)
    got = import_for_export(head, target_dir)
    assert torch.equal(got.mask_embedding, target.embed_tokens.weight[d.config.mask_token_id])
    out = export_for_vllm(got, tmp_path / "out", target_dir=target_dir)
    assert "embed_tokens.weight" not in load_file(str(out / "model.safetensors"))


def test_cli_export_with_random_heads(tmp_path, target_dir, capsys):
    from peagle_lab.integrations.vllm import add_export_arguments, run_export

    p = argparse.ArgumentParser()
    add_export_arguments(p)
    args = p.parse_args(["--out", str(tmp_path / "o"), "--random", "eagle3", "peagle", "--model", str(target_dir),
                         "--no-target", "-k", "4"])
    assert run_export(args) == 0
    printed = capsys.readouterr().out
    assert "--speculative-config" in printed and '"parallel_drafting": true' in printed
    for m in ("eagle3", "peagle"):
        assert check_head_folder(tmp_path / "o" / f"random-{m}-vllm").method == m


# ------------------------------------------------------------------ the parity check and the driver

def test_draft_positions_follow_acceptance():
    out = [3, 7, 9, 4, 8, 2]
    assert draft_positions([[7, 9, 9], [8, 1, 1], [5, 5, 5]], out) == {1: (7, 9, 9), 4: (8, 1, 1)}
    a = draft_agreement([[[7, 9, 9], [8, 1, 1]]], [[[7, 9, 1], [8, 1, 1]]], [out], [out])
    assert (a.equal_tokens, a.tokens, a.blocks, a.first_mismatch) == (5, 6, 2, (0, 1, (7, 9, 9), (7, 9, 1)))
    assert draft_agreement([[[1]]], [[[1]]], [[1, 2]], [[1, 3]]).skipped_prompts == 1


def fake_vllm_run(method, k, outputs, drafts, passes, accepted=0, parallel=None):
    """A runner result for one prompt; ``accepted`` tokens all in its first draft block."""
    n = len(drafts[0]) if drafts else 0
    return {"method": method, "k": k, "parallel_drafting": method == "peagle" if parallel is None else parallel,
            "waves": [{"concurrency": 1, "wall_s": 1.0, "output_tokens": sum(map(len, outputs)),
                       "outputs": outputs, "drafts": drafts, "drafter_passes": passes,
                       "counters": {"num_drafts": n, "num_draft_tokens": n * k, "num_accepted_tokens": accepted,
                                    "accepted_per_position": [int(i < accepted) for i in range(k)]}}]}


def test_judge_passes_equal_runs_and_catches_sequential_drafting():
    out, blocks = [[3, 7, 9, 4, 8, 2]], [[[7, 9, 9], [8, 1, 1]]]
    ours = {"outputs": out, "drafts": blocks, "metrics": {"acceptance_length": 2.5, "num_drafts": 2}}
    v = judge("peagle", 3, fake_vllm_run("peagle", 3, out, blocks, [1, 1], accepted=3), out, ours, trained=True)
    assert v.numbers["al_vllm"] == 2.5
    assert v.ok and v.numbers["draft_agreement"] == 1.0, v.checks
    seq = judge("peagle", 3, fake_vllm_run("peagle", 3, out, blocks, [3, 3], parallel=False), out, ours, trained=False)
    assert not seq.ok and seq.checks["(b) path"][0] is False and seq.checks["(c) acceptance"][0] is None
    far = judge("peagle", 3, fake_vllm_run("peagle", 3, out, blocks, [1, 1], accepted=1), out, ours, trained=True)
    assert far.numbers["al_vllm"] == 1.5
    assert far.checks["(c) acceptance"][0] is False  # AL 1.5 vs 2.5


def test_driver_rows_follow_the_bench_schema(tmp_path):
    result = {"device": "cpu (x86_64, 2 cores)", "versions": {"vllm": "0.32.0", "torch": "2.13.0"},
              "runs": [fake_vllm_run("peagle", 3, [[1, 2, 3, 4]], [[[2, 3, 9]]], [1], accepted=2),
                       {**fake_vllm_run("baseline", 0, [[1, 2, 3, 4]], [], []), "parallel_drafting": False}]}
    result["runs"][1]["waves"][0]["counters"] = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0,
                                                 "accepted_per_position": []}
    rows = rows_from_result(result, "chat", 0.0, 4, 1, "peagle-lab vllm-bench", "abc")
    assert rows[0]["acceptance_length"] == 3.0 and rows[0]["per_position_acceptance"] == [1.0, 1.0, 0.0]
    assert rows[1]["k"] == 0 and rows[0]["source"] == "vllm" and rows[0]["versions"]["vllm"] == "0.32.0"
    info = {"device": "cpu", "torch": "2.13.0", "command": "x", "commit": None, "date": "today"}
    doc = json.loads(write_results(tmp_path / "r.json", rows, {}, info).read_text())
    assert doc["schema"] == "peagle_lab.bench/1" and len(doc["rows"]) == 2


def test_runner_counter_delta_and_missing_vllm(tmp_path, monkeypatch):
    after = {"num_drafts": 5, "num_draft_tokens": 15, "num_accepted_tokens": 4, "accepted_per_position": [3, 1, 0]}
    before = {"num_drafts": 1, "num_draft_tokens": 3, "num_accepted_tokens": 1, "accepted_per_position": []}
    assert counter_delta(after, before)["accepted_per_position"] == [3, 1, 0]
    monkeypatch.delenv("PEAGLE_LAB_VLLM_PYTHON", raising=False)
    with pytest.raises(VllmUnavailable, match="no such Python"):
        find_vllm_python(str(tmp_path / "nope"))


def test_runner_maps_draft_rows_to_requests():
    from peagle_lab.integrations.vllm_runner import DraftRecorder

    rec = DraftRecorder()
    rec.calls = [(["1-9f2c01ab", "0-77aa0c3d"], [[5, 5], [6, 6]]), (["0-77aa0c3d"], [[7, 7]])]
    rec.passes = [1, 1]
    blocks, passes = rec.take(["0", "1"])  # LLM ids; the engine appends "-<8 hex>"
    assert blocks == [[[6, 6], [7, 7]], [[5, 5]]] and passes == [1, 1] and rec.calls == []
