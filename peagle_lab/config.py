"""Frozen configs. Names follow vLLM's ``speculative_config`` where one exists."""
from __future__ import annotations

from dataclasses import dataclass, field

from .models.llama import LlamaConfig

METHODS = ("baseline", "eagle3", "peagle")
DRAFTER_METHODS = ("eagle3", "peagle")
MAX_K = 16
BACKENDS = ("auto", "torch", "triton")
COMPILE_MODES = ("auto", "on", "off")  # torch.compile: "auto" = on CUDA
DECODE_ATTENTION = ("auto", "triton", "sdpa")  # SpecConfig.decode_attention: "auto" = the kernel for T > 1 on CUDA
# SmolLM2's `<empty_output>` (id 16): a special token that never occurs in chat text, so
# giving it a learned embedding for the mask slots cannot disturb real context tokens.
DEFAULT_MASK_TOKEN_ID = 16
# The embedded target's shape (LlamaConfig's defaults are SmolLM2-135M-Instruct's): DrafterConfig's defaults.
_TARGET = LlamaConfig()


def check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, allowed))}")


def check_int(name: str, value, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} must be an integer in [{lo}, {hi if hi is not None else '∞'}]")
    if value < lo or (hi is not None and value > hi):
        raise ValueError(f"{name}={value} is out of range; expected [{lo}, {hi if hi is not None else '∞'}]")


