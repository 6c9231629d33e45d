"""The checks of notebooks 3 and 4: the chain mask, COD's kept elements, the fill as one gather, the bytes moved.

How a check answers, and how the notebooks call it, is :mod:`peagle_lab.lab.checks`'s to say; the shared
machinery is :mod:`peagle_lab.lab.checks_base`.
"""
from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from . import exercises
from .checks_base import STUB, call_answer, correct

__all__ = ["check_chain_mask", "check_cod_kept", "check_fill_by_gather", "check_moved_bytes"]


# ---------------------------------------------------------------- notebook 3
def _mask_cases():
    from ..train import CODConfig, sample_elements

    g = torch.Generator().manual_seed(0)
    for n in (12, 14, 9):
        e = sample_elements(n, torch.arange(n) >= 2, CODConfig(num_depths=4), g)
        yield list(zip(e.anchor.tolist(), e.depth.tolist()))


# Pairs tried first, in the order their hints teach best: one of each kind of key.
_FIRST_PAIRS = (((2, 1), (2, 1)), ((3, 2), (1, 0)), ((1, 2), (1, 1)), ((1, 1), (1, 2)), ((1, 0), (2, 0)),
                ((1, 2), (3, 0)), ((1, 2), (2, 0)), ((3, 1), (1, 1)), ((3, 0), (1, 2)))


def _pair_reason(q: tuple[int, int], key: tuple[int, int]) -> str:
    (a, d), (ak, dk) = q, key
    if (ak, dk) == (a, d):
        return "a query always sees its own key: at inference a slot reads the key and value it has just written"
    if ak == a:
        return ("an earlier slot of its own chain: at inference chain a's slots 0..d are written by the same pass, "
                "and slot d attends to them (to their states, not to tokens drafted from them)" if dk < d else
                "a deeper element of its own chain is a later slot of the pass: the future")
    if dk == 0 and ak < a:
        return "depth-0 elements of anchors up to a are the context, cached by earlier passes"
    if dk == 0 and ak <= a + d:
        return (f"key ({ak}, 0) sits at position {ak}, not after the query's position {a + d}, yet it embeds the "
                f"true token x[{ak + 1}], which chain {a} drafts at depth {ak - a - 1}. At inference that token is "
                "being drafted by this same pass, so the query cannot have it: positions alone do not decide")
    if dk == 0:
        return "a later anchor's context is the future"
    return (f"({ak}, {dk}) is a draft slot of chain {ak}. At inference each chain is drafted in its own pass, after "
            "everything before it is verified: the cache holds depth-0 context only, never another chain's drafts")


def check_chain_mask(sees, leaked_token) -> None:
    """Check ``sees(a, d, a_key, d_key)`` against ``train.chain_visible`` on COD layouts, then ``leaked_token``:
    the index i of x[i], the input token of key (3, 0), which a position-causal mask would show query (1, 2).

    >>> _ = check_chain_mask(exercises.chain_sees, exercises.leaked_input_token(1, 2))  # doctest: +ELLIPSIS
    correct: your rule is the chain mask on 3 COD layouts (... query-key pairs). Key (3, 0) embeds x[4], ...
    >>> _ = check_chain_mask(lambda a, d, ak, dk: ak + dk <= a + d, None)  # causal by position
    Traceback (most recent call last):
    AssertionError: query (1, 2) sees key (3, 0), which it must not: key (3, 0) sits at position 3, not after the query's position 3, yet it embeds the true token x[4], which chain 1 drafts at depth 1. At inference that token is being drafted by this same pass, so the query cannot have it: positions alone do not decide
    """
    layouts = list(_mask_cases())
    pairs = list(_FIRST_PAIRS) + [(q, key) for els in layouts for q in els for key in els]
    for q, key in pairs:
        got, want = call_answer(sees, *q, *key), exercises.chain_sees(*q, *key)
        if not (isinstance(got, (bool, int)) or type(got).__name__ in ("bool", "bool_")  # numpy's bool too
                or (isinstance(got, torch.Tensor) and got.numel() == 1)):
            raise AssertionError(f"sees({q[0]}, {q[1]}, {key[0]}, {key[1]}) returned {got!r}: return True or False")
        if bool(got) != want:
            raise AssertionError(f"query {q} {'sees' if got else 'does not see'} key {key}, which it "
                                 f"{'must not' if got else 'must'}: {_pair_reason(q, key)}")
    if leaked_token is None:
        raise AssertionError(STUB)
    if isinstance(leaked_token, bool) or not isinstance(leaked_token, int):
        raise AssertionError(f"leaked_token is the index i of the token x[i], a whole number; got {leaked_token!r}")
    hints = {5: "x[5] is what query (1, 2) must predict (element (a, d) predicts x[a + d + 2]); the key before it in "
                "position carries the token one earlier",
             3: "element (a', 0) embeds the next token x[a' + 1] with the target's state at a' (EAGLE's shift by one, "
                "notebook 2), not x[a']"}
    if leaked_token != 4:
        raise AssertionError(hints.get(leaked_token, f"x[{leaked_token}] is off: element (a', 0) embeds x[a' + 1], and "
                                       "here a' = 3"))
    correct(f"your rule is the chain mask on {len(layouts)} COD layouts ({len(pairs)} query-key pairs). Key (3, 0) "
             "embeds x[4], the token chain 1 drafts at depth 1, right before query (1, 2). At inference that draft "
             "comes out of the same pass, so mask slot 2 cannot see it (slot 1 holds only the mask embedding and "
             "h_shared); a position-causal training mask would teach the head to lean on a token it never has")


