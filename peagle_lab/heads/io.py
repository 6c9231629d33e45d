"""Drafter checkpoints: the speculators format (our native one) and the EAGLE-3 research format.

speculators folder (``save_head``/``load_head``)::

    config.json        speculators_model_type "eagle3" | "peagle", speculators_config (algorithm,
                       proposal methods, verifier), transformer_layer_config (the drafter's Llama
                       block shapes), draft_vocab_size, norm_before_residual, target_hidden_size,
                       eagle_aux_hidden_state_layer_ids, mask_token_id (peagle), num_hidden_layers
    model*.safetensors fc.weight, layers.{i}.*, norm.weight, lm_head.weight, d2t, t2d,
                       (peagle) mask_hidden [3H], mask_embedding [H]; sharded at ≤ 15 MiB

The EAGLE-3 research format (``yuhuili/EAGLE3-*``) names the first layer ``midlayer.*`` and
keeps its config flat; ``load_head`` reads both. Only safetensors (or, for research
checkpoints, ``torch.load(weights_only=True)``) are ever read.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..config import DrafterConfig
from ..drafter import Drafter, check_drafter_fits
from ..models.checkpoints import CheckpointError, atomic_dir, sha256_file

SHARD_BYTES = 15 * 1024 * 1024
_DRAFTER_FIELDS = ("num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                   "rms_norm_eps", "rope_theta", "rope_scaling", "max_position_embeddings")


def head_config_dict(cfg: DrafterConfig, verifier: str = "SmolLM2-135M-Instruct", k: int = 5) -> dict:
    """The speculators ``config.json`` for a drafter config, every semantic choice explicit."""
    layer = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": cfg.hidden_size,
             "num_hidden_layers": cfg.num_hidden_layers, "vocab_size": cfg.vocab_size, "hidden_act": "silu",
             "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
    layer.update({f: getattr(cfg, f) for f in _DRAFTER_FIELDS})
    layer.update(window_keys(cfg))
    d = {
        "architectures": ["PEagleSpeculator" if cfg.method == "peagle" else "Eagle3Speculator"],
        "speculators_model_type": cfg.method,
        "speculators_version": "peagle_lab-0.1",
        "speculators_config": {
            "algorithm": cfg.method,
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier, "architectures": [_arch(cfg.target_model_type)]},
        },
        "transformer_layer_config": layer,
        "num_hidden_layers": cfg.num_hidden_layers,
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(cfg.aux_layer_ids),
        "norm_before_residual": cfg.norm_before_residual,
        "torch_dtype": "float32",
    }
    if cfg.method == "peagle":
        d["mask_token_id"] = cfg.mask_token_id
        d["parallel_drafting"] = True
    return d


def _arch(model_type: str) -> str:
    return {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "mistral": "MistralForCausalLM"}.get(model_type, "LlamaForCausalLM")


def config_from_head_dict(d: dict, source: str) -> DrafterConfig:
    """Read a speculators or research-format config dict into ``DrafterConfig``."""
    method = d.get("speculators_model_type")
    layer = d.get("transformer_layer_config", d)
    if method is None:  # research format / vLLM LlamaForCausalLMEagle3 folder
        mask = mask_token_id_of(d)
        method = "peagle" if mask is not None else "eagle3"
    if method not in ("eagle3", "peagle"):
        raise CheckpointError(f"{source}: speculators_model_type {method!r} is not supported; "
                              "expected 'eagle3' or 'peagle'")
    try:
        H = d.get("target_hidden_size") or layer["hidden_size"]
        # vLLM sizes a speculators head from transformer_layer_config (the flat layout: the top level).
        n_layers = layer.get("num_hidden_layers", d.get("num_hidden_layers", 1))
        nh = layer["num_attention_heads"]
        kw = dict(
            method=method, num_hidden_layers=n_layers, hidden_size=H, num_attention_heads=nh,
            num_key_value_heads=layer.get("num_key_value_heads", nh),
            head_dim=layer.get("head_dim") or H // nh, intermediate_size=layer["intermediate_size"],
            rms_norm_eps=layer.get("rms_norm_eps", 1e-6), rope_theta=float(layer.get("rope_theta", 10000.0)),
            rope_scaling=layer.get("rope_scaling"),
            max_position_embeddings=layer.get("max_position_embeddings", 4096),
            vocab_size=layer["vocab_size"], draft_vocab_size=d.get("draft_vocab_size", layer["vocab_size"]),
            # vLLM's default when the key is absent: True for speculators eagle3 configs, else False.
            norm_before_residual=bool(d.get("norm_before_residual", d.get("speculators_model_type") == "eagle3")),
            mask_token_id=mask_token_id_of(d) if method == "peagle" else None,
            sliding_window=sliding_window_of(layer, n_layers, source),
            target_model_type=_model_type_of(d),
        )
        ids = d.get("eagle_aux_hidden_state_layer_ids") or (d.get("eagle_config") or {}).get(
            "eagle_aux_hidden_state_layer_ids")
        if ids is not None:
            kw["aux_layer_ids"] = tuple(ids)
        return DrafterConfig(**kw)
    except KeyError as e:
        raise CheckpointError(f"{source}: missing required field {e.args[0]!r}") from None
    except ValueError as e:
        raise CheckpointError(f"{source}: {e}") from None


# Where vLLM's proposer looks for the mask-token id of a flat config, in its order
# (llm_base_proposer.py, _init_parallel_drafting_params); dflash_config.mask_token_id comes first.
MASK_TOKEN_KEYS = ("mask_token_id", "dspark_noise_token_id", "pard_token", "ptd_token_id")


def mask_token_id_of(d: dict) -> int | None:
    """The mask-token id as vLLM resolves it from a head's ``config.json`` (None: an EAGLE-3 head).

    A speculators config carries it as the top-level ``mask_token_id`` (vLLM maps it to
    ``pard_token``); a flat config in vLLM's proposer order: ``dflash_config.mask_token_id``,
    then ``MASK_TOKEN_KEYS``.

    >>> mask_token_id_of({"pard_token": 7, "ptd_token_id": 9}), mask_token_id_of({"dflash_config": {"mask_token_id": 3}})
    (7, 3)
    """
    if d.get("speculators_model_type") is not None:
        return None if d.get("mask_token_id") is None else int(d["mask_token_id"])
    dflash = d.get("dflash_config") or {}
    if isinstance(dflash, dict) and dflash.get("mask_token_id") is not None:
        return int(dflash["mask_token_id"])
    for key in MASK_TOKEN_KEYS:
        if d.get(key) is not None:
            return int(d[key])
    return None


def window_keys(cfg: DrafterConfig) -> dict:
    """The layer-config keys of the drafting window, as transformers and vLLM's Llama layers read them
    (``layer_types`` marks each draft layer); none without a window. ``sliding_window_of`` reads them back.

    >>> window_keys(DrafterConfig(method="eagle3", num_hidden_layers=2, sliding_window=512))
    {'sliding_window': 512, 'layer_types': ['sliding_attention', 'sliding_attention']}
    """
    if cfg.sliding_window is None:
        return {}
    return {"sliding_window": cfg.sliding_window, "layer_types": ["sliding_attention"] * cfg.num_hidden_layers}


def sliding_window_of(layer: dict, num_layers: int, source: str) -> int | None:
    """The drafter's attention window from a layer config: ``sliding_window`` when ``layer_types``
    marks every layer ``"sliding_attention"``, None when it marks none (or is absent: a Llama layer
    without ``layer_types`` ignores ``sliding_window``, in transformers and in vLLM alike).

    >>> sliding_window_of({"sliding_window": 512, "layer_types": ["sliding_attention"] * 2}, 2, "x")
    512
    >>> sliding_window_of({"sliding_window": 512}, 2, "x") is None
    True
    """
    types = layer.get("layer_types")
    if types is None:
        return None
    if len(types) != num_layers or not set(types) <= {"sliding_attention", "full_attention"}:
        raise CheckpointError(f"{source}: layer_types {types} must name 'sliding_attention' or 'full_attention' "
                              f"for each of the {num_layers} draft layers")
    if len(set(types)) > 1:
        raise CheckpointError(f"{source}: layer_types {types} mixes sliding and full attention; "
                              "expected one kind for every draft layer")
    if types[0] == "full_attention":
        return None
    window = layer.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise CheckpointError(f"{source}: sliding_window={window!r} must be a positive int when layer_types "
                              "says 'sliding_attention'")
    return window


def _model_type_of(d: dict) -> str:
    archs = ((d.get("speculators_config") or {}).get("verifier") or {}).get("architectures") or []
    for a in archs:
        for mt in ("qwen3", "qwen2", "mistral", "llama"):
            if a.lower().startswith(mt):
                return mt
    return "llama"


def head_state_dict(drafter: Drafter) -> dict[str, torch.Tensor]:
    """Our drafter's tensors under speculators names (no ``model.`` prefix)."""
    sd = {k: v.detach().contiguous() for k, v in drafter.state_dict().items()}
    return sd


