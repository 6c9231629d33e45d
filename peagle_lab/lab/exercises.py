"""Worked solutions to the workshop exercises of the notebooks (checked by tests).

Try each exercise in its notebook first: the check cell under it (:mod:`peagle_lab.lab.checks`)
compares your answer with the solution here, and ``tests/test_exercises.py`` checks every
solution against the library.

| notebook | exercise                                                | solution                                  |
| -------- | ------------------------------------------------------- | ----------------------------------------- |
| 1        | verify one request's drafts by hand                     | ``verify_by_hand``                        |
| 1        | count each method's drafter passes and slot-layers      | ``drafter_work``                          |
| 2        | lay out one request's slots by hand                     | ``draft_row_by_hand``                     |
| 2        | count the padding slots of a batch                      | ``num_padding_slots``                     |
| 4        | fill the hidden states with a single gather             | ``fill_draft_hidden_by_gather``           |
| 4        | bytes the fused kernels must move; achieved bandwidth   | ``draft_batch_bytes``                     |
| 3        | the chain mask from inference; what a causal mask leaks | ``chain_sees``, ``leaked_input_token``    |
| 3        | how many elements COD keeps                             | ``cod_kept_elements``                     |
| 5        | P-EAGLE's speed-up if both heads accepted equally       | ``speedup_at_equal_acceptance``           |
| 6        | which head's agreement falls first with depth, and why  | ``weakest_depth``                         |
"""
from __future__ import annotations

import math

import torch

from ..verify import verify_greedy

__all__ = ["expected_acceptance_length", "simulate_acceptance_length", "verify_by_hand", "drafter_work",
           "draft_row_by_hand", "num_padding_slots", "fill_draft_hidden_by_gather", "draft_batch_bytes",
           "chain_sees", "leaked_input_token", "cod_kept_elements", "speedup_at_equal_acceptance", "speedup_conventions", "DEPTH_REASONS",
           "shipped_depth_agreement", "weakest_depth", "train_tiny_heads"]


# ---------------------------------------------------------------- notebook 1
def expected_acceptance_length(alpha: float, k: int) -> float:
    """AL when each draft is accepted with probability ``alpha``, independently of the others.

    Draft i survives only if drafts 0..i all match, with probability alpha^(i+1), so
    AL = 1 + sum_{i=1..K} alpha^i = (1 - alpha^(K+1)) / (1 - alpha). It saturates at
    1 / (1 - alpha): beyond some K, extra drafts buy almost nothing.

    >>> round(expected_acceptance_length(0.8, 9), 3)
    4.463
    >>> expected_acceptance_length(1.0, 4)
    5.0
    """
    if not 0.0 <= alpha <= 1.0 or k < 0:
        raise ValueError(f"alpha={alpha} must lie in [0, 1] and k={k} must be >= 0")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def simulate_acceptance_length(alpha: float, k: int, *, steps: int = 4000, vocab_size: int = 32,
                               seed: int = 0) -> float:
    """Measure AL with the real greedy verifier on synthetic steps.

    Each of ``steps`` requests gets random target choices; its drafts copy them with
    probability ``alpha`` per position (else a different token), and ``verify_greedy`` on
    one-hot target logits decides what is accepted.
    """
    g = torch.Generator().manual_seed(seed)
    target_tokens = torch.randint(0, vocab_size, (steps, k + 1), generator=g)  # [steps, K+1]
    logits = torch.nn.functional.one_hot(target_tokens, vocab_size).float()  # [steps, K+1, V]
    hit = torch.rand(steps, k, generator=g) < alpha  # [steps, K]
    wrong = (target_tokens[:, :k] + torch.randint(1, vocab_size, (steps, k), generator=g)) % vocab_size
    drafts = torch.where(hit, target_tokens[:, :k], wrong)
    result = verify_greedy(logits, drafts)
    return 1.0 + result.num_accepted.float().mean().item()


def verify_by_hand(drafts: list[int], target_choices: list[int]) -> list[int]:
    """The tokens one request gains from a greedy verify step, written as a plain loop.

    ``target_choices[i]`` is the target's greedy token at verify slot i of ``[new token,
    d1 … dK]``: its choice *after* that slot, so ``target_choices[i]`` checks draft i + 1.
    Drafts count while they equal those choices; the first mismatch ends the step with the
    target's own choice there (the recovered token), and if all K pass, ``target_choices[K]``
    is the bonus token. Every step gains accepted + 1 tokens, all of them the target's.

    >>> verify_by_hand([5, 9, 7], [5, 6, 7, 8])  # draft 2 rejected: draft 3 never counts
    [5, 6]
    >>> verify_by_hand([5, 6, 7], [5, 6, 7, 8])  # all accepted, plus the bonus token
    [5, 6, 7, 8]
    """
    if len(target_choices) != len(drafts) + 1:
        raise ValueError(f"target_choices has {len(target_choices)} tokens, expected K + 1 = {len(drafts) + 1}")
    gained = []
    for draft, choice in zip(drafts, target_choices):
        if draft != choice:
            return gained + [choice]  # recovered: the target's token replaces the first rejected draft
        gained.append(draft)
    return gained + [target_choices[len(drafts)]]  # bonus: the target's choice after the last draft


