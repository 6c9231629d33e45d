"""One ``Drafter`` module for EAGLE-3 and P-EAGLE (the EAGLE-3 architecture).

```
taps [.., 3H] ─fc─► h [.., H] ─┐                     (P-EAGLE mask slots: h = fc(mask_hidden))
token ─embed─► e [.., H] ──────┤
  layer 0: x = attn(cat(input_layernorm(e), hidden_norm(h)))  + h   (2H-wide attention input)
           x = x + mlp(post_attention_layernorm(x))
  layers 1..N-1: plain Llama blocks
  norm ─► lm_head [draft_vocab] ─► + d2t ─► target ids
```
The pre-norm output of the last layer is the hidden state EAGLE-3 feeds back into its next
pass. Token embeddings are the target's and stay frozen; P-EAGLE adds a learned embedding
for ``mask_token_id`` and a learned ``mask_hidden`` in the pre-fc 3H space, so that
``shared_hidden = fc(mask_hidden)`` as in vLLM and speculators.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .config import DrafterConfig
from .models.kv_cache import KVCache
from .models.llama import (MLP, Attention, Block, LlamaModel, RMSNorm, call_layer, embed_ids, forward_epilogue,
                           frequencies_on, rope_inv_freq, start_forward)


class FirstLayer(nn.Module):
    """The EAGLE-3 first decoder layer: attention over ``[embed ⊕ hidden]``."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        lc = cfg.llama_config()
        self.norm_before_residual = cfg.norm_before_residual
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(lc, in_features=2 * cfg.hidden_size)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(lc)

    def forward(self, emb, hidden, cos, sin, ctx):
        a, m = self.forward_deferred(emb, hidden, cos, sin, ctx)
        return a + m

    def forward_deferred(self, emb, hidden, cos, sin, ctx):
        """``(a, m)`` with the layer's output ``a + m`` left to the next layer (see ``Block.forward_deferred``)."""
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        a = residual + self.self_attn(torch.cat([self.input_layernorm(emb), normed], -1), cos, sin, ctx)
        return a, self.mlp(self.post_attention_layernorm(a))


@dataclass(frozen=True)
class DrafterOutput:
    logits: torch.Tensor | None  # [c, m, draft_vocab] float32 at the requested rows
    hidden: torch.Tensor  # [c, T, H] pre-norm output (EAGLE-3 feeds it back)


