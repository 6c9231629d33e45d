"""Our target against transformers on the same weights; cached decoding; taps."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.models.checkpoints import config_to_hf, state_dict_to_hf
from peagle_lab.models.llama import LlamaConfig
from peagle_lab.testing import tiny_target

transformers = pytest.importorskip("transformers")


def hf_twin(model):
    """The transformers model with exactly our weights (built from our config.json)."""
    cfg = transformers.AutoConfig.for_model(**config_to_hf(model.config))
    hf = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = hf.load_state_dict(state_dict_to_hf(model), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    hf.tie_weights()
    return hf.eval()


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("kind", [
    dict(),  # Llama, SmolLM2-like
    dict(model_type="qwen2", attention_bias=True, tie_word_embeddings=False),
    dict(model_type="qwen3", qk_norm=True),
    dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
])
def test_logits_and_taps_match_transformers(kind):
    model = tiny_target(seed=3, **kind)
    if kind.get("attention_bias"):
        with torch.no_grad():
            for layer in model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.1)
    hf = hf_twin(model)
    ids = torch.randint(0, model.config.vocab_size, (2, 11))
    pos = torch.arange(11).expand(2, 11)
    ours = model(ids, pos)
    with torch.no_grad():
        ref = hf(ids, output_hidden_states=True)
    assert rel_err(ours.logits, ref.logits) <= 1e-4
    taps = torch.cat([ref.hidden_states[k] for k in model.config.taps], -1)
    assert rel_err(ours.taps, taps) <= 1e-4


def test_default_taps_follow_eagle3():
    assert LlamaConfig(num_hidden_layers=30).taps == (2, 15, 27)
    with pytest.raises(ValueError, match="aux_layer_ids"):
        LlamaConfig(num_hidden_layers=4, aux_layer_ids=(1, 4))


def test_cached_decode_equals_full_forward_for_ragged_batch():
    model = tiny_target()
    lens = [7, 3, 5]
    c, max_len = len(lens), 16
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 96, (n + 4,), generator=gen) for n in lens]
    cache = model.allocate_cache(c, max_len)
    T = max(lens)
    ids = torch.zeros(c, T, dtype=torch.long)
    for b, n in enumerate(lens):
        ids[b, :n] = prompts[b][:n]
    pos = torch.arange(T).expand(c, T)
    ok = pos < torch.tensor(lens)[:, None]
    slots = torch.where(ok, torch.arange(c)[:, None] * max_len + pos, torch.full_like(pos, -1))
    model(ids, pos, cache=cache, slot_mapping=slots)
    # then 4 more tokens, one per step, each request at its own position
    for j in range(4):
        step_ids = torch.stack([prompts[b][n + j] for b, n in enumerate(lens)])[:, None]
        step_pos = torch.tensor(lens)[:, None] + j
        out = model(step_ids, step_pos, cache=cache, slot_mapping=torch.arange(c)[:, None] * max_len + step_pos)
        for b, n in enumerate(lens):
            full = model(prompts[b][None, : n + j + 1], torch.arange(n + j + 1)[None])
            # float32 sums in another order (T=1 vs T=n matmuls): ~1e-5 apart; a wrong slot or
            # mask is off by ~1e-1.
            torch.testing.assert_close(out.logits[b, 0], full.logits[0, -1], rtol=1e-4, atol=1e-4)


def test_fresh_prefill_matches_the_masked_cache_path_over_stale_rows():
    """``fresh=True`` (a prompt's first prefill chunk) attends causally over the call's own keys: the
    same logits, taps and written KV as attending over the whole cache block through the mask, while
    the block still holds an earlier request's keys (which neither path may read)."""
    model = tiny_target(seed=2)
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # the GQA path
    lens = [7, 3, 5]
    c, max_len, T = len(lens), 16, max(lens)
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 96, (c, T), generator=gen)
    pos = torch.arange(T).expand(c, T)
    ok = pos < torch.tensor(lens)[:, None]
    slots = torch.where(ok, torch.arange(c)[:, None] * max_len + pos, torch.full_like(pos, -1))
    runs = {}
    for fresh in (False, True):
        cache = model.allocate_cache(c, max_len)
        stale = torch.randn(cache.k[0].shape, generator=torch.Generator().manual_seed(9))  # an earlier request's
        for t in (*cache.k, *cache.v):
            t.copy_(stale)
        runs[fresh] = model(ids, pos, cache=cache, slot_mapping=slots, fresh=fresh), cache
    (masked, cache_m), (fresh, cache_f) = runs[False], runs[True]
    # float32 sums in another order: ~1e-5 apart; a key seen that should not be is off by ~1e-1
    torch.testing.assert_close(fresh.logits[ok], masked.logits[ok], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fresh.taps[ok], masked.taps[ok], rtol=1e-4, atol=1e-4)
    written = slots[ok]
    for a, b in zip((*cache_f.k, *cache_f.v), (*cache_m.k, *cache_m.v)):
        torch.testing.assert_close(a[written], b[written], rtol=1e-4, atol=1e-4)
        assert not torch.equal(a[written], stale[written])  # the prefill's own KV replaced the stale rows
    with pytest.raises(ValueError, match="fresh=True needs a KVCache"):
        model(ids, pos, fresh=True)