def drafter_work(method: str, *, k: int, layers: int) -> tuple[int, int]:
    """Drafter passes and slot-layers (slots x layers run) for one request in one decode step with K drafts.

    The verified row has T = K + 1 slots. P-EAGLE runs one pass over R = T + K - 1 = 2K
    slots (context, bonus, K - 1 mask slots, padding) through all its layers. EAGLE-3's first
    pass is the same layout without mask slots (T = K + 1 slots), and each of its K - 1 later
    passes carries one token: 2K slots in all, over K passes. Where a pass is launch- or
    latency-bound (a GPU at small c), the cost follows the passes; where it is compute-bound
    (a CPU), it follows the slot-layers.

    >>> drafter_work("eagle3", k=5, layers=1), drafter_work("peagle", k=5, layers=4)
    ((5, 10), (1, 40))
    """
    if method not in ("eagle3", "peagle") or k < 1 or layers < 1:
        raise ValueError(f"method={method!r} must be 'eagle3' or 'peagle', k={k} and layers={layers} must be >= 1")
    if method == "peagle":
        return 1, 2 * k * layers
    return k, ((k + 1) + (k - 1)) * layers


# ---------------------------------------------------------------- notebook 2
def draft_row_by_hand(token_ids: list[int], positions: list[int], num_accepted: int, bonus_token: int, *,
                      k: int, mask_token_id: int, request: int = 0, max_len: int = 1 << 30) -> dict[str, list]:
    """One request's R = T + K - 1 drafter slots, written as a plain loop over slots.

    Returns the request's slice of each ``DraftInputs`` field (hidden_mapping and
    slot_mapping use the flat indices of request ``request``; sample_indices are local).

    >>> r = draft_row_by_hand([10, 11, 12, 13], [5, 6, 7, 8], 2, 100, k=3, mask_token_id=99)
    >>> r["input_ids"], r["positions"]
    ([11, 12, 100, 99, 99, 0], [5, 6, 7, 8, 9, 0])
    """
    T, n = len(token_ids), num_accepted
    R = T + k - 1
    out = {f: [] for f in ("input_ids", "positions", "slot_mapping", "is_masked", "hidden_mapping")}
    for i in range(R):
        if i < n:  # context: the next token, with the hidden state of this position (EAGLE's shift)
            tok, pos, src, masked = token_ids[i + 1], positions[i], request * T + i, False
        elif i == n:  # the new (bonus) token, with the hidden state of the last kept position
            tok, pos, src, masked = bonus_token, positions[n], request * T + i, False
        elif i < n + k:  # mask slots: positions keep counting after the bonus slot
            tok, pos, src, masked = mask_token_id, positions[n] + (i - n), -1, True
        else:  # padding: the rejected tokens' slots, moved to the end, write nothing
            tok, pos, src, masked = 0, 0, -1, False
        live = i < n + k and pos < max_len
        out["input_ids"].append(tok)
        out["positions"].append(pos)
        out["slot_mapping"].append(request * max_len + pos if live else -1)
        out["is_masked"].append(masked)
        out["hidden_mapping"].append(src)
    out["sample_indices"] = [n + j for j in range(k)]
    return out


def num_padding_slots(accepted: list[int], k: int) -> int:
    """Padding slots of a decode-step drafter batch (T = K + 1): K - n per request.

    Each request has R = T + K - 1 = 2K slots; n + 1 context/bonus and K - 1 mask slots are
    live, so 2K - (n + K) = K - n are padding: exactly the rejected drafts.

    >>> num_padding_slots([2, 3], k=3)
    1
    """
    return sum(k - n for n in accepted)