class Drafter(nn.Module):
    """EAGLE-3 / P-EAGLE drafter; see the module docstring for the data flow."""

    def __init__(self, cfg: DrafterConfig, embed_tokens: torch.Tensor | None = None) -> None:
        super().__init__()
        self.config = cfg
        H = cfg.hidden_size
        self.fc = nn.Linear(cfg.num_taps * H, H, bias=False)
        self.layers = nn.ModuleList([FirstLayer(cfg)] + [Block(cfg.llama_config()) for _ in range(cfg.num_hidden_layers - 1)])
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        # d2t: target_id = draft_id + d2t[draft_id]; t2d: which target ids the draft vocab covers.
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self.t2d[: cfg.draft_vocab_size] = True
        if cfg.method == "peagle":
            self.mask_hidden = nn.Parameter(torch.zeros(cfg.num_taps * H))
            self.mask_embedding = nn.Parameter(torch.zeros(H))
        else:
            self.mask_hidden = self.mask_embedding = None
        self._inv_freq = rope_inv_freq(cfg.llama_config())
        self._embed: torch.Tensor | None = None
        self.reset_parameters()
        if embed_tokens is not None:
            self.attach_embeddings(embed_tokens)

    def reset_parameters(self, std: float = 0.02, generator: torch.Generator | None = None) -> None:
        """Random init (normal(0, std) linears, unit norms); used for untrained heads."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                with torch.no_grad():
                    m.weight.normal_(0.0, std, generator=generator)
            elif isinstance(m, RMSNorm):
                nn.init.ones_(m.weight)
        if self.mask_hidden is not None:
            with torch.no_grad():
                self.mask_hidden.normal_(0.0, 1.0, generator=generator)

    @property
    def embed_table(self) -> torch.Tensor | None:
        """The token-embedding table the drafter reads (the target's, attached), or None before that."""
        return self._embed

    def rope_frequencies(self, device: torch.device) -> torch.Tensor:
        """The RoPE inverse frequencies (float32) on ``device``, moved there once (see ``frequencies_on``)."""
        return frequencies_on(self, device)

    def attach_embeddings(self, embed_tokens: torch.Tensor) -> "Drafter":
        """Share the target's (frozen) token embedding table ``[vocab, H]``."""
        cfg = self.config
        if tuple(embed_tokens.shape) != (cfg.vocab_size, cfg.hidden_size):
            raise ValueError(f"embedding table has shape {tuple(embed_tokens.shape)}, this drafter "
                             f"expects ({cfg.vocab_size}, {cfg.hidden_size}) (the target's vocab × hidden)")
        self._embed = embed_tokens.detach()
        if self.mask_embedding is not None and not torch.any(self.mask_embedding):
            with torch.no_grad():  # start the learned mask embedding at the token's own row
                self.mask_embedding.copy_(self._embed[cfg.mask_token_id].to(self.mask_embedding))
        return self

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def allocate_cache(self, max_batch: int, max_len: int) -> KVCache:
        cfg = self.config
        return KVCache.allocate(cfg.num_hidden_layers, max_batch, max_len, cfg.num_key_value_heads,
                                cfg.head_dim, self.dtype, self.device)

    def shared_hidden(self) -> torch.Tensor:
        """``fc(mask_hidden)`` [H]: the hidden state of every P-EAGLE mask slot."""
        if self.mask_hidden is None:
            raise ValueError("shared_hidden is a P-EAGLE parameter; this drafter is eagle3")
        return self.fc(self.mask_hidden.to(self.dtype))

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Target embeddings, with the learned mask embedding in P-EAGLE mask slots."""
        table, mask_embedding, mask_id = self._embedding_args(input_ids.device)
        return embed_ids(input_ids, table, self.dtype, mask_embedding, mask_id)

    def _embedding_args(self, device: torch.device) -> tuple:
        """(table, mask embedding or None, mask token id): what :func:`embed_ids` takes after the ids and dtype."""
        if self._embed is None:
            raise ValueError("call drafter.attach_embeddings(target.embed_tokens.weight) first")
        if self._embed.device != device:
            self._embed = self._embed.to(device)
        mask_id = self.config.mask_token_id if self.mask_embedding is not None else -1
        return self._embed, self.mask_embedding, mask_id

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Map draft-vocabulary ids to target ids through ``d2t`` offsets."""
        return draft_ids + self.d2t[draft_ids]

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, *,
                cache: KVCache | None = None, slot_mapping: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, logits_rows: torch.Tensor | None = None,
                return_logits: bool = True, layer_fn=None, fresh: bool = False) -> DrafterOutput:
        """One drafter pass over ``T`` slots per request.

        Args:
            input_ids: slot tokens (mask slots carry ``mask_token_id``).  # [c, T]
            hidden: slot hidden states, already fc-projected (H wide).  # [c, T, H]
            positions: slot positions.  # [c, T]
            cache / slot_mapping: the drafter's own KV cache and where to write (-1: nowhere).
            attn_mask: an explicit boolean mask [c, 1, T, S] (training), else causal by position
                within ``config.sliding_window``.
            logits_rows: [c, m] slot indices to compute logits for (default: all T).
            layer_fn: runs each layer (the engine passes a compiled ``call_layer``).
            fresh: a first draft's batch (``prepare_draft_inputs`` after a prefill): every valid slot's
                position is its column and the cache block holds nothing the call must read, so
                attention runs causally over the call's own keys (SDPA's fused kernel, as the
                target's first prefill chunk does) instead of over the cache block through a mask.
                Ignored when the call is longer than ``config.sliding_window`` (the window would
                bind); the KV is written either way.

        Returns:
            DrafterOutput(logits [c, m, draft_vocab] float32, hidden [c, T, H] pre-norm).
        """
        if hidden.shape[:2] != input_ids.shape or hidden.shape[-1] != self.config.hidden_size:
            raise ValueError(f"hidden {tuple(hidden.shape)} must be [c, T, {self.config.hidden_size}] "
                             f"for input_ids {tuple(input_ids.shape)}")
        window = self.config.sliding_window
        fresh = fresh and attn_mask is None and (window is None or input_ids.shape[1] <= window)
        ctx, cos, sin, emb = start_forward(layer_fn, input_ids, positions, cache, slot_mapping, attn_mask,
                                           None if fresh else window, fresh, self.rope_frequencies(positions.device),
                                           self.dtype,
                                           *self._embedding_args(input_ids.device))
        run = layer_fn or call_layer
        x, delta = run(self.layers[0], emb, hidden.to(self.dtype), cos, sin, ctx.layer(0))
        for i, layer in enumerate(self.layers[1:], start=1):
            _, x, delta = run(layer, x, delta, cos, sin, ctx.layer(i))
        logits, x = (getattr(run, "epilogue", None) or forward_epilogue)(
            x, delta, logits_rows, self.norm.weight, self.norm.eps, self.lm_head.weight if return_logits else None,
            False)
        return DrafterOutput(logits, x)


def random_drafter(target, method: str = "peagle", num_hidden_layers: int = 1, seed: int = 0,
                   draft_vocab_size: int | None = None) -> Drafter:
    """An untrained drafter for ``target`` (deterministic for a seed); lossless tests use it."""
    cfg = DrafterConfig.for_target(target.config, method, num_hidden_layers, draft_vocab_size)
    d = Drafter(cfg)
    d.reset_parameters(generator=torch.Generator().manual_seed(seed))
    return d.to(device=target.device, dtype=target.dtype).attach_embeddings(target.embed_tokens.weight)


def check_drafter_fits(drafter: Drafter, target: LlamaModel, method: str) -> None:
    """Raise ValueError when ``drafter`` cannot serve ``target`` with ``method``."""
    dc, tc = drafter.config, target.config
    if dc.method != method:
        raise ValueError(f"the drafter was built for method={dc.method!r}, the engine runs {method!r}")
    if dc.hidden_size != tc.hidden_size or dc.vocab_size != tc.vocab_size:
        raise ValueError(f"drafter (hidden {dc.hidden_size}, vocab {dc.vocab_size}) does not fit the target "
                         f"(hidden {tc.hidden_size}, vocab {tc.vocab_size})")
    if any(not 0 <= k < tc.num_hidden_layers for k in dc.aux_layer_ids):
        raise ValueError(f"drafter taps {dc.aux_layer_ids} do not exist in a {tc.num_hidden_layers}-layer target")
    if tuple(dc.aux_layer_ids) != tuple(tc.taps):
        raise ValueError(f"drafter taps {tuple(dc.aux_layer_ids)} differ from the target's {tuple(tc.taps)}; "
                         "build the target with aux_layer_ids matching the head")
