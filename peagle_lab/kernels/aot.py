"""Every kernel the engine can launch, built ahead of time for GPUs this machine does not have.

Triton compiles for a named target without a GPU or a driver: ``triton.compile(ASTSource(...),
target=GPUTarget("cuda", 100, 32))`` gives PTX and a cubin for sm_100 on a laptop. This module
finds *what* to build by running the kernels' own wrappers over the inputs the engine can give
them, with a recording hook in place of Triton's launch:

```
 engine inputs (models × dtypes × K × c × lengths)          one GPU preset (SM count, shared memory)
        │                                                           │
        ▼                                                           ▼
 wrappers (decode_attention, fill_draft_hidden, …) on meta tensors, their device questions answered
        │  kernel[grid](...)  ──►  recorded, not run
        ▼
 Triton's own binder for that arch: signature, constexprs, int args equal to 1, warps, stages
        │  deduplicated: one Spec per distinct compile
        ▼
 triton.compile ──► cubin ──► cuobjdump --dump-resource-usage: registers, local (spill) bytes
```

So a launch choice added to a wrapper (a new block size, a new dtype) shows up here by itself:
nothing lists specialisations by hand. :mod:`peagle_lab.kernels.aot_table` turns the built specs
into the resource table, its checks and its markdown.

Integer arguments are built without divisibility hints (Triton adds them where a launch's value
is a multiple of 16); pointers carry the 16-byte alignment every torch allocation has. No kernel
here is autotuned, so every launch choice is the wrapper's.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import pkgutil
from dataclasses import dataclass

import torch

from ..config import MAX_K
from ..hardware import ARCHS, DEVICES

__all__ = ["ENGINE_MODELS", "ModelShape", "Spec", "device_answers", "entry_points", "kernel_modules", "record",
           "sweep_engine", "sweep_modules"]


@dataclass(frozen=True)
class ModelShape:
    """The attention and vocabulary shape of a target the engine decodes (its drafter shares it)."""

    name: str
    heads: int        # query heads
    kv_heads: int     # K/V heads
    head_dim: int
    hidden: int       # H, the drafter's width
    vocab: int        # V, the verifier's logits row


# SmolLM2 is the lab's model; the 8B shape stands for the paper-scale targets the engine loads
# (Llama-3.1-8B's config: 32 query heads, 8 K/V heads, head dim 128, vocabulary 128,256).
ENGINE_MODELS = (
    ModelShape("SmolLM2-135M", 9, 3, 64, 576, 49152),
    ModelShape("Llama-3.1-8B", 32, 8, 128, 4096, 128256),
)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # SpecDecoder's model dtypes
CONCURRENCY = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 256)
# Cache blocks are whole multiples of 64 positions (the engine's KV_BLOCK_ALIGN): one key block (one
# split), and enough key blocks for every split count.
CACHE_LENGTHS = (64, 8192)
PROMPT_WIDTHS = tuple(range(1, 41)) + tuple(w for j in range(6, 14) for w in (2 ** j, 2 ** j + 1))


@dataclass(frozen=True)
class Spec:
    """One distinct compile of one kernel for one arch: what Triton's cache key would tell apart."""

    kernel: str                          # the @triton.jit function's name
    arch: str                            # "sm_100"
    signature: tuple[tuple[str, str], ...]   # (arg, Triton type or "constexpr")
    constexprs: tuple[tuple[str, object], ...]  # (arg, value) incl. int args specialised to 1
    attrs: tuple[tuple[int, tuple], ...]  # (arg index, ((attr, value), ...)) for pointers
    num_warps: int
    num_stages: int

    @property
    def label(self) -> str:
        """A short readable name, made of the element types, then the constexprs and warps/stages.

        >>> Spec("k", "sm_90", (("x", "*bf16"), ("n", "i32"), ("B", "constexpr")), (("B", 64),), (), 4, 3).label
        'bf16 B=64 w4 s3'
        """
        types = sorted({t[1:] for _, t in self.signature if t.startswith("*") and t[1:][0] in "fb"})
        values = " ".join(f"{k}={v}" for k, v in self.constexprs)
        return " ".join([*types, values, f"w{self.num_warps} s{self.num_stages}"]).replace("  ", " ")