# ---------------------------------------------------------------- notebook 4
def fill_draft_hidden_by_gather(hidden: torch.Tensor, hidden_mapping: torch.Tensor, is_masked: torch.Tensor,
                                shared_hidden: torch.Tensor) -> torch.Tensor:
    """``fill_draft_hidden`` as one gather from ``[hidden; shared_hidden; zeros]``.

    Append two rows to the source table, point mask slots at the first and padding at the
    second, and every output row is a plain index: no ``where`` over ``[N, H]`` at all.

    >>> fill_draft_hidden_by_gather(torch.arange(6.0).view(3, 2), torch.tensor([0, 1, -1, -1]),
    ...                             torch.tensor([False, False, True, False]), torch.tensor([-1.0, -1.0]))
    tensor([[ 0.,  1.],
            [ 2.,  3.],
            [-1., -1.],
            [ 0.,  0.]])
    """
    rows = hidden.shape[0]
    table = torch.cat([hidden, shared_hidden[None], hidden.new_zeros(1, hidden.shape[1])])  # [c*T + 2, H]
    index = torch.where(hidden_mapping >= 0, hidden_mapping,
                        torch.where(is_masked, rows, rows + 1))  # [N]
    return table.index_select(0, index)


def draft_batch_bytes(accepted: list[int], k: int, hidden_size: int, *, hidden_bytes: int = 2,
                      index_bytes: int = 8) -> int:
    """Bytes the fused pair must read and write for one decode step, at the least.

    prepare_draft_inputs reads token_ids and positions ``[c, T]`` and two ``[c]`` vectors,
    and writes four index arrays and a bool mask ``[c*R]`` plus ``[c*K]`` sample rows.
    fill_draft_hidden reads hidden_mapping and is_masked, the n + 1 target rows each request
    actually uses and ``shared_hidden``, and writes ``[c*R, H]``.

    >>> draft_batch_bytes([3], k=3, hidden_size=4, hidden_bytes=4)
    532
    """
    c, T = len(accepted), k + 1
    R = T + k - 1
    prep = index_bytes * (2 * c * T + 2 * c) + index_bytes * 4 * c * R + c * R + index_bytes * c * k
    fill = (index_bytes * c * R + c * R + hidden_bytes * hidden_size * (sum(accepted) + c)
            + hidden_bytes * hidden_size + hidden_bytes * hidden_size * c * R)
    return prep + fill


# ---------------------------------------------------------------- notebook 3
def chain_sees(a: int, d: int, a_key: int, d_key: int) -> bool:
    """Whether the training query of element (a, d) may attend to the key of element (a_key, d_key).

    Read it off inference: when chain a drafts, the drafter's KV cache holds the context
    slots (depth 0) of every position up to a, and the slots its own pass wrote for chain a
    at depths up to d. No other chain exists then, and neither do the tokens this pass is
    still drafting. ``train.mask.chain_visible`` is the same rule on tensors.

    >>> chain_sees(1, 2, 1, 0), chain_sees(1, 2, 1, 1), chain_sees(1, 2, 3, 0), chain_sees(3, 1, 1, 1)
    (True, True, False, False)
    """
    return (d_key == 0 and a_key <= a) or (a_key == a and d_key <= d)


def leaked_input_token(a: int, d: int) -> int:
    """The sequence index of the input token of key (a + d, 0), the latest depth-0 key a *position*-causal
    mask would show query (a, d) (both sit at position a + d).

    Element (a', 0) embeds x[a' + 1] (EAGLE's shift), so the key carries x[a + d + 1]: the
    token chain a drafts at depth d - 1, one before the query's own label x[a + d + 2].

    >>> leaked_input_token(1, 2)
    4
    """
    return a + d + 1


def cod_kept_elements(n: int, num_depths: int, ratio: float = 0.7, ratio_min: float = 0.2) -> int:
    """Elements COD keeps for ``n`` loss-bearing anchors: n at depth 0, ceil(n·max(r^d, r_min)) deeper.

    >>> cod_kept_elements(1000, 8), 8 * 1000  # COD vs every anchor at every depth
    (3374, 8000)
    """
    return n + sum(math.ceil(n * max(ratio ** d, ratio_min) - 1e-9) for d in range(1, num_depths))


# ---------------------------------------------------------------- notebook 5
def speedup_at_equal_acceptance(peagle_row, eagle3_row) -> float:
    """P-EAGLE over EAGLE-3 TPS if both heads had the same acceptance length.

    Tokens per step are then equal, and so is the verify pass (the same K + 1 tokens through
    the same target), so only draft-batch prep and drafting differ. The verify time used is
    the mean of the two measurements, which differ only by noise.

    >>> from types import SimpleNamespace as Row
    >>> speedup_at_equal_acceptance(Row(verify_ms=10.0, prep_ms=0.5, draft_ms=2.0),
    ...                             Row(verify_ms=10.0, prep_ms=0.5, draft_ms=7.5))
    1.44
    """
    verify = (peagle_row.verify_ms + eagle3_row.verify_ms) / 2
    def step(r):
        return verify + (r.prep_ms or 0.0) + (r.draft_ms or 0.0)
    return step(eagle3_row) / step(peagle_row)


