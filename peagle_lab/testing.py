"""Random models: tiny ones for tests, doctests and the CPU quick paths, and SmolLM2-shaped ones for GPU
step-cost measurements without the weights (seeded, so reproducible)."""
from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import torch

from .config import DrafterConfig
from .drafter import Drafter
from .models.llama import LlamaConfig, LlamaModel

# Three chat prompts the SmolLM2 parity and lossless tests share.
CHAT_PROMPTS = (
    "What is the capital of France?",
    "Write a Python function that reverses a string.",
    "Give me three tips for staying focused while studying.",
)


def tiny_config(vocab_size: int = 96, num_hidden_layers: int = 4, **kw) -> LlamaConfig:
    """A 4-layer, 64-wide Llama with GQA (4 heads / 2 KV heads) and SmolLM2's conventions."""
    base = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                num_hidden_layers=num_hidden_layers, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=1024,
                tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    base.update(kw)
    return LlamaConfig(**base)


def tiny_target(seed: int = 0, **kw) -> LlamaModel:
    """A random tiny target in float32 on the CPU.

    The scales (embeddings 0.5, matrices 0.2) give varied greedy continuations with
    occasional repeats; PyTorch's default init makes the model echo its last token.
    """
    g = torch.Generator().manual_seed(seed)
    model = LlamaModel(tiny_config(**kw))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 if p is model.embed_tokens.weight else 0.2))
    return model.eval()


def random_smollm2(device: str = "cuda", dtype: torch.dtype = torch.bfloat16, seed: int | None = 0) -> LlamaModel:
    """A model of SmolLM2-135M's shape (``LlamaConfig()``) with PyTorch's default random init.

    ``seed`` seeds torch's global generator first (the scripts' later draws follow from it); None
    leaves the generator as it is.
    """
    if seed is not None:
        torch.manual_seed(seed)
    return LlamaModel(LlamaConfig()).to(device=device, dtype=dtype).eval()


def tiny_drafter(target: LlamaModel, method: str = "peagle", num_hidden_layers: int = 1, seed: int = 1,
                 draft_vocab_size: int | None = None) -> Drafter:
    """A random drafter shaped for ``target``."""
    cfg = DrafterConfig.for_target(target.config, method, num_hidden_layers, draft_vocab_size)
    d = Drafter(cfg)
    d.reset_parameters(std=0.05, generator=torch.Generator().manual_seed(seed))
    return d.to(device=target.device, dtype=target.dtype).attach_embeddings(target.embed_tokens.weight).eval()


def token_example(input_ids: list[int], assistant_start: int) -> SimpleNamespace:
    """A training example with only what ``train.targets.collate`` reads.

    >>> token_example([5, 6, 7], 1).assistant_start
    1
    """
    return SimpleNamespace(input_ids=input_ids, assistant_start=assistant_start)


def script_module(path: str) -> ModuleType:
    """A script of the repository's ``scripts/`` folder (no package's module) imported by its path, for tests.

    Args:
        path: relative to ``scripts/``, e.g. ``"dev/land_sweep.py"``.
    """
    import importlib.util
    import sys

    file = Path(__file__).resolve().parents[1] / "scripts" / path
    if not file.is_file():
        raise FileNotFoundError(f"no script {file} (scripts/ lies beside the package in a checkout only)")
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module  # dataclasses and pickling look a class's module up by name
    spec.loader.exec_module(module)
    return module
