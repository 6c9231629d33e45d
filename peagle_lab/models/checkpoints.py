"""Target checkpoints: read a GGUF file or an HF folder into ``LlamaModel``; write HF folders.

Only safetensors and GGUF are ever read (no pickles, no ``trust_remote_code``). Every write
goes to a temporary name first and is renamed into place, so an interrupted conversion
never leaves a file that a later run would trust.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from .llama import LlamaConfig, LlamaModel

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


class CheckpointError(ValueError):
    """A checkpoint file or folder that cannot be used, with the path and the reason."""


# ---------------------------------------------------------------- atomic file helpers

@contextmanager
def atomic_path(final: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it over ``final`` only on success."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, final)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextmanager
def atomic_dir(final: Path | str) -> Iterator[Path]:
    """Yield a temporary folder beside ``final``; swap it in as ``final`` only on success."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: Path | str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_json(path: Path | str, obj: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------- HF config.json

def config_from_hf(d: dict, source: str = "config.json") -> LlamaConfig:
    """Translate an HF ``config.json`` dict into ``LlamaConfig``; refuse what we don't compute."""
    mt = d.get("model_type", "llama")
    if mt not in SUPPORTED_MODEL_TYPES:
        raise CheckpointError(f"{source}: model_type {mt!r} is not supported; "
                              f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    act = d.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{source}: hidden_act {act!r} is not supported; expected 'silu'")
    if d.get("mlp_bias"):
        raise CheckpointError(f"{source}: mlp_bias=true is not supported")
    if d.get("use_sliding_window") or (mt == "mistral" and d.get("sliding_window")):
        raise CheckpointError(f"{source}: sliding-window attention is not supported")
    rope = d.get("rope_scaling") or d.get("rope_parameters")
    theta = d.get("rope_theta", (rope or {}).get("rope_theta", 10000.0))
    if rope is not None:
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ("default", "linear", "llama3"):
            raise CheckpointError(f"{source}: rope type {kind!r} is not supported; "
                                  "supported: default, linear, llama3")
        rope = None if kind == "default" else dict(rope)
    nh = d["num_attention_heads"]
    try:
        return LlamaConfig(
            vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"], num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=nh, num_key_value_heads=d.get("num_key_value_heads", nh),
            head_dim=d.get("head_dim") or d["hidden_size"] // nh,
            rms_norm_eps=d.get("rms_norm_eps", 1e-6), rope_theta=float(theta), rope_scaling=rope,
            max_position_embeddings=d.get("max_position_embeddings", 4096),
            tie_word_embeddings=d.get("tie_word_embeddings", mt != "llama"),
            attention_bias=d.get("attention_bias", mt == "qwen2"), qk_norm=(mt == "qwen3"),
            bos_token_id=d.get("bos_token_id"), eos_token_id=d.get("eos_token_id"), model_type=mt,
        )
    except KeyError as e:
        raise CheckpointError(f"{source}: missing required field {e.args[0]!r}") from None
    except ValueError as e:
        raise CheckpointError(f"{source}: {e}") from None


def config_to_hf(cfg: LlamaConfig) -> dict:
    """An HF ``config.json`` dict that transformers and vLLM load as this architecture."""
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "mistral": "MistralForCausalLM"}[cfg.model_type]
    d = {
        "architectures": [arch], "model_type": cfg.model_type, "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
        "hidden_act": "silu", "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling, "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings, "attention_bias": cfg.attention_bias,
        "mlp_bias": False, "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
        "torch_dtype": "float32",
    }
    return d


# ---------------------------------------------------------------- state dicts

def _hf_to_ours(name: str) -> str:
    return name[len("model."):] if name.startswith("model.") else name