@dataclass(frozen=True)
class SpecConfig:
    """How the engine decodes: which method, how many draft tokens, how it samples."""

    method: str = "peagle"  # "baseline" (plain decoding), "eagle3" (K drafter passes) or "peagle" (one pass)
    num_speculative_tokens: int = 5  # K, draft tokens per step (1..16); ignored by "baseline"
    temperature: float = 0.0  # 0 = greedy (lossless token for token); > 0 = rejection sampling
    max_new_tokens: int = 64  # per request, EOS stops earlier
    seed: int = 0  # the sampling generator's seed (temperature > 0)
    kernel_backend: str = "auto"  # draft-input kernels: Triton on CUDA, PyTorch on CPU
    cuda_graphs: bool = True  # capture target and drafter forwards per shape on CUDA
    # the target's prefill at widths padded to a multiple of 64, replayed as one CUDA graph per
    # shape: "auto" where CUDA graphs run (on CUDA with cuda_graphs), True also pads elsewhere
    # (lossless; for tests), False launches every prefill without a graph at the prompts' own width
    prefill_graphs: bool | str = "auto"
    # the first draft after a padded prefill at the prompts' padded width, one CUDA graph per shape
    # like the prefill (only where the prefill was padded; on the H200 it cut a c = 1 request's
    # prefill from ~6 to ~3.7 ms, +3-4 % tokens/s); False drafts it eagerly at the prompts' own width
    first_draft_graphs: bool = True
    # torch.compile the decode-step forwards (target and drafter) and the target's prefill layers:
    # "auto" (on CUDA), "on" or "off"
    compile: str = "auto"
    # with compile, also compile the work before the first decoder layer and after the last of each
    # forward (mask, KV slots, rope, embeddings; final norm, lm_head): a few kernels instead of ~25
    # (engine.CompiledForward); False compiles the layers only
    compile_edges: bool = True
    # attention of the decode steps (T <= 17 queries a request) over the KV caches: "triton" (the
    # split-KV kernel of peagle_lab.kernels.decode_attention for every decode shape; on a CPU in
    # Triton's interpreter, for tests), "sdpa" (PyTorch's scaled_dot_product_attention) or "auto"
    # (on CUDA the kernel for T > 1, and for T = 1 while c × K/V heads is at most the GPU's SM count on
    # cache blocks of at most kernels.decode_attention.T1_KERNEL_MAX_KEYS keys; SDPA for the other T = 1
    # calls, and everywhere on a CPU: kernels.decode_attention.multi_query_attention)
    decode_attention: str = "auto"
    # continuous batching (generate(..., concurrency=c)) admits new requests once about c / refill_divisor
    # rows are free, all of them in one padded prefill: a larger divisor leaves fewer rows idle but
    # prefills more often (each admission is one prefill and first-draft call)
    refill_divisor: int = 4
    # a static batch shrinks as its requests finish, as a vLLM batch does: once the requests still
    # decoding fit in half the rows, they (and as many finished rows as pad them to a power of two)
    # move to the front of the KV caches and the steps run at that width; False keeps every row to the end
    # (plain decoding, which queues each step before it reads the last, keeps its rows either way)
    compact_rows: bool = True
    # plain continuous decoding (method="baseline", generate(..., concurrency=c) with more prompts than c)
    # on the device: StreamDecoder's loop (engine.plain), whose host reads the rows every sync_every
    # steps, not every step. Greedy tokens are the same; its result has no step trace, num_steps counts
    # steps in whole reads (multiples of sync_every), sampling uses hashed Gumbel noise
    # (engine.sampling) instead of the seeded generator. False: the host-read loop, one trace entry a step
    device_loop: bool = False
    sync_every: int = 4  # with device_loop: decode steps between two host reads (1..4096)

    def __post_init__(self) -> None:
        check_choice("method", self.method, METHODS)
        check_int("num_speculative_tokens", self.num_speculative_tokens, 1, MAX_K)
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not 0.0 <= self.temperature <= 100.0:
            raise ValueError(f"temperature={self.temperature!r} must be a number in [0, 100]")
        check_int("max_new_tokens", self.max_new_tokens, 1, 1 << 20)
        check_int("seed", self.seed, 0)
        check_choice("kernel_backend", self.kernel_backend, BACKENDS)
        for name in ("cuda_graphs", "first_draft_graphs", "compact_rows", "compile_edges", "device_loop"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        if not isinstance(self.prefill_graphs, bool) and self.prefill_graphs != "auto":
            raise ValueError(f"prefill_graphs={self.prefill_graphs!r} must be True, False or 'auto'")
        check_choice("compile", self.compile, COMPILE_MODES)
        check_choice("decode_attention", self.decode_attention, DECODE_ATTENTION)
        check_int("refill_divisor", self.refill_divisor, 1, 4096)
        check_int("sync_every", self.sync_every, 1, 4096)

    @property
    def parallel_drafting(self) -> bool:
        """vLLM's flag, true for P-EAGLE, which drafts all K tokens in one pass."""
        return self.method == "peagle"

    @property
    def k(self) -> int:
        """Draft tokens per step, 0 for plain decoding."""
        return 0 if self.method == "baseline" else self.num_speculative_tokens


@dataclass(frozen=True)
class DrafterConfig:
    """An EAGLE-3 / P-EAGLE drafter; the head sizes are the target's (vLLM requires it)."""

    method: str = "peagle"  # "eagle3" or "peagle"
    num_hidden_layers: int = 1  # drafter decoder layers; the first one takes [embed ⊕ hidden]
    # The attention and MLP shapes, norm and rope: the target's (defaults: SmolLM2-135M's, from LlamaConfig).
    hidden_size: int = _TARGET.hidden_size  # H, the target's hidden size
    num_attention_heads: int = _TARGET.num_attention_heads
    num_key_value_heads: int = _TARGET.num_key_value_heads
    head_dim: int = _TARGET.head_dim
    intermediate_size: int = _TARGET.intermediate_size
    rms_norm_eps: float = _TARGET.rms_norm_eps
    rope_theta: float = _TARGET.rope_theta
    rope_scaling: dict | None = _TARGET.rope_scaling
    max_position_embeddings: int = _TARGET.max_position_embeddings
    vocab_size: int = _TARGET.vocab_size  # the target's vocabulary
    draft_vocab_size: int = _TARGET.vocab_size  # lm_head rows; d2t maps them to target ids
    aux_layer_ids: tuple[int, ...] = _TARGET.taps  # target taps (hidden_states[k]); fc input is len * H
    norm_before_residual: bool = False  # EAGLE-3 first layer: residual taken before hidden_norm
    mask_token_id: int | None = None  # P-EAGLE: the id whose slots get the learned mask embedding
    # Drafting attends to the last sliding_window positions only (None: all). Heads trained on short
    # sequences lose their deep drafts over long prompts; a window keeps attention in the trained range.
    sliding_window: int | None = None
    target_model_type: str = _TARGET.model_type
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_choice("method", self.method, DRAFTER_METHODS)
        check_int("num_hidden_layers", self.num_hidden_layers, 1, 16)
        for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                     "max_position_embeddings", "vocab_size"):
            check_int(name, getattr(self, name), 1)
        check_int("draft_vocab_size", self.draft_vocab_size, 1, self.vocab_size)
        if not self.aux_layer_ids:
            raise ValueError("aux_layer_ids must name at least one target layer")
        for layer in self.aux_layer_ids:
            check_int("aux_layer_ids entry", layer, 0)
        if self.sliding_window is not None:
            check_int("sliding_window", self.sliding_window, 1)
        if self.method == "peagle":
            if self.mask_token_id is None:
                raise ValueError("a peagle drafter needs mask_token_id (an id in [0, vocab_size))")
            check_int("mask_token_id", self.mask_token_id, 0, self.vocab_size - 1)

    @property
    def num_taps(self) -> int:
        return len(self.aux_layer_ids)

    @classmethod
    def for_target(cls, target_cfg, method: str = "peagle", num_hidden_layers: int = 1,
                   draft_vocab_size: int | None = None, mask_token_id: int | None = None,
                   **kw) -> "DrafterConfig":
        """A drafter shaped for ``target_cfg`` (a ``LlamaConfig``)."""
        if method == "peagle" and mask_token_id is None:
            mask_token_id = min(DEFAULT_MASK_TOKEN_ID, target_cfg.vocab_size - 1)
        return cls(
            method=method, num_hidden_layers=num_hidden_layers, hidden_size=target_cfg.hidden_size,
            num_attention_heads=target_cfg.num_attention_heads,
            num_key_value_heads=target_cfg.num_key_value_heads, head_dim=target_cfg.head_dim,
            intermediate_size=target_cfg.intermediate_size, rms_norm_eps=target_cfg.rms_norm_eps,
            rope_theta=target_cfg.rope_theta, rope_scaling=target_cfg.rope_scaling,
            max_position_embeddings=target_cfg.max_position_embeddings,
            vocab_size=target_cfg.vocab_size,
            draft_vocab_size=draft_vocab_size or target_cfg.vocab_size,
            aux_layer_ids=tuple(target_cfg.taps), mask_token_id=mask_token_id if method == "peagle" else None,
            target_model_type=target_cfg.model_type, **kw,
        )

    def llama_config(self):
        """The ``LlamaConfig`` the drafter's blocks use (same head sizes as the target)."""
        from .models.llama import LlamaConfig

        return LlamaConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps, rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling, max_position_embeddings=self.max_position_embeddings,
            aux_layer_ids=(0,),
        )


# The drafting attention window a freshly trained head declares (peagle-lab train --sliding-window): our
# heads train on chat-length rows, and 512 positions measured best over long prompts (docs/concepts.md).
DEFAULT_SLIDING_WINDOW = 512


def parse_window(value: str | None, flag: str) -> int | None | bool:
    """A drafting-window flag's value: an int, None for "none" (full attention), False when not given.

    >>> parse_window("512", "--w"), parse_window("none", "--w"), parse_window(None, "--w")
    (512, None, False)
    """
    if value is None:
        return False
    if value.lower() == "none":
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{flag} {value!r} must be a positive int or 'none'")
    return int(value)


def parse_case(text: str) -> tuple[str, int]:
    """A ``METHOD:K`` drafting case (the scripts' ``--cases``): (method, K), or a ValueError naming ``text``.

    >>> parse_case("peagle:8")
    ('peagle', 8)
    """
    method, _, k = text.partition(":")
    if method not in DRAFTER_METHODS or not k.isdigit() or not 1 <= int(k) <= MAX_K:
        raise ValueError(f"case {text!r}: expected METHOD:K with METHOD {' or '.join(DRAFTER_METHODS)} "
                         f"and 1 <= K <= {MAX_K}")
    return method, int(k)