def kernel_modules() -> list:
    """The modules of :mod:`peagle_lab.kernels` that define kernels (not the resolver, not this)."""
    from .. import kernels

    names = [m.name for m in pkgutil.iter_modules(kernels.__path__)
             if m.name not in ("backend",) and not m.name.startswith("aot")]
    return [importlib.import_module(f"{kernels.__name__}.{n}") for n in sorted(names)]


def entry_points(modules=None) -> dict[str, object]:
    """``{name: kernel}`` of every kernel launched by a wrapper: the @triton.jit functions of ``modules``
    (modules or their names; default :func:`kernel_modules`) that no other of the module calls. Compiled
    or interpreted alike (JITFunction or, under TRITON_INTERPRET=1, InterpretedFunction)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    found = {}
    for mod in modules or kernel_modules():
        mod = importlib.import_module(mod) if isinstance(mod, str) else mod
        jitted = {n: f for n, f in vars(mod).items() if isinstance(f, (JITFunction, InterpretedFunction))}
        source = {n: inspect.getsource(f.fn) for n, f in jitted.items()}
        called = {n for n in jitted for other in jitted if other != n and f"{n}(" in source[other]}
        found.update({n: f for n, f in jitted.items() if n not in called})
    return found


@functools.cache
def _binder(fn, arch: str):
    """Triton's own argument binder and backend for ``fn`` on ``arch`` (no driver needed)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", int(arch[3:]), 32))
    return backend, create_function_from_signature(fn.signature, fn.params, backend)


def spec_of(fn, arch: str, args: tuple, kwargs: dict) -> Spec:
    """The :class:`Spec` a launch ``fn[grid](*args, **kwargs)`` compiles on ``arch``, as Triton derives it."""
    backend, binder = _binder(fn, arch)
    kwargs = dict(kwargs, debug=False)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    names = list(signature)
    pointer = {i for i, n in enumerate(names) if signature[n].startswith("*")}
    return Spec(
        kernel=fn.__name__, arch=arch, signature=tuple(signature.items()),
        constexprs=tuple((names[p[0]], constexprs[p]) for p in sorted(constexprs)),
        attrs=tuple((p[0], tuple(map(tuple, v))) for p, v in sorted(attrs.items()) if p[0] in pointer and v),
        num_warps=options.num_warps, num_stages=options.num_stages)


@contextlib.contextmanager
def device_answers(sms: int, max_smem_per_block: int):
    """Kernel wrappers run on meta tensors as if on a GPU with ``sms`` SMs and that much shared memory:
    the backend choice says Triton, the compiled (pipelined) key loop is taken, and the device
    questions get the preset's answers."""
    from . import decode_attention as da

    mods = kernel_modules()
    saved = [(m, "resolve", m.resolve) for m in mods if hasattr(m, "resolve")]
    saved += [(da, n, getattr(da, n)) for n in ("interpreted", "_shared_memory", "_programs_wanted")]
    cached = [f for m in mods for f in vars(m).values() if hasattr(f, "cache_clear")]
    for m, name, _ in saved:
        if name == "resolve":
            setattr(m, name, lambda backend, device: "triton")
    da.interpreted = lambda: False
    da._shared_memory = lambda device: max_smem_per_block
    da._programs_wanted = lambda device: sms
    for f in cached:
        f.cache_clear()
    try:
        yield
    finally:
        for m, name, value in saved:
            setattr(m, name, value)
        for f in cached:
            f.cache_clear()


