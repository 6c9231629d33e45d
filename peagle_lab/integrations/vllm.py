"""Serve our heads with vLLM: export, speculative_config, import of public heads, a benchmark driver.

```
Drafter ──export_for_vllm──► head folder (config.json + model.safetensors) ─┐
target  ──export_target_for_vllm──► HF folder (config, safetensors, tokenizer) ┴─► LLM(model=target,
                                                  speculative_config=speculative_config(method, head, K))
public head folder ──import_head──► Drafter   (vLLM/AWS P-EAGLE, speculators, EAGLE-3 research layouts)
```

Every semantic choice of our ``Drafter`` is written out, none left to vLLM's defaults:
tap ids (also inside ``eagle_config``, which is where vLLM sizes ``fc`` from),
``norm_before_residual``, ``norm_before_fc`` / ``fc_norm`` / ``norm_output`` (all false: the
pre-norm output is what EAGLE-3 feeds back), the mask-token id and ``mask_hidden`` [1, 3H].
Our P-EAGLE mask slots use a *learned* embedding; vLLM embeds the mask token with the
head's ``embed_tokens`` table, or the target's when the head has none, so the exporter
writes ``embed_tokens.weight`` = the target's table with that one row replaced whenever
the row differs. ``d2t`` is written only for a reduced draft vocabulary (vLLM has no slot
for it otherwise). The folder is checked with ``check_head_folder`` before it is kept.
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
from pathlib import Path

import torch

from ..devices import DTYPES
from ..drafter import Drafter
from ..models.checkpoints import atomic_dir
from .vllm_heads import HeadSpec, VllmHeadError, check_head_folder, head_spec
from .vllm_import import import_head

__all__ = ["FORMATS", "HeadSpec", "VllmHeadError", "check_head_folder", "export_for_vllm", "export_target_for_vllm",
           "head_spec", "import_head", "serve_lines", "speculative_config", "add_export_arguments", "run_export"]

FORMATS = ("vllm", "speculators")
VLLM_ARCHITECTURE = "LlamaForCausalLMEagle3"


def _switches() -> dict:
    # vLLM drafter variants we do not compute, written as false so no default can flip them.
    return {"norm_before_fc": False, "fc_norm": False, "norm_output": False}


def vllm_config_dict(drafter: Drafter, k: int) -> dict:
    """The flat ``LlamaForCausalLMEagle3`` config.json for ``drafter`` (layout "vllm")."""
    from ..heads.io import window_keys

    cfg = drafter.config
    taps = list(cfg.aux_layer_ids)
    d = {
        "architectures": [VLLM_ARCHITECTURE], "model_type": "llama",
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim, "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta, "rope_scaling": cfg.rope_scaling,
        "max_position_embeddings": cfg.max_position_embeddings, "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.draft_vocab_size, "target_hidden_size": cfg.hidden_size,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        **window_keys(cfg),
        "eagle_aux_hidden_state_layer_ids": taps, "num_aux_hidden_states": len(taps),
        "eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": taps,
                         "norm_before_fc": False},
        "norm_before_residual": cfg.norm_before_residual, **_switches(), "torch_dtype": "float32",
    }
    if cfg.method == "peagle":
        # vLLM 0.32 reads mask_token_id; 0.24 (the H200's) reads only pard_token / ptd_token_id.
        d["mask_token_id"] = d["pard_token"] = cfg.mask_token_id
    d["peagle_lab"] = _provenance(drafter, k)
    return d


def speculators_config_dict(drafter: Drafter, k: int, verifier: str) -> dict:
    """The speculators config.json (layout "speculators"), our ``save_head`` one plus vLLM's switches."""
    from ..heads.io import head_config_dict

    d = head_config_dict(drafter.config, verifier=verifier, k=k)
    d.update(_switches())
    d["eagle_config"] = {"use_aux_hidden_state": True,
                         "eagle_aux_hidden_state_layer_ids": list(drafter.config.aux_layer_ids)}
    d["peagle_lab"] = _provenance(drafter, k)
    return d


