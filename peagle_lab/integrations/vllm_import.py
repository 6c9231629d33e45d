"""Import public EAGLE-3 / P-EAGLE heads from a local folder into our ``Drafter``, as vLLM would run them.

Layouts read (config.json + ``*.safetensors``, or a tensor-only ``pytorch_model.bin``
unpickled with ``weights_only=True``):

```
layout                       config.json                                   tensors
vLLM / AWS P-EAGLE           flat, LlamaForCausalLMEagle3, ptd_token_id      layers.i.*, mask_hidden [1, 3H]
  (amazon/*-P-EAGLE)         (or mask_token_id / pard_token)
speculators (RedHatAI/*)     speculators_model_type eagle3 | peagle,         layers.i.*, embed_tokens (trained
                             transformer_layer_config, mask_token_id         for peagle), mask_hidden [1, 1, 3H]
EAGLE-3 research             flat, LlamaForCausalLMEagle3                   midlayer.*, d2t, t2d
  (yuhuili/EAGLE3-*)
```

The result computes what vLLM computes for the folder, not what its trainer intended:
the same mask-token key order, the same ``norm_before_residual`` defaults (True for a
speculators eagle3 config that omits it), and the same embedding rule: a head's own
``embed_tokens.weight`` is used when it differs in any element from the target's table
(vLLM compares with ``torch.equal``), else the target's. A tolerated ``model.`` prefix is
stripped here, though vLLM itself rejects it (``check_head_folder`` says so).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ..drafter import Drafter
from .vllm_heads import VllmHeadError, check_tensors, head_spec, read_bin_tensors, read_config, tensor_shapes

# Config values whose non-default setting changes the computation in a way our Drafter does not model.
_MUST_BE = {"hidden_act": "silu", "mlp_bias": False, "attention_bias": False, "logit_scale": 1.0}


def _strip(name: str) -> str:
    return name[len("model."):] if name.startswith("model.") else name


def _refuse_unsupported(config: dict, source: str) -> None:
    layer = config.get("transformer_layer_config") or config
    for key, want in _MUST_BE.items():
        got = layer.get(key, config.get(key, want))
        if got != want:
            raise VllmHeadError(f"{source}: {key}={got!r}; peagle_lab's Drafter computes only {key}={want!r}")
    H = layer.get("hidden_size")
    target_h = config.get("target_hidden_size", layer.get("target_hidden_size"))
    if target_h is not None and H is not None and target_h != H:
        raise VllmHeadError(f"{source}: target_hidden_size {target_h} differs from the drafter's hidden_size {H}; "
                            "peagle_lab drafters have the target's width")
    rope = layer.get("rope_scaling") or layer.get("rope_parameters") or {}
    kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if kind not in ("default", "linear", "llama3"):
        raise VllmHeadError(f"{source}: rope type {kind!r} is not supported; supported: default, linear, llama3")


def read_head_tensor(path: Path, name: str) -> torch.Tensor | None:
    """One tensor of a head folder (``name`` with or without ``model.``), or None."""
    from safetensors import safe_open

    files = sorted(Path(path).glob("*.safetensors"))
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for n in (name, "model." + name):
                if n in st.keys():
                    return st.get_tensor(n)
    if not files:
        sd = read_bin_tensors(path)
        return sd.get(name, sd.get("model." + name))
    return None


def import_head(path: Path | str, target=None, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu") -> Drafter:
    """Read a public head folder (any layout above) into a ``Drafter``.

    Args:
        path: the head folder.
        target: our ``LlamaModel`` it drafts for: checked to fit, its tap ids fill in a
            config that names none (vLLM's default (2, L//2, L-3) is the target's), and its
            embedding table is attached unless the head carries a different one.
        dtype / device: of the returned drafter.

    Raises:
        VllmHeadError: a folder vLLM would reject, or a variant our Drafter does not compute.
        ValueError: a head that does not fit ``target``.

    Returns:
        The drafter in eval mode, embeddings attached when a table is available.
    """
    from ..models.checkpoints import CheckpointError
    from ..heads.io import load_head

    path = Path(path)
    source = str(path / "config.json")
    config = read_config(path)
    _refuse_unsupported(config, source)
    spec = head_spec(config, source)
    shapes = {_strip(k): v for k, v in tensor_shapes(path).items()}
    shapes.pop("mask_embedding", None)  # our own save_head format keeps the learned mask row apart
    if spec.draft_vocab_size == spec.vocab_size:
        shapes.pop("d2t", None)  # save_head writes it for any vocabulary; vLLM only for a reduced one
    check_tensors(spec, shapes, str(path))
    try:
        drafter = load_head(path, None, dtype=dtype, device=device)
    except CheckpointError as e:
        raise VllmHeadError(str(e)) from None
    if spec.aux_layer_ids is None and target is not None:
        drafter.config = dataclasses.replace(drafter.config, aux_layer_ids=tuple(target.config.taps))
    own = read_head_tensor(path, "embed_tokens.weight")
    table = None
    if target is not None:
        from ..drafter import check_drafter_fits

        check_drafter_fits(drafter, target, drafter.config.method)
        table = target.embed_tokens.weight.detach()
        if own is not None and not torch.equal(own.to(table.dtype).cpu(), table.cpu()):
            table = own  # vLLM keeps a head's own table when it differs from the target's anywhere
    elif own is not None:
        table = own
    if table is not None:
        drafter.attach_embeddings(table.to(device=device, dtype=dtype))
    return drafter.eval()