def check_cod_kept(kept, without_cod) -> None:
    """Check the elements COD keeps for n = 1000 loss-bearing anchors at K_train = 8 (r = 0.7, r_min = 0.2), and
    the count without COD.

    >>> _ = check_cod_kept(exercises.cod_kept_elements(1000, 8), 8 * 1000)
    correct: COD keeps 3374 of 8000 elements (42%): 1000, 700, 490, 343, 241, then 200 at each of depths 5-7
    >>> _ = check_cod_kept(3373.1, 8000)
    Traceback (most recent call last):
    AssertionError: 3373.1 is close: a depth keeps a whole number of elements, ceil(n * max(r^d, r_min)), so round each depth up (240.1 -> 241) before adding
    """
    from ..train import CODConfig

    n, depths = 1000, 8
    quotas = [CODConfig(depths, 0.7, 0.2).quota(n, d) for d in range(depths)]  # [1000, 700, 490, 343, 241, 200, ...]
    want = exercises.cod_kept_elements(n, depths)
    for name, value in (("kept", kept), ("without_cod", without_cod)):
        if value is None:
            raise AssertionError(STUB)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AssertionError(f"{name} should be a number of elements, got {value!r}")
    if without_cod != n * depths:
        raise AssertionError(f"without COD every anchor keeps every depth: n x K_train = {n} x {depths} elements "
                             f"(depths 0..{depths - 1}), not {without_cod}")
    if kept == want:
        correct(f"COD keeps {want} of {n * depths} elements ({100 * want / (n * depths):.0f}%): "
                 f"{', '.join(map(str, quotas[:5]))}, then {quotas[5]} at each of depths 5-{depths - 1}")
        return
    unrounded = sum(n * max(0.7 ** d, 0.2) for d in range(depths))  # 3373.1
    no_floor = sum(n * 0.7 ** d for d in range(depths))  # 3141.2: r_min forgotten
    if math.floor(unrounded) <= kept < want:
        raise AssertionError(f"{kept} is close: a depth keeps a whole number of elements, ceil(n * max(r^d, r_min)), "
                             "so round each depth up (240.1 -> 241) before adding")
    hints = [(math.floor(no_floor) <= kept <= math.ceil(no_floor) + depths,
              "without the floor r_min: depth d keeps n * max(r^d, r_min), so depths 5-7 keep 200 each, not 168.1, "
              "117.6 and 82.4"),
             (kept == want + 200, f"K_train = {depths} means depths 0..{depths - 1}: one depth too many"),
             (kept in (want - n, want - n + 200), "depth 0 keeps every anchor: start the sum with n, then depths "
                                                 f"1..{depths - 1}"),
             (kept == n * depths, "that is every element, without COD")]
    raise AssertionError(next((h for cond, h in hints if cond),
                              f"{kept} is off: COD keeps all n = {n} anchors at depth 0 and ceil(n * max(r^d, r_min)) "
                              f"at depth d = 1..{depths - 1} (CODConfig.quota(n, d) gives one depth's count)"))


