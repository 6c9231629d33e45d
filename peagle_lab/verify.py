"""Verification of draft tokens: greedy matching and lossless rejection sampling.

One verify step looks at the target's output for every slot of a request, ``[c, K+1, V]``
(K draft slots plus one slot after the last draft), and decides how many of the K drafts
survive. Both verifiers return a :class:`VerifyResult` whose ``output_tokens`` row reads::

    K = 4, 2 drafts accepted:    [ d0, d1, rec, -1, -1 ]   rec = recovered token
    K = 4, all accepted:         [ d0, d1, d2, d3, bon ]   bon = bonus token

Both are lossless. Greedy: the output is exactly what plain greedy decoding of the target
produces. Rejection sampling (Leviathan et al. 2023): the output tokens are distributed
exactly as samples from ``target_probs``, whatever the draft distribution was.

Randomness enters only through explicit tensors (``uniform`` for accept tests, ``noise``
for sampling), so a step can be replayed and a fused kernel can be compared with this
reference bit for bit. Nothing here syncs with the device: no ``.item()``, no masks that
make data-dependent shapes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "VerifyResult",
    "verify_greedy",
    "verify_rejection",
    "sample_verify_noise",
    "target_probs_from_logits",
]


# eq=False: the generated __eq__ would compare tensors and raise on their truth value.
@dataclass(frozen=True, eq=False)
class VerifyResult:
    """What one verify step decided for each of c requests with K drafts each.

    Attributes:
        num_accepted: ``# [c]`` int64, accepted draft tokens per request, in 0..K.
        output_tokens: ``# [c, K+1]`` int64, the accepted drafts, then ``next_tokens``,
            then -1 padding.
        next_tokens: ``# [c]`` int64, the token appended after the accepted drafts: the
            recovered token when a draft was rejected, the bonus token when all K passed.
        is_bonus: ``# [c]`` bool, True when all K drafts were accepted.
        accepted_per_position: ``# [K]`` int64, how many requests had their draft at
            position i accepted (vLLM's unconditional per-position counts; divide by
            ``num_drafts`` for the per-position acceptance rate).
    """

    num_accepted: torch.Tensor
    output_tokens: torch.Tensor
    next_tokens: torch.Tensor
    is_bonus: torch.Tensor
    accepted_per_position: torch.Tensor

    @property
    def num_drafts(self) -> int:
        """Number of requests verified in this step, c."""
        return self.output_tokens.shape[0]

    @property
    def num_draft_tokens(self) -> int:
        """Number of draft tokens verified in this step, c * K."""
        return self.output_tokens.shape[0] * (self.output_tokens.shape[1] - 1)

    @property
    def num_accepted_tokens(self) -> int:
        """Number of accepted draft tokens over all requests (syncs with the device)."""
        return int(self.num_accepted.sum())


def _check_batch_shapes(
    name: str, main: torch.Tensor, draft_tokens: torch.Tensor,
) -> tuple[int, int, int]:
    """Check ``main`` is ``[c, K+1, V]`` and ``draft_tokens`` is ``[c, K]``; return c, K, V."""
    if main.dim() != 3:
        raise ValueError(
            f"{name} has shape {tuple(main.shape)}: expected 3 dims [c, K+1, V]")
    if not main.is_floating_point():
        raise ValueError(f"{name} has dtype {main.dtype}: expected a floating dtype")
    c, k1, v = main.shape
    if c < 1 or k1 < 2 or v < 1:
        raise ValueError(
            f"{name} has shape {tuple(main.shape)}: expected c >= 1, K+1 >= 2 "
            f"(at least one draft) and V >= 1")
    k = k1 - 1
    if tuple(draft_tokens.shape) != (c, k):
        raise ValueError(
            f"draft_tokens has shape {tuple(draft_tokens.shape)} but {name} implies "
            f"c={c}, K={k}: expected {(c, k)}")
    if draft_tokens.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"draft_tokens has dtype {draft_tokens.dtype}: expected torch.int64 (or int32)")
    _check_same_device("draft_tokens", draft_tokens, name, main)
    return c, k, v


def _check_same_device(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.device != ref.device:
        raise ValueError(f"{name} is on {t.device} but {ref_name} is on {ref.device}: expected one device")


def check_greedy_inputs(
    target_logits: torch.Tensor, draft_tokens: torch.Tensor,
) -> tuple[int, int, int]:
    """Validate the inputs of :func:`verify_greedy`; return ``(c, K, V)``."""
    return _check_batch_shapes("target_logits", target_logits, draft_tokens)


def check_rejection_inputs(
    target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
    uniform: torch.Tensor, noise: torch.Tensor,
) -> tuple[int, int, int]:
    """Validate the inputs of :func:`verify_rejection`; return ``(c, K, V)``."""
    c, k, v = _check_batch_shapes("target_probs", target_probs, draft_tokens)
    for name, t, shape in (("draft_probs", draft_probs, (c, k, v)),
                           ("uniform", uniform, (c, k)),
                           ("noise", noise, (c, v))):
        if tuple(t.shape) != shape:
            raise ValueError(
                f"{name} has shape {tuple(t.shape)} but target_probs implies c={c}, "
                f"K={k}, V={v}: expected {shape}")
        if not t.is_floating_point():
            raise ValueError(f"{name} has dtype {t.dtype}: expected a floating dtype")
        _check_same_device(name, t, "target_probs", target_probs)
    return c, k, v


def _assemble(
    draft_tokens: torch.Tensor, accepted: torch.Tensor, next_tokens: torch.Tensor,
) -> VerifyResult:
    """Build a VerifyResult from per-position accept decisions and the next token.

    Args:
        draft_tokens: ``# [c, K]`` the drafts.
        accepted: ``# [c, K]`` bool, whether each draft passed its own test; only the
            leading run of True counts.
        next_tokens: ``# [c]`` int64, the recovered or bonus token.
    """
    c, k = draft_tokens.shape
    # cumprod zeroes everything after the first rejection: later drafts were conditioned
    # on a token that is not in the output, so their own test result is meaningless.
    survived = accepted.to(torch.int64).cumprod(dim=1)                  # [c, K]
    num_accepted = survived.sum(dim=1)                                  # [c]
    col = torch.arange(k + 1, device=draft_tokens.device)               # [K+1]
    n = num_accepted[:, None]                                           # [c, 1]
    drafts = torch.nn.functional.pad(draft_tokens.to(torch.int64), (0, 1), value=-1)
    output_tokens = torch.where(
        col < n, drafts, torch.where(col == n, next_tokens[:, None], -1))  # [c, K+1]
    return VerifyResult(
        num_accepted=num_accepted,
        output_tokens=output_tokens,
        next_tokens=next_tokens,
        is_bonus=num_accepted == k,
        accepted_per_position=survived.sum(dim=0),
    )


def verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> VerifyResult:
    """Accept the longest prefix of drafts that equals the target's argmax, plus one token.

    Draft i is accepted while ``draft_tokens[:, i] == argmax(target_logits[:, i])`` for
    it and every earlier draft; the next token is the argmax at the first mismatch (the
    recovered token) or at slot K (the bonus token). The output is therefore exactly the
    sequence that plain greedy decoding of the target would have produced. Ties in the
    argmax go to the lowest token id.

    Args:
        target_logits: ``# [c, K+1, V]`` target logits (or probabilities) for each slot,
            any floating dtype.
        draft_tokens: ``# [c, K]`` int64 draft token ids.

    Returns:
        A :class:`VerifyResult`.

    Raises:
        ValueError: if the shapes, dtypes or devices do not fit together.

    Example: the target would say 7, 3, 5; request 0 drafted 7, 3 (both accepted, bonus 5),
    request 1 drafted 7, 4 (mismatch at position 1, recovered token 3).

    >>> logits = torch.nn.functional.one_hot(torch.tensor([[7, 3, 5], [7, 3, 5]]), 8).float()
    >>> r = verify_greedy(logits, torch.tensor([[7, 3], [7, 4]]))
    >>> r.output_tokens
    tensor([[ 7,  3,  5],
            [ 7,  3, -1]])
    >>> r.num_accepted, r.is_bonus, r.accepted_per_position
    (tensor([2, 1]), tensor([ True, False]), tensor([2, 1]))
    """
    check_greedy_inputs(target_logits, draft_tokens)
    k = draft_tokens.shape[1]
    # torch.argmax returns the first maximal index: the tie rule the kernel copies.
    target_argmax = target_logits.argmax(dim=-1)                        # [c, K+1]
    accepted = draft_tokens == target_argmax[:, :k]                     # [c, K]
    num_accepted = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)   # [c]
    next_tokens = target_argmax.gather(1, num_accepted[:, None]).squeeze(1)  # [c]
    return _assemble(draft_tokens, accepted, next_tokens)


def verify_rejection(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    uniform: torch.Tensor,
    noise: torch.Tensor,
) -> VerifyResult:
    """Rejection-sample the drafts so that the output has exactly the target distribution.

    Draft i is accepted iff ``uniform[:, i] < target_probs[tok] / draft_probs[tok]`` (the
    same as ``< min(1, ratio)`` since ``uniform < 1``) and every earlier draft was accepted.
    At the first rejected position i the recovered token is sampled from
    ``norm(max(0, target_probs[:, i] - draft_probs[:, i]))``, or from ``target_probs[:, i]``
    when that difference is zero everywhere; when all K pass, the bonus token is sampled
    from ``target_probs[:, K]``. Sampling uses the exponential race
    ``argmax(weights / noise)`` with ``noise ~ Exp(1)``: token j wins with probability
    ``weights[j] / sum(weights)``, and ties go to the lowest id. All arithmetic is float32.

    Args:
        target_probs: ``# [c, K+1, V]`` target probabilities (softmax with temperature).
        draft_probs: ``# [c, K, V]`` the distribution each draft was sampled from, over the
            target vocabulary.
        draft_tokens: ``# [c, K]`` int64 draft token ids, each in ``[0, V)``.
        uniform: ``# [c, K]`` uniform draws in ``[0, 1)`` for the accept tests.
        noise: ``# [c, V]`` positive Exp(1) draws, one vector per request (each request
            samples exactly one token per step).

    Returns:
        A :class:`VerifyResult`.

    Raises:
        ValueError: if the shapes, dtypes or devices do not fit together.

    Example: one request, K=1, V=3. The target puts 0.2 on the draft token 0 where the
    draft put 0.8: it is kept only when uniform < 0.25. Here it is rejected and the
    recovered token comes from max(0, target - draft) = [0, 0.5, 0.1], where the small
    noise on token 2 wins the race.

    >>> target = torch.tensor([[[0.2, 0.6, 0.2], [1.0, 0.0, 0.0]]])
    >>> draft = torch.tensor([[[0.8, 0.1, 0.1]]])
    >>> r = verify_rejection(target, draft, torch.tensor([[0]]), torch.tensor([[0.5]]),
    ...                      noise=torch.tensor([[1.0, 1.0, 0.01]]))
    >>> r.output_tokens, r.num_accepted
    (tensor([[ 2, -1]]), tensor([0]))
    """
    c, k, v = check_rejection_inputs(target_probs, draft_probs, draft_tokens, uniform, noise)
    tp = target_probs.float()
    dp = draft_probs.float()
    tok = draft_tokens.to(torch.int64)[:, :, None]                      # [c, K, 1]
    tp_tok = tp[:, :k].gather(2, tok).squeeze(2)                        # [c, K]
    dp_tok = dp.gather(2, tok).squeeze(2)                               # [c, K]
    # A ratio rather than uniform * dp < tp: the spec's form, and one IEEE division that
    # the kernel reproduces exactly (dp == 0 cannot come from sampling the draft).
    accepted = uniform.float() < tp_tok / dp_tok                        # [c, K]
    num_accepted = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)   # [c]

    is_bonus = (num_accepted == k)[:, None]                             # [c, 1]
    row = num_accepted[:, None, None].expand(c, 1, v)                   # [c, 1, V]
    tp_row = tp.gather(1, row).squeeze(1)                               # [c, V]
    # The bonus slot has no draft; subtracting zero leaves target_probs unchanged.
    dp_row = dp.gather(1, row.clamp(max=k - 1)).squeeze(1)              # [c, V]
    dp_row = torch.where(is_bonus, 0.0, dp_row)
    residual = (tp_row - dp_row).clamp_min(0.0)                         # [c, V]
    # An all-zero residual means draft >= target everywhere, i.e. equal distributions
    # (up to rounding): the target itself is then the right distribution to sample.
    has_mass = residual.amax(dim=1, keepdim=True) > 0                   # [c, 1]
    weights = torch.where(has_mass, residual, tp_row)                   # [c, V]
    next_tokens = (weights / noise.float()).argmax(dim=1)               # [c]
    return _assemble(draft_tokens, accepted, next_tokens)


def sample_verify_noise(
    c: int, K: int, V: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw the randomness of one rejection-sampling step.

    Args:
        c: number of requests, >= 1.
        K: draft tokens per request, >= 1.
        V: vocabulary size, >= 1.
        generator: source of randomness; ``None`` uses torch's global generator.
        device: where to draw; defaults to the generator's device, else CPU.

    Returns:
        ``(uniform, noise)``: ``# [c, K]`` float32 in ``[0, 1)`` and ``# [c, V]`` float32
        Exp(1) draws, strictly positive.

    Raises:
        ValueError: if c, K or V is below 1.

    >>> g = torch.Generator().manual_seed(0)
    >>> uniform, noise = sample_verify_noise(2, 3, 5, g)
    >>> uniform.shape, noise.shape, bool((noise > 0).all())
    (torch.Size([2, 3]), torch.Size([2, 5]), True)
    """
    for name, value in (("c", c), ("K", K), ("V", V)):
        if value < 1:
            raise ValueError(f"{name}={value}: expected an integer >= 1")
    if device is None:
        device = generator.device if generator is not None else "cpu"
    uniform = torch.rand(c, K, generator=generator, device=device)
    noise = torch.empty(c, V, device=device).exponential_(generator=generator)
    # An exact 0 would turn weights / noise into inf or nan; the clamp moves a
    # probability-zero event, so the sampled distribution is unchanged.
    noise = noise.clamp_min(torch.finfo(torch.float32).tiny)
    return uniform, noise


def target_probs_from_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Turn logits into the sampling distribution ``softmax(logits / temperature)``.

    Args:
        logits: ``# [..., V]`` any floating dtype.
        temperature: > 0; temperature 0 means greedy, which uses :func:`verify_greedy`.

    Returns:
        ``# [..., V]`` float32 probabilities.

    Raises:
        ValueError: if temperature is not a finite number > 0.

    >>> target_probs_from_logits(torch.tensor([0.0, 0.0, 2.0]), temperature=2.0)
    tensor([0.2119, 0.2119, 0.5761])
    """
    if not (temperature > 0 and temperature != float("inf")):
        raise ValueError(
            f"temperature={temperature}: expected a finite value > 0 "
            f"(for temperature 0 use verify_greedy)")
    return torch.softmax(logits.float() / temperature, dim=-1)