@contextlib.contextmanager
def record(arch: str, specs: set):
    """Every ``kernel[grid](...)`` inside adds its :class:`Spec` for ``arch`` to ``specs`` instead of running."""
    from triton.runtime.jit import JITFunction

    original = JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        specs.add(spec_of(self, arch, args, kwargs))

    JITFunction.run = run
    try:
        yield
    finally:
        JITFunction.run = original


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _sweep_attention(model: ModelShape, dtype: torch.dtype) -> None:
    """``SpecConfig.decode_attention="triton"`` sends every decode shape to the op; the op runs the
    kernels wherever they take the shape (else SDPA, which raises here and is skipped). The model
    passes ``kv_len`` as int32 (``models.llama``'s attention context)."""
    from .decode_attention import MAX_ROWS, decode_attention

    rep = model.heads // model.kv_heads
    for T in range(1, MAX_ROWS // rep + 1):
        for c in CONCURRENCY:
            for S in CACHE_LENGTHS:
                q = _meta(c, model.heads, T, model.head_dim, dtype=dtype)
                kv = _meta(c, model.kv_heads, S, model.head_dim, dtype=dtype)
                mask = _meta(c, 1, T, S, dtype=torch.bool)
                with contextlib.suppress(ValueError):  # shapes the op leaves to SDPA
                    decode_attention(q, kv, kv, mask, _meta(c, dtype=torch.int32), backend="triton")


def _sweep_draft_inputs(model: ModelShape, dtype: torch.dtype) -> None:
    """prepare_draft_inputs after a verify step (T = K + 1) or a prefill (T = the padded prompt), with
    fill_draft_hidden over its rows."""
    from .fill_draft_hidden import fill_draft_hidden
    from .prepare_draft_inputs import prepare_draft_inputs

    long = torch.int64
    for K in range(1, MAX_K + 1):
        for T in sorted({K + 1, *PROMPT_WIDTHS}):
            for c in (1, 3):
                ids = _meta(c, T, dtype=long)
                prepare_draft_inputs(ids, ids, _meta(c, dtype=long), _meta(c, dtype=long),
                                     num_speculative_tokens=K, mask_token_id=0, max_len=8192, backend="triton")
    for rows in (1, 2, 7, 64, 4096):
        fill_draft_hidden(_meta(rows, model.hidden, dtype=dtype), _meta(rows, dtype=long),
                          _meta(rows, dtype=torch.bool), _meta(model.hidden, dtype=dtype), backend="triton")


def _sweep_verify(model: ModelShape, dtype: torch.dtype, sms: int) -> None:
    """Greedy verification of ``[c, K+1, V]`` logits in the model's dtype; rejection sampling on
    float32 probabilities (``step.verify`` converts them)."""
    from .verify import verify_greedy, verify_rejection

    long, V = torch.int64, model.vocab
    for K in range(1, MAX_K + 1):
        for c in sorted({*range(1, sms // (K + 1) + 2), 256}):
            verify_greedy(_meta(c, K + 1, V, dtype=dtype), _meta(c, K, dtype=long), backend="triton")
        for c in (1, 3):
            verify_rejection(_meta(c, K + 1, V), _meta(c, K, V), _meta(c, K, dtype=long), _meta(c, K), _meta(c, V),
                             backend="triton")


def _compiled_triton() -> None:
    from .backend import interpreted, triton

    if triton is None:
        raise RuntimeError("the ahead-of-time build needs the triton package (Linux wheels)")
    if interpreted():
        raise RuntimeError("Triton was imported in interpreter mode (TRITON_INTERPRET=1), which cannot build "
                           "for a GPU; run `python -m peagle_lab.kernels.aot_table`, which sets TRITON_INTERPRET=0")


def sweep_engine(arch: str, models=ENGINE_MODELS, dtypes=DTYPES, sms: int | None = None) -> set[Spec]:
    """Every :class:`Spec` the engine can launch on ``arch``, over each GPU preset of that arch (and a GPU
    with ``sms`` SMs: the SM count sets the splits, row tiles and argmax chunks)."""
    _compiled_triton()
    specs: set[Spec] = set()
    limits = ARCHS[arch]
    for sms in sorted({d.sms for d in DEVICES.values() if d.arch == arch} | ({sms} if sms else set())):
        with device_answers(sms, limits.max_smem_per_block), record(arch, specs):
            for model in models:
                for dtype in dtypes:
                    _sweep_attention(model, dtype)
                    _sweep_draft_inputs(model, dtype)
                    _sweep_verify(model, dtype, sms)
    return specs


def sweep_modules(arch: str, names) -> set[Spec]:
    """The specs that the ``sweep()`` function of each module in ``names`` launches (test fixtures)."""
    _compiled_triton()
    specs: set[Spec] = set()
    with record(arch, specs):
        for name in names:
            importlib.import_module(name).sweep()
    return specs
