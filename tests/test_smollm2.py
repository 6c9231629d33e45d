"""The real default model: our implementation against transformers on the same GGUF."""
from __future__ import annotations

import pytest
import torch

from peagle_lab import zoo
from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder

from peagle_lab.chat import encode_chat as chat_ids
from peagle_lab.testing import CHAT_PROMPTS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hf_from_gguf():
    """transformers' own GGUF loader (its dequantisation and q/k un-permutation, not ours)."""
    from transformers import AutoModelForCausalLM

    gguf = zoo.fetch_gguf(quiet=True)
    return AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()


def test_chat_template_comes_from_the_gguf(smollm2):
    _, tok = smollm2
    text = tok.decode(chat_ids(tok, "Hi"))
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_logits_and_taps_match_transformers(smollm2, hf_from_gguf):
    model, tok = smollm2
    ids = torch.tensor([chat_ids(tok, CHAT_PROMPTS[0])])
    ours = model(ids, torch.arange(ids.shape[1])[None])
    with torch.no_grad():
        ref = hf_from_gguf(ids, output_hidden_states=True)
    err = (ours.logits - ref.logits).abs().max() / ref.logits.abs().max()
    assert err <= 1e-4, err
    assert model.config.taps == (2, 15, 27)
    taps = torch.cat([ref.hidden_states[k] for k in (2, 15, 27)], -1)
    assert ((ours.taps - taps).abs().max() / taps.abs().max()) <= 1e-4


def test_greedy_generation_equals_transformers(smollm2, hf_from_gguf):
    model, tok = smollm2
    prompts = [chat_ids(tok, p) for p in CHAT_PROMPTS]
    ours = SpecDecoder(model, None, SpecConfig(method="baseline", max_new_tokens=32)).generate(prompts)
    for p, got in zip(prompts, ours.tokens):
        with torch.no_grad():
            ref = hf_from_gguf.generate(torch.tensor([p]), max_new_tokens=32, do_sample=False,
                                        eos_token_id=2, pad_token_id=2)
        assert got == ref[0, len(p):].tolist()
    assert "Paris" in tok.decode(ours.tokens[0])


@pytest.fixture(scope="module")
def smol_baseline(smollm2):
    model, tok = smollm2
    prompts = [chat_ids(tok, p) for p in CHAT_PROMPTS]
    cfg = SpecConfig(method="baseline", max_new_tokens=24)
    return prompts, {c: SpecDecoder(model, None, cfg).generate(prompts[:c]).tokens for c in (1, 3)}


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
@pytest.mark.parametrize("k", [1, 3, 7])
@pytest.mark.parametrize("c", [1, 3])
def test_speculative_decoding_is_lossless_on_smollm2(smollm2, smol_baseline, method, k, c):
    from peagle_lab.drafter import random_drafter
    from peagle_lab.heads import default_drafter

    model, _ = smollm2
    prompts, base = smol_baseline
    drafters = [random_drafter(model, method, seed=k)]
    shipped, origin = default_drafter(model, method)
    if origin.startswith("bundled"):
        drafters.append(shipped)
    for drafter in drafters:
        # The PyTorch kernel references keep this test fast on CPU; the Triton kernels run on
        # the tiny models here (interpreter) and on SmolLM2 shapes in the GPU suite.
        cfg = SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=24, kernel_backend="torch")
        assert SpecDecoder(model, drafter, cfg).generate(prompts[:c]).tokens == base[c]


def test_default_head_gives_the_bundled_folder_that_the_bench_fingerprints(smollm2):
    from peagle_lab.heads import bundled_head_dir, default_head
    from peagle_lab.heads.io import head_digest

    model, _ = smollm2
    for method in ("eagle3", "peagle"):
        _, origin, path = default_head(model, method)
        assert origin == f"bundled heads/{method}" and path == bundled_head_dir(method)
        assert len(head_digest(path)) == 16