def test_shape_errors_are_clear():
    model = tiny_target()
    with pytest.raises(ValueError, match=r"must both be \[c, T\]"):
        model(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="slot_mapping is required"):
        model(torch.zeros(1, 3, dtype=torch.long), torch.arange(3)[None], cache=model.allocate_cache(1, 8))


def test_random_smollm2_has_the_default_shape_and_its_seed_decides_the_weights():
    from peagle_lab.models.llama import LlamaConfig
    from peagle_lab.testing import random_smollm2

    a = random_smollm2("cpu", torch.float32, seed=3)
    b = random_smollm2("cpu", torch.float32, seed=3)
    c = random_smollm2("cpu", torch.float32, seed=None)  # the generator goes on: other weights
    assert a.config == LlamaConfig() and a.dtype == torch.float32 and not a.training
    assert torch.equal(a.layers[0].mlp.up_proj.weight, b.layers[0].mlp.up_proj.weight)
    assert not torch.equal(a.layers[0].mlp.up_proj.weight, c.layers[0].mlp.up_proj.weight)


def test_a_windowed_mask_sees_the_last_w_positions_only():
    from peagle_lab.models.kv_cache import attention_mask
    from peagle_lab.models.llama import make_context

    pos = torch.arange(5)[None]
    m = attention_mask(pos, pos, window=2)[0, 0].int()
    assert m.tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]
    assert torch.equal(attention_mask(pos, pos, window=5), attention_mask(pos, pos))
    explicit = torch.ones(1, 1, 5, 5, dtype=torch.bool)  # a training mask is taken as it is
    assert torch.equal(make_context(pos, None, None, explicit, window=2).mask, explicit)


class _EdgeRunner:
    """A ``layer_fn`` with the engine's CompiledForward attributes, uncompiled: the routing alone."""

    def __init__(self, calls: list):
        from peagle_lab.models import llama

        self.calls = calls
        self.prologue = lambda *a: calls.append("prologue") or llama.forward_prologue(*a)
        self.epilogue = lambda *a: calls.append("epilogue") or llama.forward_epilogue(*a)

    def __call__(self, layer, *args):
        from peagle_lab.models.llama import call_layer

        return call_layer(layer, *args)


@pytest.mark.parametrize("method", ["target", "eagle3", "peagle"])
def test_forward_edges_give_the_eager_forward_bit_for_bit(method):
    """A layer_fn with prologue/epilogue (SpecConfig.compile_edges) computes what the eager forward does:
    the target's and both drafters' decode calls over a cache, with the P-EAGLE mask token and a window."""
    from dataclasses import replace

    import torch.nn.functional as F

    from peagle_lab.config import DrafterConfig
    from peagle_lab.drafter import Drafter

    torch.manual_seed(0)
    target = tiny_target()
    model = target
    if method != "target":  # a window of 3 reaches into the cache
        model = Drafter(replace(DrafterConfig.for_target(target.config, method, 2), sliding_window=3))
        model.reset_parameters(std=0.05, generator=torch.Generator().manual_seed(1))
        model.attach_embeddings(target.embed_tokens.weight).eval()
    seen = []  # each call's kv_len, through a decode attention that records it

    def decode(q, k, v, mask, kv_len):
        seen.append(kv_len.tolist())
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    cache_a, cache_b = model.allocate_cache(2, 12), model.allocate_cache(2, 12)
    cache_a.decode_attention = cache_b.decode_attention = decode
    ids = torch.randint(0, target.config.vocab_size, (2, 4))
    if method == "peagle":
        ids[:, 2:] = model.config.mask_token_id
    pos = torch.tensor([[3, 4, 5, 6], [0, 1, 2, 3]])
    slots = torch.tensor([[3, 4, 5, -1], [12, 13, 14, 15]])
    rows = torch.tensor([[1, 2], [0, 3]])
    calls: list = []
    outs = []
    for cache, fn in ((cache_a, None), (cache_b, _EdgeRunner(calls))):
        for k in range(len(cache.k)):  # the same stale keys in both caches
            g = torch.Generator().manual_seed(k)
            cache.k[k].copy_(torch.randn(cache.k[k].shape, generator=g))
            cache.v[k].copy_(torch.randn(cache.v[k].shape, generator=g))
        with torch.inference_mode():
            if method == "target":
                out = model(ids, pos, cache=cache, slot_mapping=slots, logits_rows=rows, layer_fn=fn)
            else:
                hidden = torch.randn(2, 4, target.config.hidden_size, generator=torch.Generator().manual_seed(9))
                out = model(ids, hidden, pos, cache=cache, slot_mapping=slots, logits_rows=rows, layer_fn=fn)
        outs.append(out)
    assert calls == ["prologue", "epilogue"]
    half = len(seen) // 2
    assert seen[:half] == seen[half:] and seen[0] == [7, 4]  # the largest position + 1 of each request
    assert torch.equal(outs[0].logits, outs[1].logits)
    assert torch.equal(outs[0].hidden, outs[1].hidden)
    assert torch.equal(cache_a.kv, cache_b.kv)