def model_from_state_dict(cfg: LlamaConfig, sd: dict[str, torch.Tensor], source: str,
                          dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> LlamaModel:
    """Build a ``LlamaModel`` and load ``sd`` (HF names) strictly, naming what does not fit."""
    with torch.device("meta"):
        model = LlamaModel(cfg)
    model.reset_rope()  # built on "meta" above; the frequencies must be real
    ours = {_hf_to_ours(k): v for k, v in sd.items() if not k.endswith("rotary_emb.inv_freq")}
    if cfg.tie_word_embeddings:
        ours.pop("lm_head.weight", None)
    expected = {k: p.shape for k, p in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(ours))
    unknown = sorted(set(ours) - set(expected))
    if missing or unknown:
        raise CheckpointError(f"{source}: tensors do not match a {cfg.model_type} model of this "
                              f"config; missing {missing[:5]}, unknown {unknown[:5]}")
    for k, shape in expected.items():
        if tuple(ours[k].shape) != tuple(shape):
            raise CheckpointError(f"{source}: tensor {k} has shape {tuple(ours[k].shape)}, "
                                  f"expected {tuple(shape)}")
    model = model.to_empty(device=device)
    model.load_state_dict({k: v.to(dtype) for k, v in ours.items()}, strict=False, assign=False)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    return model.to(dtype).eval()


def state_dict_to_hf(model: LlamaModel) -> dict[str, torch.Tensor]:
    sd = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        sd[k if k == "lm_head.weight" else "model." + k] = v.detach().contiguous()
    return sd


# ---------------------------------------------------------------- HF folders

def load_hf_folder(path: Path | str, dtype: torch.dtype = torch.float32,
                   device: str | torch.device = "cpu") -> LlamaModel:
    """Load a Llama/Qwen2/Qwen3-style folder (config.json + ``*.safetensors``)."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such model folder (expected config.json + safetensors)")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise CheckpointError(f"{path}: no config.json in this folder")
    try:
        cfg = config_from_hf(json.loads(cfg_file.read_text()), str(cfg_file))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{cfg_file}: not valid JSON ({e})") from None
    except KeyError as e:
        raise CheckpointError(f"{cfg_file}: missing required field {e.args[0]!r}") from None
    files = sorted(path.glob("*.safetensors"))
    if not files:
        bins = sorted(path.glob("*.bin"))
        hint = " (only pickled *.bin files, which peagle_lab never unpickles)" if bins else ""
        raise CheckpointError(f"{path}: no *.safetensors files{hint}")
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            sd.update(load_file(str(f)))
        except Exception as e:  # safetensors raises its own error types for truncation
            raise CheckpointError(f"{f}: cannot read safetensors file ({e})") from None
    return model_from_state_dict(cfg, sd, str(path), dtype, device)


def save_hf_folder(model: LlamaModel, path: Path | str, tokenizer=None, extra_files: dict | None = None) -> Path:
    """Write ``model`` (and a tokenizer) as an HF folder, atomically."""
    from safetensors.torch import save_file

    path = Path(path)
    with atomic_dir(path) as tmp:
        (tmp / "config.json").write_text(json.dumps(config_to_hf(model.config), indent=2) + "\n")
        save_file(state_dict_to_hf(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
    return path


# ---------------------------------------------------------------- GGUF

_GGUF_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
}


def _unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's interleaving of q/k rows so RoPE can use the half-split convention."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
             .swapaxes(1, 2).reshape(w.shape))


def _open_gguf(path: Path):
    import gguf

    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # numpy raises on short reads, gguf on bad magic
        raise CheckpointError(f"{path}: not a readable GGUF file, truncated or corrupt ({type(e).__name__}: {e})") from None


def gguf_config(path: Path | str) -> LlamaConfig:
    """Read the architecture metadata of a llama-family GGUF file."""
    path = Path(path)
    reader = _open_gguf(path)

    def field(key, default=None):
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    arch = field("general.architecture")
    if arch not in ("llama", "qwen2", "qwen3"):
        raise CheckpointError(f"{path}: GGUF architecture {arch!r} is not supported; expected llama, qwen2 or qwen3")
    nh = field(f"{arch}.attention.head_count")
    hidden = field(f"{arch}.embedding_length")
    tensors = {t.name for t in reader.tensors}
    return LlamaConfig(
        vocab_size=field(f"{arch}.vocab_size") or len(field("tokenizer.ggml.tokens")),
        hidden_size=hidden, intermediate_size=field(f"{arch}.feed_forward_length"),
        num_hidden_layers=field(f"{arch}.block_count"), num_attention_heads=nh,
        num_key_value_heads=field(f"{arch}.attention.head_count_kv", nh),
        head_dim=field(f"{arch}.rope.dimension_count", hidden // nh),
        rms_norm_eps=float(field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(field(f"{arch}.rope.freq_base", 10000.0)),
        max_position_embeddings=field(f"{arch}.context_length", 4096),
        tie_word_embeddings="output.weight" not in tensors,
        attention_bias="blk.0.attn_q.bias" in tensors, qk_norm=(arch == "qwen3"),
        bos_token_id=field("tokenizer.ggml.bos_token_id"), eos_token_id=field("tokenizer.ggml.eos_token_id"),
        model_type=arch,
    )


def gguf_state_dict(path: Path | str, progress: bool = False) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """Dequantise every tensor of a GGUF file to float32, with HF tensor names."""
    import gguf
    from tqdm.auto import tqdm

    path = Path(path)
    cfg = gguf_config(path)
    reader = _open_gguf(path)
    sd: dict[str, torch.Tensor] = {}
    for t in tqdm(reader.tensors, desc=f"dequantising {path.name}", disable=not progress, unit="tensor"):
        try:
            w = np.asarray(gguf.dequantize(t.data, t.tensor_type), dtype=np.float32)
        except Exception as e:
            raise CheckpointError(f"{path}: tensor {t.name} cannot be dequantised ({e})") from None
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        elif parts[0] == "blk" and parts[2] in _GGUF_LAYER_NAMES:
            if parts[2] == "attn_q" and cfg.model_type == "llama":
                w = _unpermute_qk(w, cfg.num_attention_heads)
            elif parts[2] == "attn_k" and cfg.model_type == "llama":
                w = _unpermute_qk(w, cfg.num_key_value_heads)
            name = f"model.layers.{parts[1]}.{_GGUF_LAYER_NAMES[parts[2]]}.{parts[3]}"
        else:
            raise CheckpointError(f"{path}: unexpected GGUF tensor {t.name!r}")
        sd[name] = torch.from_numpy(w.copy())
    return cfg, sd


def load_gguf(path: Path | str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
              progress: bool = False) -> LlamaModel:
    cfg, sd = gguf_state_dict(path, progress)
    return model_from_state_dict(cfg, sd, str(path), dtype, device)


def load_target(path: Path | str, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu") -> LlamaModel:
    """Load a target from a ``.gguf`` file or an HF folder, whichever ``path`` is."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such model file or folder "
                              "(expected a .gguf file or a folder with config.json + safetensors)")
    if path.is_file():
        return load_gguf(path, dtype, device)
    return load_hf_folder(path, dtype, device)