def save_head(drafter: Drafter, path: Path | str, *, verifier: str = "SmolLM2-135M-Instruct",
              k: int = 5, dtype: torch.dtype | None = None, card: str | None = None) -> Path:
    """Write ``drafter`` as a speculators folder, sharded at ≤ 15 MiB, atomically.

    Args:
        dtype: store floating tensors in this dtype (e.g. bfloat16 for shipped heads).
        card: optional model-card Markdown written as README.md.

    Raises:
        ValueError: ``drafter`` is not a ``Drafter``.
    """
    from safetensors.torch import save_file

    if not isinstance(drafter, Drafter):
        raise ValueError(f"save_head needs a Drafter, got {type(drafter).__name__}")
    sd = head_state_dict(drafter)
    if dtype is not None:
        sd = {k_: (v.to(dtype) if v.is_floating_point() else v) for k_, v in sd.items()}
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in sorted(sd.items()):
        nbytes = t.numel() * t.element_size()
        if size + nbytes > SHARD_BYTES and shards[-1]:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    path = Path(path)
    with atomic_dir(path) as tmp:
        (tmp / "config.json").write_text(json.dumps(head_config_dict(drafter.config, verifier, k), indent=2) + "\n")
        weight_map, files = {}, {}
        for i, shard in enumerate(shards):
            name = "model.safetensors" if len(shards) == 1 else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(tmp / name), metadata={"format": "pt"})
            weight_map.update({k_: name for k_ in shard})
            files[name] = sha256_file(tmp / name)
        if len(shards) > 1:
            (tmp / "model.safetensors.index.json").write_text(json.dumps(
                {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in sd.values())},
                 "weight_map": weight_map}, indent=2) + "\n")
        (tmp / "checksums.json").write_text(json.dumps(files, indent=2) + "\n")
        if card:
            (tmp / "README.md").write_text(card)
    return path