def speedup_conventions(peagle_row, eagle3_row) -> dict[str, float]:
    """The speed-up at equal acceptance under each sound way of counting the verify pass.

    Both methods verify the same K + 1 tokens through the same target, so their two verify
    times differ by noise: the mean of the two, each row's own, or either row's for both are
    all right. A row with ``step_ms`` (a sweep row) adds the whole measured step, host time
    included.

    >>> from types import SimpleNamespace as Row
    >>> sorted(round(v, 3) for v in speedup_conventions(Row(verify_ms=9.0, prep_ms=0.0, draft_ms=2.0),
    ...                                                 Row(verify_ms=11.0, prep_ms=0.0, draft_ms=7.0)).values())
    [1.385, 1.417, 1.455, 1.636]
    """
    p, e = peagle_row, eagle3_row
    def step(r, verify):
        return verify + (r.prep_ms or 0.0) + (r.draft_ms or 0.0)
    out = {"mean verify": speedup_at_equal_acceptance(p, e),
           "own verify": step(e, e.verify_ms) / step(p, p.verify_ms),
           "P-EAGLE's verify": step(e, p.verify_ms) / step(p, p.verify_ms),
           "EAGLE-3's verify": step(e, e.verify_ms) / step(p, e.verify_ms)}
    if getattr(p, "step_ms", None) and getattr(e, "step_ms", None):
        out["whole step"] = e.step_ms / p.step_ms
    return out


# ---------------------------------------------------------------- notebook 6
DEPTH_REASONS = {
    "a": "a P-EAGLE slot at depth d sees the mask embedding and shared_hidden, never the d tokens drafted "
         "before it in the same pass",
    "b": "COD keeps fewer positions at the deeper depths, so they train on fewer examples",
    "c": "a deeper depth predicts a token further ahead, and further tokens are harder to predict",
}


def shipped_depth_agreement() -> dict[str, list[float]]:
    """Held-out top-1 agreement with the target per training depth, of each shipped head (its ``summary.json``).

    Depth d is the draft d + 1 tokens after the last verified one: depth 0 sees the target's hidden
    state, P-EAGLE's deeper depths a mask slot each.
    """
    import json

    from ..heads import HEADS_DIR

    return {m: json.loads((HEADS_DIR / m / "summary.json").read_text())["heldout_depth_acc"] for m in ("eagle3", "peagle")}


def weakest_depth(agreement: dict[str, list[float]]) -> tuple[str, int, str]:
    """The head whose agreement falls most from depth 0, its weakest depth, and the reason (a key of DEPTH_REASONS).

    >>> weakest_depth({"eagle3": [0.80, 0.79, 0.78], "peagle": [0.84, 0.70, 0.55]})
    ('peagle', 2, 'a')
    """
    head = max(agreement, key=lambda m: agreement[m][0] - min(agreement[m]))
    acc = agreement[head]
    return head, acc.index(min(acc)), "a"


def train_tiny_heads(methods=("eagle3", "peagle"), *, steps: int = 300, k: int = 3, seed: int = 0) -> dict[str, list]:
    """Train one head per method on the same tiny data and budget; return held-out acceptance.

    ``train_walkthrough.tiny_setup`` stands in for SmolLM2 and its data, so this runs on a
    CPU in about half a minute; the training calls are the ones notebook 6 makes.

    Returns:
        ``{method: [AcceptanceReport at K = k]}``.
    """
    import tempfile

    from ..train import TrainConfig, Trainer, evaluate_acceptance, new_drafter
    from ..train.evaluate import heldout_prompts
    from .train_walkthrough import tiny_setup

    setup = tiny_setup(seed=seed)
    prompts = heldout_prompts(setup.heldout, len(setup.heldout))
    out = {}
    for method in methods:
        drafter = new_drafter(setup.target, method, 1, setup.vocab, seed=seed)
        cfg = TrainConfig(method=method, steps=steps, lr=3e-3, warmup_fraction=0.03, batch_size=8, row_len=64,
                          k_train=k + 1, seed=seed, ckpt_every=0, eval_at_end=False)
        with tempfile.TemporaryDirectory() as tmp:
            Trainer(setup.target, drafter, setup.train, cfg, tmp, progress=False).run()
        out[method] = evaluate_acceptance(setup.target, drafter, prompts, ks=(k,), max_new_tokens=32)
    return out