def _provenance(drafter: Drafter, k: int) -> dict:
    from .. import __version__

    cfg = drafter.config
    return {"exported_by": f"peagle_lab {__version__}", "method": cfg.method,
            "parallel_drafting": cfg.method == "peagle", "num_speculative_tokens": k,
            "speculative_config": {"method": "eagle3", "num_speculative_tokens": k,
                                   "parallel_drafting": cfg.method == "peagle",
                                   "draft_sample_method": "probabilistic"}}


def target_embeddings(target_dir: Path | str) -> torch.Tensor:
    """The embedding table [vocab, H] of an HF target folder, read without loading the rest."""
    from safetensors import safe_open

    for f in sorted(Path(target_dir).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for name in ("model.embed_tokens.weight", "embed_tokens.weight"):
                if name in st.keys():
                    return st.get_tensor(name)
    raise VllmHeadError(f"{target_dir}: no model.embed_tokens.weight in its *.safetensors files")


def vllm_head_tensors(drafter: Drafter, target_embed: torch.Tensor | None = None,
                      layout: str = "vllm") -> dict[str, torch.Tensor]:
    """The tensors vLLM loads for ``drafter``, under vLLM's names.

    Args:
        target_embed: the target's embedding table [vocab, H]; ``embed_tokens.weight`` is
            written only where the drafter's effective table differs from it. None: the
            drafter's attached table is taken to be the target's.
        layout: "speculators" also writes ``t2d`` (speculators' own loader wants it).

    Raises:
        VllmHeadError: a drafter vLLM cannot express (a full-size vocabulary with a
            non-identity ``d2t``; a P-EAGLE head without embeddings to place its mask row in).
    """
    cfg = drafter.config
    sd = {k: v.detach().cpu().contiguous() for k, v in drafter.state_dict().items()}
    out = {k: v for k, v in sd.items() if k not in ("d2t", "t2d", "mask_hidden", "mask_embedding")}
    if cfg.draft_vocab_size < cfg.vocab_size:
        out["d2t"] = sd["d2t"].to(torch.int64)
    elif torch.any(sd["d2t"] != 0):
        raise VllmHeadError("the drafter's lm_head covers the whole vocabulary but d2t is not all zeros (a "
                            "permuted vocabulary); vLLM maps draft ids only for a smaller draft vocabulary")
    if layout == "speculators":
        out["t2d"] = sd["t2d"]
    table = drafter.embed_table if drafter.embed_table is not None else target_embed
    if cfg.method == "peagle":
        out["mask_hidden"] = sd["mask_hidden"].reshape(1, -1)
        if table is None:
            raise VllmHeadError("a P-EAGLE head needs an embedding table to carry its learned mask-token row: "
                                "call drafter.attach_embeddings(target.embed_tokens.weight) or pass target_dir")
        table = table.detach().cpu().to(sd["mask_embedding"].dtype).clone()
        table[cfg.mask_token_id] = sd["mask_embedding"]
    if table is not None:
        reference = target_embed if target_embed is not None else drafter.embed_table
        reference = None if reference is None else reference.detach().cpu().to(table.dtype)
        if reference is None or not torch.equal(table, reference):
            out["embed_tokens.weight"] = table.contiguous()
    return out


def export_for_vllm(drafter: Drafter, out_dir: Path | str, format: str = "vllm", target_dir: Path | str | None = None,
                    *, k: int = 5, dtype: torch.dtype | None = None, verifier: str | None = None) -> Path:
    """Write ``drafter`` as a head folder that vLLM loads and computes exactly as our engine does.

    Args:
        drafter: an EAGLE-3 or P-EAGLE ``Drafter`` (with the target's embeddings attached).
        out_dir: the folder to write (replaced atomically).
        format: "vllm" (flat ``LlamaForCausalLMEagle3`` config) or "speculators"
            (``speculators_model_type``; vLLM also accepts it as the main ``model``).
        target_dir: the target's HF folder: its embedding table decides whether
            ``embed_tokens.weight`` is written, and it is named as the speculators verifier.
        k: the K recorded in the folder (speculators' ``speculative_tokens``, the hint lines).
        dtype: cast floating tensors (e.g. torch.bfloat16 to ship), all but ``embed_tokens``;
            default: the drafter's.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: an unknown format; VllmHeadError: a head vLLM would reject.
    """
    if format not in FORMATS:
        raise ValueError(f"format={format!r} is not one of {', '.join(map(repr, FORMATS))}")
    if not isinstance(drafter, Drafter):
        raise ValueError(f"drafter must be a peagle_lab Drafter, got {type(drafter).__name__}")
    from safetensors.torch import save_file

    target_embed = target_embeddings(target_dir) if target_dir is not None else None
    tensors = vllm_head_tensors(drafter, target_embed, format)
    if dtype is not None:
        # embed_tokens keeps the target's precision: vLLM compares it with the target's table
        # in the serving dtype, and a rounded copy would replace every row, not just the mask's.
        tensors = {n: (t.to(dtype) if t.is_floating_point() and n != "embed_tokens.weight" else t)
                   for n, t in tensors.items()}
    verifier = verifier or (str(Path(target_dir).resolve()) if target_dir is not None else "SmolLM2-135M-Instruct")
    config = (vllm_config_dict(drafter, k) if format == "vllm" else speculators_config_dict(drafter, k, verifier))
    config["torch_dtype"] = str(dtype or drafter.dtype).replace("torch.", "")
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        check_head_folder(tmp)  # our own output must pass the check we hold other heads to
    return out_dir


def export_target_for_vllm(out_dir: Path | str | None = None, target=None, tokenizer=None) -> Path:
    """The target as a plain HF folder for vLLM (config.json, float32 safetensors, tokenizer, chat template).

    With no ``target``, the embedded SmolLM2 (``zoo.convert_default()``): returned as is when
    ``out_dir`` is None, else copied there. With a ``LlamaModel`` ``target``, it is written to
    ``out_dir`` with ``tokenizer``. vLLM's CPU build cannot read GGUF, hence this folder.
    """
    from ..models.checkpoints import save_hf_folder

    if target is not None:
        if out_dir is None:
            raise ValueError("export_target_for_vllm(target=...) needs an out_dir to write to")
        return save_hf_folder(target, out_dir, tokenizer)
    from ..zoo import convert_default

    src = convert_default(quiet=True)
    if out_dir is None:
        return src
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        for f in src.iterdir():
            if f.is_file():
                shutil.copyfile(f, tmp / f.name)
    return out_dir


def speculative_config(method: str, head_dir: Path | str, k: int) -> dict | None:
    """The ``speculative_config`` for ``LLM(...)`` / ``vllm serve --speculative-config`` (None: baseline).

    Both methods are vLLM's "eagle3"; P-EAGLE adds ``parallel_drafting`` (without it vLLM
    silently drafts autoregressively). ``draft_sample_method="probabilistic"`` makes vLLM
    sample drafts from the drafter's distribution at temperature > 0 as our engine does
    (vLLM's default drafts greedily); at temperature 0 both take the argmax.

    >>> speculative_config("peagle", "/heads/peagle", 7)["parallel_drafting"]
    True
    >>> speculative_config("baseline", "-", 3) is None
    True
    """
    from ..config import MAX_K, METHODS, check_choice, check_int

    check_choice("method", method, METHODS)
    if method == "baseline":
        return None
    check_int("num_speculative_tokens", k, 1, MAX_K)
    return {"method": "eagle3", "model": str(Path(head_dir).resolve()), "num_speculative_tokens": k,
            "parallel_drafting": method == "peagle", "draft_sample_method": "probabilistic"}


def serve_lines(target_dir: Path | str, method: str, head_dir: Path | str, k: int) -> str:
    """The Python and shell lines that serve ``head_dir`` with vLLM (what ``peagle-lab export`` prints)."""
    target = str(Path(target_dir).resolve())
    sc = speculative_config(method, head_dir, k)
    py = (f"from vllm import LLM, SamplingParams\n"
          f"llm = LLM(model={target!r}, dtype=\"float32\", speculative_config={sc!r})\n"
          f"llm.generate([\"Hello\"], SamplingParams(temperature=0, max_tokens=64))")
    sh = f"vllm serve {shlex.quote(target)} --dtype float32"
    if sc is not None:
        sh += f" --speculative-config {shlex.quote(json.dumps(sc))}"
    return f"# {method}, K={k}\n{py}\n\n{sh}\n"


# ------------------------------------------------------------------ CLI: peagle-lab export

def add_export_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``peagle-lab export``."""
    p.add_argument("--out", required=True, help="folder to write target/ and one folder per head into")
    p.add_argument("--head", nargs="*", default=[], metavar="DIR",
                   help="head folders to export (any layout import_head reads); default: the shipped heads")
    p.add_argument("--random", nargs="*", default=[], choices=("eagle3", "peagle"), metavar="METHOD",
                   help="also export untrained heads for these methods (lossless, AL≈1; for wiring checks)")
    p.add_argument("--layers", type=int, default=1, help="decoder layers of --random heads")
    p.add_argument("--format", choices=FORMATS, default="vllm")
    p.add_argument("-k", "--num-speculative-tokens", dest="k", type=int, default=5)
    p.add_argument("--dtype", choices=tuple(DTYPES), default=None, help="cast the head tensors (default: as trained)")
    p.add_argument("--model", help="target HF folder (default: the embedded SmolLM2, copied to OUT/target)")
    p.add_argument("--no-target", action="store_true", help="do not copy the target folder; point at it instead")


def import_for_export(head_dir: Path | str, target_dir: Path | str) -> Drafter:
    """``import_head`` without loading the target: its embedding table is read from ``target_dir``."""
    drafter = import_head(head_dir, dtype=torch.float32)
    if drafter.embed_table is None:  # the head shares the target's table (and, for P-EAGLE, maybe its mask row)
        drafter.attach_embeddings(target_embeddings(target_dir))
    return drafter


def _default_heads() -> list[Path]:
    from ..heads import bundled_head_dir

    return [p for p in (bundled_head_dir("eagle3"), bundled_head_dir("peagle")) if p is not None]


def run_export(args) -> int:
    """``peagle-lab export``: write the target and heads, check them, print the serving lines."""
    from ..config import MAX_K, check_int

    check_int("-k", args.k, 1, MAX_K)  # before anything is copied or written
    check_int("--layers", args.layers, 1, 16)
    out = Path(args.out)
    if args.model and args.no_target:
        target_dir = Path(args.model)
    elif args.model:
        target_dir = out / "target"
        with atomic_dir(target_dir) as tmp:
            shutil.copytree(args.model, tmp, dirs_exist_ok=True)
    else:
        target_dir = export_target_for_vllm(None if args.no_target else out / "target")
    print(f"target: {target_dir}")
    heads = [Path(h) for h in args.head] or ([] if args.random else _default_heads())
    drafters: list[tuple[Drafter, str]] = [(import_for_export(h, target_dir), h.name) for h in heads]
    if args.random:
        from ..drafter import random_drafter
        from ..models.checkpoints import load_hf_folder

        target = load_hf_folder(target_dir)
        drafters += [(random_drafter(target, m, num_hidden_layers=args.layers), f"random-{m}") for m in args.random]
    if not drafters:
        print("no heads to export: peagle_lab/heads/{eagle3,peagle} are missing; pass --head DIR or --random")
        return 1
    for drafter, name in drafters:
        method = drafter.config.method
        dest = export_for_vllm(drafter, out / f"{name}-{args.format}", args.format, target_dir, k=args.k,
                               dtype=DTYPES[args.dtype] if args.dtype else None)
        print(f"{method} head: {dest}\n")
        print(serve_lines(target_dir, method, dest, args.k))
    return 0