def head_digest(path: Path | str) -> str:
    """A short fingerprint of a head folder's weights: sha256 over each weight file's name and sha256.

    Benchmarks record it beside the head's path, so a row measured with a copy of the shipped head
    (a ``/tmp`` folder on the H200) is known to be that head: the same weights give the same digest
    wherever they lie, and any changed byte changes it.
    """
    import hashlib

    path = Path(path)
    files = _weight_files(path)
    if not files:
        raise CheckpointError(f"{path}: no weights (*.safetensors, or tensor-only *.bin) to fingerprint")
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}:{sha256_file(f)}\n".encode())
    return h.hexdigest()[:16]


def _weight_files(path: Path) -> list[Path]:
    """A head folder's weight files: its ``*.safetensors``, else (research checkpoints) ``*.bin`` and ``*.pt``."""
    return sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin")) + sorted(path.glob("*.pt"))


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    sums = path / "checksums.json"
    expected = json.loads(sums.read_text()) if sums.is_file() else {}
    sd: dict[str, torch.Tensor] = {}
    for f in _weight_files(path):
        if f.suffix != ".safetensors":  # research checkpoints: tensors only, never arbitrary objects
            try:
                sd.update(torch.load(str(f), map_location="cpu", weights_only=True))
            except Exception as e:
                raise CheckpointError(f"{f}: not a plain tensor checkpoint ({type(e).__name__}: {e})") from None
            continue
        if f.name in expected and sha256_file(f) != expected[f.name]:
            raise CheckpointError(f"{f}: sha256 does not match checksums.json (truncated or corrupted)")
        try:
            sd.update(load_file(str(f)))
        except Exception as e:
            raise CheckpointError(f"{f}: cannot read safetensors file ({e})") from None
    if not sd:
        raise CheckpointError(f"{path}: no weights (*.safetensors, or tensor-only *.bin)")
    return sd