# ---------------------------------------------------------------- notebook 4
class _WhereShapes(TorchFunctionMode):
    """Record the shapes ``torch.where`` returns inside the block (to spot a where over [N, H])."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.where, torch.Tensor.where) and isinstance(out, torch.Tensor):
            self.shapes.append(tuple(out.shape))
        return out


def _fill_cases():
    from ..kernels.fill_draft_hidden import fill_draft_hidden_ref
    from .layout import random_decode_batch

    for c, k, dtype, seed in ((4, 3, torch.float32, 7), (1, 1, torch.float32, 1), (5, 6, torch.bfloat16, 3)):
        batch = random_decode_batch(c, k, seed=seed)
        d = batch.layout(k, mask_token_id=16, max_len=4096, backend="torch")
        g = torch.Generator().manual_seed(seed)
        hidden = torch.randn(c * (k + 1), 32, generator=g).to(dtype)  # [c*T, H]
        shared = torch.randn(32, generator=g).to(dtype)  # [H]
        yield (hidden, d.hidden_mapping, d.is_masked, shared), fill_draft_hidden_ref(hidden, d.hidden_mapping,
                                                                                    d.is_masked, shared)


def check_fill_by_gather(fill_by_gather) -> None:
    """Check ``fill_by_gather(hidden, hidden_mapping, is_masked, shared_hidden)``: bit-equal to the reference,
    with no ``torch.where`` over the ``[N, H]`` output.

    >>> _ = check_fill_by_gather(exercises.fill_draft_hidden_by_gather)
    correct: bit-identical to fill_draft_hidden_ref on 3 ragged batches, float32 and bfloat16, one gather
    """
    for args, want in _fill_cases():
        with _WhereShapes() as seen:
            got = call_answer(fill_by_gather, *args)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            shown = f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else type(got).__name__
            raise AssertionError(f"expected a tensor {tuple(want.shape)} {want.dtype} ([N, H], the dtype of hidden), "
                                 f"got {shown}")
        bad = (got != want).any(-1)  # [N]
        if bad.any():
            mapping, masked = args[1], args[2]
            kind = ["mask slots (they take shared_hidden)" if masked[i] else
                    "padding slots (they are zeros)" if mapping[i] < 0 else
                    "context/bonus slots (they copy hidden[hidden_mapping])" for i in bad.nonzero()[:, 0].tolist()]
            raise AssertionError(f"{int(bad.sum())} of {len(bad)} rows differ from fill_draft_hidden_ref, "
                                 f"first among the {kind[0]}")
        wide = [s for s in seen.shapes if len(s) >= 2]
        if wide:
            raise AssertionError(f"right values, but torch.where produced a {list(wide[0])} tensor: choose the rows "
                                 "with one index vector [N] and gather them all at once (index_select on a table "
                                 "with two extra rows, shared_hidden and zeros)")
    correct("bit-identical to fill_draft_hidden_ref on 3 ragged batches, float32 and bfloat16, one gather")


def check_moved_bytes(moved: float) -> None:
    """Check the estimate of the bytes the fused pair moves at c = 64, K = 7, H = 576, bf16, 3 accepted.

    Within 15 % of the full count passes: the hidden states are most of it.

    >>> _ = check_moved_bytes(exercises.draft_batch_bytes([3] * 64, 7, 576))
    correct: 1.38 MB (the full count, index arrays included, is 1.38 MB)
    """
    want = exercises.draft_batch_bytes([3] * 64, 7, 576, hidden_bytes=2)
    if moved is None:
        raise AssertionError(STUB)
    if not isinstance(moved, (int, float)) or isinstance(moved, bool):
        raise AssertionError(f"expected a number of bytes, got {type(moved).__name__}")
    out_rows = 64 * 14 * 576 * 2  # the [c*R, H] output alone
    if moved < 0.5 * want:
        raise AssertionError(f"{moved / 1e6:.3f} MB is too little: the fill writes c x R rows of H bfloat16 values "
                             f"(R = 2K = 14 slots per request: {out_rows / 1e6:.2f} MB alone) and reads the n + 1 "
                             "target rows each request uses")
    if moved > 1.15 * want:
        raise AssertionError(f"{moved / 1e6:.3f} MB is too much: count each row once, 2 bytes per bfloat16 value, "
                             "and only the n + 1 = 4 target rows each request uses (not all K + 1)")
    if moved < 0.85 * want:
        raise AssertionError(f"{moved / 1e6:.3f} MB is close but short: did you count both the rows read (n + 1 per "
                             "request, and shared_hidden) and the rows written (c x R)?")
    correct(f"{moved / 1e6:.2f} MB (the full count, index arrays included, is {want / 1e6:.2f} MB)")

