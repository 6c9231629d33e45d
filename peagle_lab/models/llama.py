"""A compact Llama-family target transformer with a slot-mapped KV cache and EAGLE-3 taps.

One file, one concept (nanoGPT-style): RMSNorm, RoPE with the checkpoint's rope settings,
grouped-query attention, SwiGLU and tied embeddings, covering Llama, Qwen2 (q/k/v bias) and
Qwen3 (q/k RMSNorm). Two things make it a speculative-decoding target rather than a plain LM:

* its K/V go to a preallocated ``KVCache`` (``peagle_lab.models.kv_cache``) through a flat
  ``slot_mapping`` in which ``-1`` means "write nothing", exactly like vLLM's, so a rejected
  draft token's keys are overwritten by the next step and the cache is never "rolled back".
* ``forward`` returns the taps: the residual stream entering layers ``aux_layer_ids``
  (transformers' ``hidden_states[k]``), concatenated to ``[c, T, 3H]``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .kv_cache import KVCache, attend, attention_mask, flat_slots, read_kv, write_kv


@dataclass(frozen=True)
class LlamaConfig:
    """Shape and numerics of a Llama-family checkpoint (field names as in HF config.json).

    The defaults are SmolLM2-135M-Instruct's, the embedded target (its HF ``config.json``,
    HuggingFaceTB/SmolLM2-135M-Instruct); ``DrafterConfig``'s defaults are read from them.
    """

    vocab_size: int = 49152
    hidden_size: int = 576
    intermediate_size: int = 1536
    num_hidden_layers: int = 30
    num_attention_heads: int = 9
    num_key_value_heads: int = 3
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    # None or a dict with "rope_type" in {"default", "linear", "llama3"} and its factors.
    rope_scaling: dict | None = None
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = True
    attention_bias: bool = False  # Qwen2 puts a bias on q/k/v
    qk_norm: bool = False  # Qwen3 RMS-normalises q and k per head
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    model_type: str = "llama"
    # EAGLE-3 taps; None means the default (2, L // 2, L - 3).
    aux_layer_ids: tuple[int, ...] | None = None
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}")
        for k in self.taps:
            if not 0 <= k < self.num_hidden_layers:
                raise ValueError(f"aux_layer_ids {self.taps} must lie in "
                                 f"[0, {self.num_hidden_layers}) (entries are layer inputs)")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            if kind not in ("default", "linear", "llama3"):
                raise ValueError(f"rope_scaling type {kind!r} is not supported; "
                                 "supported: default, linear, llama3")

    @property
    def taps(self) -> tuple[int, ...]:
        """The tap layer ids, the EAGLE-3 default (2, L//2, L-3) when unset."""
        if self.aux_layer_ids is not None:
            return tuple(self.aux_layer_ids)
        n = self.num_hidden_layers
        return (min(2, n - 1), n // 2, max(n - 3, 0))

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, int):
            return (self.eos_token_id,)
        return tuple(self.eos_token_id)


def rope_inv_freq(cfg: LlamaConfig) -> torch.Tensor:
    """Inverse RoPE frequencies ``[head_dim // 2]`` with the checkpoint's scaling applied."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    rs = cfg.rope_scaling or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        inv = inv / float(rs["factor"])
    elif kind == "llama3":
        # Llama-3.1 smooth interpolation between low- and high-frequency bands.
        factor, lo, hi = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        old = float(rs["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        mid = (wavelen <= old / lo) & (wavelen >= old / hi)
        inv = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv.float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [c, T, n, hd] by the half-split (HF/NeoX) convention.

    ``cos``/``sin`` are [c, T, 1, hd] from :func:`rope_cos_sin`, whose ``sin`` carries the
    rotation's sign (−sin on the first half), so the rotation is x·cos + [x2, x1]·sin: three
    kernels instead of five.
    """
    x1, x2 = x.chunk(2, dim=-1)
    return torch.addcmul(x * cos, torch.cat((x2, x1), dim=-1), sin)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """:class:`RMSNorm` as a function of its weight (the compiled forward edges call it).

    Normalises in float32 like the reference implementations, then casts back; ``F.rms_norm``
    is one fused kernel on CUDA where the spelled-out form is four.
    """
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


class FusedLinear(nn.Module):
    """Several ``nn.Linear`` over the same input as one matrix product, for inference.

    The layers keep their own parameters (state dicts, training and checkpoints see nothing
    new). :meth:`fuse` re-homes their weights as views into one concatenated tensor, so one
    ``F.linear`` computes all outputs; it is used only without autograd (the engine runs
    under ``torch.inference_mode``) and only while the layers' weights are still those views
    (``model.to(...)`` makes new tensors: then the separate layers run again). Unfused, or
    with gradients on, it calls each layer in turn. The parameters stay the same objects, so
    optimizers and references to them are unaffected.
    """

    def __init__(self, *layers: nn.Linear) -> None:
        super().__init__()
        self._layers = layers  # a tuple, not a ModuleList: the parent already owns them
        self._weight: torch.Tensor | None = None
        self._bias: torch.Tensor | None = None

    def fuse(self) -> None:
        """Concatenate the weights (and biases) and make each layer's parameters views of them."""
        if self.fused:
            return
        sizes = [m.out_features for m in self._layers]
        with torch.no_grad():
            w = torch.cat([m.weight for m in self._layers])
            b = torch.cat([m.bias for m in self._layers]) if self._layers[0].bias is not None else None
        # .data, not new Parameters: an optimizer holding these parameters keeps working (its
        # in-place updates then land in the fused tensor too).
        for m, wi, bi in zip(self._layers, w.split(sizes), b.split(sizes) if b is not None else [None] * len(sizes)):
            m.weight.data = wi
            if bi is not None:
                m.bias.data = bi
        self._weight, self._bias, self._sizes = w, b, sizes

    def _apply(self, fn, recurse=True):
        # .to()/.cuda()/.half() give the layers new tensors: drop the concatenated copy.
        self._weight = self._bias = None
        return super()._apply(fn, recurse)

    @property
    def fused(self) -> bool:
        if torch.compiler.is_compiling():  # dynamo cannot compare data pointers; fuse() ran before compiling
            return self._weight is not None
        return self._weight is not None and self._layers[0].weight.data_ptr() == self._weight.data_ptr()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not torch.is_grad_enabled() and self.fused:
            return F.linear(x, self._weight, self._bias).split(self._sizes, dim=-1)
        return tuple(m(x) for m in self._layers)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig, in_features: int | None = None) -> None:
        super().__init__()
        h = in_features or cfg.hidden_size
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(h, self.nh * self.hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.qkv = FusedLinear(self.q_proj, self.k_proj, self.v_proj)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: "LayerContext") -> torch.Tensor:
        c, T, _ = x.shape
        q, k, v = self.qkv(x)
        q = q.view(c, T, self.nh, self.hd)
        k = k.view(c, T, self.nkv, self.hd)
        v = v.view(c, T, self.nkv, self.hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, cos, sin)  # (c, T, nh, hd)
        k = apply_rope(k, cos, sin)  # (c, T, nkv, hd)
        if ctx.kv is not None:  # our KVCache: this layer's tensors, sizes from the mask
            write_kv(*ctx.kv, ctx.slots, k.flatten(0, 1), v.flatten(0, 1))
            if ctx.mask is None:  # a fresh prompt: nothing in the cache before it, so its own keys suffice
                k, v = k.transpose(1, 2), v.transpose(1, 2)
            else:
                k, v = read_kv(*ctx.kv, c, ctx.mask.shape[-1])  # (c, nkv, max_len, hd)
                k, v = k.to(q.dtype), v.to(q.dtype)
        elif ctx.cache is not None:  # a stand-in with write/read by layer (the EAGLE-3 trainer's)
            ctx.cache.write(ctx.layer, ctx.slot_mapping.reshape(-1), k.flatten(0, 1), v.flatten(0, 1))
            k, v = ctx.cache.read(ctx.layer, c)
            k, v = k.to(q.dtype), v.to(q.dtype)
        else:
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        y = attend(q.transpose(1, 2), k, v, ctx.mask, ctx.decode_attention, ctx.kv_len)  # (c, nh, T, hd)
        return self.o_proj(y.transpose(1, 2).reshape(c, T, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.gate_up = FusedLinear(self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x)
        return self.down_proj(F.silu(gate) * up)


class Block(nn.Module):
    """Pre-norm decoder block: x + attn(norm(x)), then + mlp(norm(.))."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, ctx: "LayerContext"):
        _, a, m = self.forward_deferred(x, None, cos, sin, ctx)
        return a + m

    def forward_deferred(self, x, delta, cos, sin, ctx: "LayerContext"):
        """The block with the last residual add left to whoever comes next.

        Returns ``(h, a, m)``: ``h = x + delta`` is this block's input (``delta`` is the
        previous block's ``m``, None for the first block), ``a = h + attn(norm(h))`` and
        ``m = mlp(norm(a))``; the block's output is ``a + m``. The next block adds it in
        the same kernel as its input norm (one kernel a layer fewer when compiled), and
        :class:`LlamaModel` reads its taps from ``h``. The arithmetic is :meth:`forward`'s.
        """
        h = x if delta is None else x + delta
        a = h + self.self_attn(self.input_layernorm(h), cos, sin, ctx)
        return h, a, self.mlp(self.post_attention_layernorm(a))


@dataclass
class LayerContext:
    """What one attention layer needs: the mask and this layer's cache, never a layer index
    that the compiled code would have to specialise on (see :func:`call_layer`)."""

    mask: torch.Tensor | None  # [c, 1, T, S] bool (or a flex BlockMask); None: causal over this call's keys
    kv: tuple[torch.Tensor, torch.Tensor] | None = None  # this layer's K/V rows of our KVCache
    slots: torch.Tensor | None = None  # [c*T] flat cache rows, -1 sent to the trash row
    cache: object = None  # a stand-in cache with write/read by layer (the EAGLE-3 trainer's ChainKV)
    layer: int = 0  # for the stand-in only
    slot_mapping: torch.Tensor | None = None  # for the stand-in only
    decode_attention: object = None  # KVCache.decode_attention
    kv_len: torch.Tensor | None = None  # [c] int32: no query sees a key at or past kv_len[b]


@dataclass
class AttnContext:
    """What every attention layer of one forward shares: the cache, slots and mask."""

    cache: KVCache | None
    slot_mapping: torch.Tensor | None  # [c, T]
    mask: torch.Tensor | None  # [c, 1, T, S] bool; None: causal over this call's own keys (see make_context)
    slots: torch.Tensor | None = None  # [c*T] flat cache slots, -1 sent to the trash row
    kv_len: torch.Tensor | None = None  # [c] int32, for the cache's decode_attention (see make_context)

    def __post_init__(self) -> None:
        # Only for our KVCache: stand-ins (the EAGLE-3 trainer's ChainKV) keep plain write().
        if isinstance(self.cache, KVCache) and self.slot_mapping is not None and self.slots is None:
            self.slots = self.cache.slots(self.slot_mapping)

    def layer(self, i: int) -> LayerContext:
        """The context of layer ``i``."""
        if isinstance(self.cache, KVCache):
            return LayerContext(self.mask, (self.cache.k[i], self.cache.v[i]), self.slots,
                                decode_attention=self.cache.decode_attention, kv_len=self.kv_len)
        return LayerContext(self.mask, cache=self.cache, layer=i, slot_mapping=self.slot_mapping)


def call_layer(layer: nn.Module, *args):
    """``layer.forward_deferred(*args)``: the unit the engine compiles (``SpecConfig.compile``).

    One decoder layer, not the whole model: every layer of a model (and of a drafter) has the
    same code and shapes, so one compilation serves them all and compiling stays quick; its
    context carries that layer's cache tensors rather than an index into a list of them. The
    layers' deferred form (:meth:`Block.forward_deferred`) hands each block's last residual add
    to the next block, where the compiler fuses it with that block's input norm.
    """
    return layer.forward_deferred(*args)


def make_context(positions: torch.Tensor, cache: KVCache | None, slot_mapping: torch.Tensor | None,
                 attn_mask: torch.Tensor | None = None, window: int | None = None,
                 fresh: bool = False) -> AttnContext:
    """Build the shared attention context for ``positions`` [c, T].

    Without a cache the T tokens attend to each other by position (training, parity checks);
    with one, queries attend to the request's cache block by position. ``window`` keeps a
    query at position p to the keys at p - window + 1 .. p (a drafter's ``sliding_window``,
    as in transformers and vLLM). ``attn_mask`` [c, 1, T, S] overrides the mask (the P-EAGLE
    training mask; ``window`` does not apply to it).

    ``fresh`` (with our ``KVCache``, no window): every row's positions are 0..T-1 and its cache
    block holds nothing before them, as in a prompt's first prefill chunk. The keys are then
    the call's own, so attention runs causally over them (SDPA's fused flash kernel) instead of
    over the whole cache block through a ``[c, 1, T, max_len]`` mask; the KV is written as always.
    """
    if attn_mask is not None:
        return AttnContext(cache, slot_mapping, attn_mask)
    if fresh:
        if not isinstance(cache, KVCache) or window is not None:
            raise ValueError(f"fresh=True needs a KVCache and no window, got cache={type(cache).__name__}, "
                             f"window={window}")
        return AttnContext(cache, slot_mapping, None)
    if cache is None:
        return AttnContext(None, None, attention_mask(positions, positions, window=window))
    if slot_mapping is None:
        raise ValueError("slot_mapping is required when a KV cache is given")
    if not isinstance(cache, KVCache):  # a stand-in cache (the EAGLE-3 trainer's): a mask only
        kv_pos = torch.arange(cache.max_len, device=positions.device).expand(positions.shape[0], -1)
        return AttnContext(cache, slot_mapping, attention_mask(positions, kv_pos, window=window))
    mask, slots, kv_len = cached_context(positions, slot_mapping, cache.key_positions(), cache.trash_slot, window,
                                         cache.decode_attention is not None)
    return AttnContext(cache, slot_mapping, mask, slots=slots, kv_len=kv_len)


def cached_context(positions: torch.Tensor, slot_mapping: torch.Tensor, key_positions: torch.Tensor,
                   trash_slot: int, window: int | None, with_kv_len: bool):
    """The tensors of a call over our ``KVCache``: (mask [c, 1, T, S], flat slots [c*T], kv_len [c] or None).

    ``key_positions`` is ``KVCache.key_positions()``; ``-1`` slots go to ``trash_slot``. ``kv_len``
    (with the cache's decode attention): a query at position p sees keys 0..p, so none of request
    b's queries looks past its largest position and the decode kernel need not walk the rest of the block.
    """
    mask = attention_mask(positions, key_positions.expand(positions.shape[0], -1), window=window)
    slots = flat_slots(slot_mapping, trash_slot)
    kv_len = (positions.amax(-1) + 1).clamp(max=key_positions.shape[0]).to(torch.int32) if with_kv_len else None
    return mask, slots, kv_len


def embed_ids(ids: torch.Tensor, table: torch.Tensor, dtype: torch.dtype, mask_embedding: torch.Tensor | None = None,
              mask_token_id: int = -1) -> torch.Tensor:
    """Rows of ``table`` for ``ids`` in ``dtype``; with ``mask_embedding``, that row wherever ``ids == mask_token_id``."""
    e = F.embedding(ids, table).to(dtype)
    if mask_embedding is not None:
        e = torch.where((ids == mask_token_id)[..., None], mask_embedding.to(dtype), e)
    return e


def forward_prologue(ids, positions, slot_mapping, key_positions, trash_slot: int, window: int | None,
                     with_kv_len: bool, inv_freq, dtype, table, mask_embedding=None, mask_token_id: int = -1):
    """What a forward over our ``KVCache`` makes before its first layer (no ``attn_mask``, not fresh), as
    tensors: (x, mask, slots, kv_len, cos, sin), from :func:`embed_ids`, :func:`cached_context` and
    :func:`rope_cos_sin`. Eagerly that is some twenty small kernels; the engine compiles it as one
    region (``SpecConfig.compile_edges``, see :class:`~peagle_lab.engine.CompiledForward`)."""
    mask, slots, kv_len = cached_context(positions, slot_mapping, key_positions, trash_slot, window, with_kv_len)
    cos, sin = rope_cos_sin(inv_freq, positions, dtype)
    return embed_ids(ids, table, dtype, mask_embedding, mask_token_id), mask, slots, kv_len, cos, sin


def forward_epilogue(x, delta, rows, norm_weight, eps: float, lm_weight, norm_first: bool):
    """What a forward does after its last layer: (float32 logits or None, hidden).

    ``x + delta`` is the last layer's output (see ``Block.forward_deferred``). ``norm_first`` (the
    target): the final norm, then ``rows`` [c, m] picked (None: all), then the lm_head; hidden is
    the normed state. Otherwise (a drafter): rows picked, then norm and lm_head; hidden is the
    pre-norm state EAGLE-3 feeds back. ``lm_weight`` None skips the logits.
    """
    x = x + delta
    if norm_first:
        x = rms_norm(x, norm_weight, eps)
    if lm_weight is None:
        return None, x
    picked = x if rows is None else torch.gather(x, 1, rows[..., None].expand(-1, -1, x.shape[-1]))
    if not norm_first:
        picked = rms_norm(picked, norm_weight, eps)
    return F.linear(picked, lm_weight).float(), x


def start_forward(layer_fn, ids, positions, cache, slot_mapping, attn_mask, window, fresh: bool, inv_freq, dtype,
                  table, mask_embedding=None, mask_token_id: int = -1):
    """(context, cos, sin, x) for a forward: through ``layer_fn.prologue`` when it has one (the engine's
    compiled edges) and the call reads our ``KVCache`` through a mask, else eagerly."""
    prologue = getattr(layer_fn, "prologue", None)
    if prologue is not None and isinstance(cache, KVCache) and slot_mapping is not None and attn_mask is None \
            and not fresh:
        x, mask, slots, kv_len, cos, sin = prologue(ids, positions, slot_mapping, cache.key_positions(),
                                                    cache.trash_slot, window, cache.decode_attention is not None,
                                                    inv_freq, dtype, table, mask_embedding, mask_token_id)
        return AttnContext(cache, slot_mapping, mask, slots=slots, kv_len=kv_len), cos, sin, x
    ctx = make_context(positions, cache, slot_mapping, attn_mask, window=window, fresh=fresh)
    cos, sin = rope_cos_sin(inv_freq, positions, dtype)
    return ctx, cos, sin, embed_ids(ids, table, dtype, mask_embedding, mask_token_id)


def frequencies_on(model: nn.Module, device: torch.device | str) -> torch.Tensor:
    """``model._inv_freq`` moved to ``device`` once (a plain attribute, so ``model.to`` leaves it behind).

    Call it before compiling a forward: the first call inside a compiled region moves the
    tensor as a side effect, and the next call then fails dynamo's device guard and compiles
    everything again (the training step did, 35-45 s on the H200, until the Trainer called
    this first).
    """
    device = torch.device(device)
    if model._inv_freq.device != device:
        model._inv_freq = model._inv_freq.to(device)
    return model._inv_freq


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin ``[c, T, 1, hd]`` for integer ``positions`` [c, T] (see :func:`apply_rope`)."""
    freqs = positions[..., None].float() * inv_freq  # (c, T, hd/2)
    cos = torch.cat((freqs, freqs), dim=-1).cos()
    sin = freqs.sin()
    sin = torch.cat((-sin, sin), dim=-1)
    return cos[:, :, None].to(dtype), sin[:, :, None].to(dtype)


def fuse_projections(module: nn.Module) -> int:
    """Fuse every FusedLinear inside ``module``; returns how many were fused."""
    fused = [m for m in module.modules() if isinstance(m, FusedLinear)]
    for m in fused:
        m.fuse()
    return len(fused)


@dataclass(frozen=True)
class TargetOutput:
    logits: torch.Tensor | None  # [c, T, V] float32
    taps: torch.Tensor | None  # [c, T, len(aux_layer_ids) * H]
    hidden: torch.Tensor | None  # [c, T, H] final-normed hidden states (None from SpecDecoder's graphed prefill)


class LlamaModel(nn.Module):
    """The target: embeddings, ``num_hidden_layers`` blocks, final norm, (tied) lm_head."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        # A plain attribute, not a buffer: model.to(bfloat16) must not round the frequencies.
        self._inv_freq = rope_inv_freq(cfg)

    def reset_rope(self) -> None:
        """Rebuild the RoPE frequencies from the config (after building the model on "meta")."""
        self._inv_freq = rope_inv_freq(self.config)

    def rope_frequencies(self, device: torch.device) -> torch.Tensor:
        """The RoPE inverse frequencies (float32) on ``device``, moved there once (:func:`rope_cos_sin` takes them)."""
        return frequencies_on(self, device)

    def fuse_projections(self) -> "LlamaModel":
        """Fuse q/k/v and gate/up into one matrix product each (inference; see FusedLinear)."""
        fuse_projections(self)
        return self

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def allocate_cache(self, max_batch: int, max_len: int, dtype: torch.dtype | None = None) -> KVCache:
        cfg = self.config
        return KVCache.allocate(cfg.num_hidden_layers, max_batch, max_len, cfg.num_key_value_heads,
                                cfg.head_dim, dtype or self.dtype, self.device)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, *, cache: KVCache | None = None,
                slot_mapping: torch.Tensor | None = None, return_logits: bool = True,
                return_taps: bool = True, logits_rows: torch.Tensor | None = None,
                attn_mask=None, layer_fn=None, fresh: bool = False) -> TargetOutput:
        """Run ``input_ids`` [c, T] at ``positions`` [c, T].

        Args:
            input_ids: token ids, one padded row per request.  # [c, T]
            positions: absolute positions of those tokens.  # [c, T]
            cache: the KV cache to write to and read from; None attends within the call.
            slot_mapping: flat KV slot per token, -1 writes nothing.  # [c, T]
            return_logits / return_taps: skip the work that the caller does not need.
            logits_rows: optional [c, m] indices along T; logits only for those rows.
            attn_mask: overrides the causal-by-position mask without a cache: a boolean
                [c, 1, T, T] or a flex ``BlockMask`` (training on packed rows of several sequences).
            layer_fn: runs each decoder layer as ``layer_fn(layer, x, delta, cos, sin, layer_context)``
                (the engine passes a compiled :func:`call_layer`); None calls :func:`call_layer`.
            fresh: with ``cache``, the rows are prompts from position 0 with nothing cached before
                them: attention runs causally over the call's own keys (see :func:`make_context`).

        Returns:
            TargetOutput with float32 ``logits`` [c, T or m, V] and ``taps`` [c, T, 3H].

        Raises:
            ValueError: mismatched shapes or ids outside the vocabulary.
        """
        if input_ids.dim() != 2 or positions.shape != input_ids.shape:
            raise ValueError(f"input_ids {tuple(input_ids.shape)} and positions "
                             f"{tuple(positions.shape)} must both be [c, T]")
        if slot_mapping is not None and slot_mapping.shape != input_ids.shape:
            raise ValueError(f"slot_mapping {tuple(slot_mapping.shape)} must match input_ids "
                             f"{tuple(input_ids.shape)}")
        ctx, cos, sin, x = start_forward(layer_fn, input_ids, positions, cache, slot_mapping, attn_mask, None, fresh,
                                         self.rope_frequencies(positions.device), self.dtype, self.embed_tokens.weight)
        delta = None
        taps_at = self.config.taps
        taps = []
        for i, layer in enumerate(self.layers):
            h, x, delta = (layer_fn or call_layer)(layer, x, delta, cos, sin, ctx.layer(i))
            if return_taps and i in taps_at:
                taps.append(h)  # layer i's input
        # Repeated tap ids (tiny models) are legal; keep their order.
        tap_list = [taps[sorted(set(taps_at)).index(k)] for k in taps_at] if return_taps else None
        logits, x = (getattr(layer_fn, "epilogue", None) or forward_epilogue)(
            x, delta, logits_rows, self.norm.weight, self.norm.eps, self.lm_head.weight if return_logits else None, True)
        return TargetOutput(logits, torch.cat(tap_list, -1) if return_taps else None, x)