def _normalise_names(sd: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in sd.items():
        name = k[len("model."):] if k.startswith("model.") else k
        if name.startswith("midlayer."):
            name = "layers.0." + name[len("midlayer."):]
        if name == "embed_tokens.weight":
            continue  # the target's table; a learned mask row is read by load_head
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "layers" and parts[1] != "0" and parts[2] == "hidden_norm":
            continue  # vLLM builds hidden_norm in every layer but only layer 0 uses it
        out[name] = v
    return out


def load_head(path: Path | str, target=None, dtype: torch.dtype = torch.float32,
              device: str | torch.device = "cpu") -> Drafter:
    """Load a drafter folder (speculators, vLLM Eagle3 or research layout) into ``Drafter``.

    When ``target`` is given, the head is checked against it (hidden size, vocabulary, taps)
    and the target's embedding table is attached.

    Raises:
        CheckpointError: unreadable files, missing fields, wrong shapes or unknown tensors.
        ValueError: a head built for another target, or a ``target`` that is not a ``LlamaModel``.
    """
    from ..models.llama import LlamaModel

    if target is not None and not isinstance(target, LlamaModel):
        raise ValueError(f"target must be a LlamaModel (or None), got {type(target).__name__}")
    path = Path(path)
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path}: not a drafter folder (no config.json)")
    try:
        raw = json.loads((path / "config.json").read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path / 'config.json'}: not valid JSON ({e})") from None
    cfg = config_from_head_dict(raw, str(path / "config.json"))
    full = _read_weights(path)
    sd = _normalise_names(full, str(path))
    drafter = Drafter(cfg)
    expected = drafter.state_dict()
    if "t2d" not in sd:
        sd["t2d"] = expected["t2d"]
    if "d2t" not in sd:
        sd["d2t"] = expected["d2t"]
    if cfg.method == "peagle" and "mask_embedding" not in sd:
        emb = full.get("embed_tokens.weight", full.get("model.embed_tokens.weight"))
        if emb is not None:
            sd["mask_embedding"] = emb[cfg.mask_token_id]
    unknown = sorted(set(sd) - set(expected))
    missing = sorted(set(expected) - set(sd) - ({"mask_embedding"} if cfg.method == "peagle" else set()))
    if unknown or missing:
        raise CheckpointError(f"{path}: tensors do not match a {cfg.num_hidden_layers}-layer {cfg.method} head; "
                              f"missing {missing[:6]}, unknown {unknown[:6]}")
    for k, t in sd.items():
        if k == "mask_hidden":
            t = sd[k] = t.reshape(-1)
        if tuple(t.shape) != tuple(expected[k].shape):
            raise CheckpointError(f"{path}: tensor {k} has shape {tuple(t.shape)}, expected {tuple(expected[k].shape)}")
    if "mask_embedding" not in sd and cfg.method == "peagle":
        sd["mask_embedding"] = torch.zeros_like(expected["mask_embedding"])
    drafter.load_state_dict({k: v.to(expected[k].dtype) for k, v in sd.items()})
    drafter = drafter.to(device=device, dtype=dtype)
    if target is not None:
        check_drafter_fits(drafter, target, cfg.method)
        drafter.attach_embeddings(target.embed_tokens.weight)
    return drafter.eval()
