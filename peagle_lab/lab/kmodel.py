"""Where does throughput peak in K? A small analytic model of one decode step, fitted to a K sweep.

One decode step of a speculative method drafts K tokens, verifies K + 1 and yields on average
AL(K) tokens per request, so at concurrency c::

    TPS(K) = 1000 · c · AL(K) / step_ms(K)
    AL(K)  = 1 + Σ_{i=1..K} a_i,            a_i = a_1 · r^(i-1)   (per-position acceptance)
    step_ms(K) = verify_ms + verify_ms_per_token · (K + 1) + passes(K) · pass_ms + host_ms
    passes(K)  = K for EAGLE-3 (one drafter pass per draft token), 1 for P-EAGLE

The K-th draft token adds a_K to the numerator; for EAGLE-3 it also adds one drafter pass
to the denominator, for P-EAGLE only its share of the verify pass. So EAGLE-3 peaks once
a_K / AL(K) falls below (pass_ms + verify_ms_per_token) / step_ms, and P-EAGLE keeps
gaining for as long as a_K is worth more than the verify cost of one more token.

``fit_k_model`` reads every parameter from a K sweep's ``bench.json`` rows (``peagle-lab
bench``, the schema of :mod:`peagle_lab.bench.schema`): a_1 and r from the per-position
acceptance of the largest K, the verify cost by least squares over K, the pass cost from
the drafting time, the host time as what remains of the step. The model predicts *decode*
throughput (the steps alone); the sweep's ``tps`` also counts prefill, so the model is
checked against ``c · AL / step_ms`` of each row (``measured_decode_tps``).

Everything here is plain Python: the figure is ``mechanics_figures.k_model_figure``, the
sliders ``widgets.KModelExplorer``.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..hardware import DEVICES, bandwidth_ratio

__all__ = ["Acceptance", "StepCosts", "MethodModel", "KFit", "METHODS", "drafter_passes", "acceptance_length",
           "step_ms", "predicted_tps", "predicted_peak_k", "measured_decode_tps", "fit_k_model", "peak_check",
           "sweep_heads", "DEVICE_PRESETS", "device_costs"]

METHODS = ("eagle3", "peagle")


@dataclass(frozen=True)
class Acceptance:
    """Geometric per-position acceptance: a_i = first · decay^(i-1) (unconditional, as vLLM counts it)."""

    first: float  # a_1: share of steps whose first draft is accepted
    decay: float  # r: a_{i+1} / a_i

    def __post_init__(self) -> None:
        for name, value in (("first", self.first), ("decay", self.decay)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r} is out of range; expected [0, 1]")

    def per_position(self, k: int) -> list[float]:
        """a_1 .. a_K."""
        return [self.first * self.decay ** i for i in range(k)]


@dataclass(frozen=True)
class StepCosts:
    """What one decode step costs, in milliseconds."""

    verify_ms: float  # the target pass, its part that does not grow with the tokens verified
    verify_ms_per_token: float  # what each verified token adds (≈ 0 while the pass is launch-bound)
    pass_ms: float  # one drafter forward pass
    host_ms: float  # everything else in the step: draft-batch preparation, sampling, host work

    def __post_init__(self) -> None:
        if self.verify_ms + self.pass_ms + self.host_ms <= 0:
            raise ValueError(f"a step must cost something: {self}")


@dataclass(frozen=True)
class MethodModel:
    """One method's model: its acceptance and its step costs."""

    method: str  # "eagle3" or "peagle"
    acceptance: Acceptance
    costs: StepCosts


def drafter_passes(method: str, k: int) -> int:
    """Drafter forward passes per step: K for EAGLE-3, one for P-EAGLE.

    >>> drafter_passes("eagle3", 5), drafter_passes("peagle", 5)
    (5, 1)
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}; expected one of {METHODS}")
    return k if method == "eagle3" else 1


def acceptance_length(acceptance: Acceptance, k: int) -> float:
    """AL(K) = 1 + Σ a_i (the bonus token counts).

    >>> round(acceptance_length(Acceptance(0.5, 0.5), 3), 3)  # 1 + 0.5 + 0.25 + 0.125
    1.875
    """
    return 1.0 + sum(acceptance.per_position(k))


def step_ms(model: MethodModel, k: int) -> float:
    """Predicted time of one decode step at K."""
    c = model.costs
    return c.verify_ms + c.verify_ms_per_token * (k + 1) + drafter_passes(model.method, k) * c.pass_ms + c.host_ms


def predicted_tps(model: MethodModel, k: int, concurrency: int) -> float:
    """Predicted decode throughput (output tokens/s over all requests) at K.

    >>> m = MethodModel("eagle3", Acceptance(0.6, 0.6), StepCosts(1.4, 0.0, 0.1, 0.2))
    >>> round(predicted_tps(m, 1, 1))  # 1000 · 1.6 / (1.4 + 0.1 + 0.2)
    941
    """
    return 1000.0 * concurrency * acceptance_length(model.acceptance, k) / step_ms(model, k)


def predicted_peak_k(model: MethodModel, concurrency: int, ks: Sequence[int] = range(1, 9)) -> int:
    """The K of ``ks`` with the highest predicted throughput (the smaller K on a tie).

    >>> costs = StepCosts(1.4, 0.0, 0.1, 0.2)
    >>> predicted_peak_k(MethodModel("eagle3", Acceptance(0.6, 0.6), costs), 1)
    4
    >>> predicted_peak_k(MethodModel("peagle", Acceptance(0.6, 0.6), costs), 1)  # no pass per token
    8
    """
    return max(ks, key=lambda k: (round(predicted_tps(model, k, concurrency), 9), -k))


def measured_decode_tps(row: Mapping) -> float:
    """A bench row's decode throughput, the quantity the model predicts: 1000 · c · AL / step_ms."""
    return 1000.0 * row["concurrency"] * row["acceptance_length"] / row["step_ms"]


# ------------------------------------------------------------------ fitting to a sweep
@dataclass(frozen=True)
class KFit:
    """The model fitted to one (workload, concurrency) of a K sweep, beside the rows it came from."""

    workload: str
    concurrency: int
    models: dict[str, MethodModel]  # per method
    rows: dict[str, list[dict]]  # per method, the temperature-0 rows sorted by K
    baseline_decode_tps: float | None  # plain decoding's c / step_ms, where the sweep has it
    device: str

    @property
    def ks(self) -> list[int]:
        return sorted({r["k"] for rows in self.rows.values() for r in rows})

    def with_model(self, method: str, **changes) -> "KFit":
        """This fit with some of one method's parameters changed (``first``, ``decay``, ``pass_ms``,
        ``verify_ms``, ``verify_ms_per_token``, ``host_ms``): what the sliders do."""
        m = self.models[method]
        acc = {k: changes.pop(k) for k in ("first", "decay") if k in changes}
        new = MethodModel(method, replace(m.acceptance, **acc), replace(m.costs, **changes))
        return replace(self, models={**self.models, method: new})


def _least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line; a flat line through the mean for one x."""
    if len(set(xs)) < 2:
        return statistics.fmean(ys), 0.0
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


def _fit_acceptance(rows: list[dict]) -> Acceptance:
    """a_1 and r from the per-position acceptance of the largest K (r as a ratio of sums)."""
    a = list(max(rows, key=lambda r: r["k"])["per_position_acceptance"])
    first = min(max(a[0], 0.0), 1.0) if a else 0.0
    decay = sum(a[1:]) / sum(a[:-1]) if len(a) > 1 and sum(a[:-1]) > 0 else 0.0
    return Acceptance(first, min(max(decay, 0.0), 1.0))


def _fit_pass_ms(method: str, rows: list[dict]) -> float:
    """Drafting time per pass: least squares through the origin of draft_ms on the passes."""
    passes = [drafter_passes(method, r["k"]) for r in rows]
    return statistics.linear_regression(passes, [r["draft_ms"] for r in rows], proportional=True).slope


def fit_k_model(bench: Mapping, workload: str, concurrency: int) -> KFit:
    """Fit the model to the temperature-0 rows of ``bench`` (a parsed ``bench.json``) at one workload and c.

    The verify cost is one line over both methods' rows (the same target runs both); acceptance,
    pass and host costs are per method.

    Raises:
        ValueError: no EAGLE-3 or P-EAGLE rows for that workload and concurrency.
    """
    rows = [r for r in bench["rows"] if r["workload"] == workload and r["concurrency"] == concurrency
            and r["temperature"] == 0 and r.get("source", "peagle_lab") == "peagle_lab"]
    per = {m: sorted((r for r in rows if r["method"] == m and r["k"] >= 1), key=lambda r: r["k"]) for m in METHODS}
    per = {m: rs for m, rs in per.items() if rs}
    if not per:
        raise ValueError(f"no eagle3/peagle rows for workload={workload!r}, c={concurrency} in this bench document")
    spec = [r for rs in per.values() for r in rs]
    verify_ms, per_token = _least_squares([r["k"] + 1 for r in spec], [r["verify_ms"] for r in spec])
    models = {}
    for m, rs in per.items():
        host = sum(r["step_ms"] - r["verify_ms"] - r["draft_ms"] for r in rs) / len(rs)
        models[m] = MethodModel(m, _fit_acceptance(rs), StepCosts(verify_ms, per_token, _fit_pass_ms(m, rs), host))
    base = [r for r in rows if r["method"] == "baseline"]
    device = (bench.get("run_info") or {}).get("device", "")
    return KFit(workload, concurrency, models, per, measured_decode_tps(base[0]) if base else None, device)


def peak_check(fit: KFit) -> dict[str, dict]:
    """Predicted against measured peak K, per method.

    Returns:
        ``{method: {"predicted_k", "measured_k", "predicted_peak_tps", "measured_peak_tps",
        "measured_at_predicted_k", "shortfall"}}``, where ``shortfall`` is how far the measured
        decode throughput at the predicted K falls below the measured peak (0.05 = 5 %).
    """
    out = {}
    for m, model in fit.models.items():
        measured = {r["k"]: measured_decode_tps(r) for r in fit.rows[m]}
        ks = sorted(measured)
        k_pred = predicted_peak_k(model, fit.concurrency, ks)
        k_meas = max(ks, key=lambda k: measured[k])
        out[m] = {"predicted_k": k_pred, "measured_k": k_meas,
                  "predicted_peak_tps": predicted_tps(model, k_pred, fit.concurrency),
                  "measured_peak_tps": measured[k_meas], "measured_at_predicted_k": measured[k_pred],
                  "shortfall": 1.0 - measured[k_pred] / measured[k_meas]}
    return out


def sweep_heads(bench: Mapping) -> dict[str, str]:
    """Which heads a sweep measured, by the fingerprints its ``config.head_digests`` records.

    A fit describes the heads the sweep ran, so read it beside this: ``"the shipped head"``
    when the recorded digest is the bundled head's, ``"another head (digest …)"`` when it is not;
    a file without a fingerprint says so and names the folder it loaded the head from
    (``config.heads``), which alone cannot tell whether that head ships.

    >>> sweep_heads({"config": {"heads": {"eagle3": "/tmp/heads/eagle3-1l"}}})["eagle3"]
    'no fingerprint recorded; loaded from /tmp/heads/eagle3-1l'
    >>> sweep_heads({"config": {}})["peagle"]
    'no fingerprint recorded'
    """
    from ..heads import bundled_head_dir
    from ..heads.io import head_digest

    cfg = bench.get("config") or {}
    recorded, folders = cfg.get("head_digests") or {}, cfg.get("heads") or {}
    out = {}
    for m in METHODS:
        bundled = bundled_head_dir(m)
        digest = recorded.get(m)
        if not digest:
            out[m] = "no fingerprint recorded" + (f"; loaded from {folders[m]}" if folders.get(m) else "")
        else:
            out[m] = ("the shipped head" if bundled is not None and digest == head_digest(bundled) else
                      f"another head (digest {digest})")
    return out


# The GPUs the K-model's step costs can be carried to (peagle_lab.hardware: published bandwidth, SMs, bf16
# peak). The B200 is a projection (``DEVICES["B200"].projection``): no B200 has run this lab's code.
DEVICE_PRESETS = {name: DEVICES[name] for name in ("H100", "H200", "B200")}


def device_costs(costs: StepCosts, measured_on: str, device: str) -> StepCosts:
    """``costs`` measured on ``measured_on`` carried to ``device`` by the ratio of their memory bandwidths.

    A decode step at small c reads the weights and the KV cache once a pass, so its GPU parts (verify, the
    drafter pass) scale with 1 / bandwidth; the host's share stays. Where either preset is a projection
    (``DEVICE_PRESETS[name].projection``, the B200) the result is one too: an estimate, not a measurement.

    >>> c = StepCosts(verify_ms=1.2, verify_ms_per_token=0.01, pass_ms=0.24, host_ms=0.3)
    >>> b200 = device_costs(c, "H200", "B200")   # 4.8 → 8.0 TB/s
    >>> round(b200.verify_ms, 3), round(b200.pass_ms, 3), b200.host_ms, DEVICE_PRESETS["B200"].projection
    (0.72, 0.144, 0.3, True)
    """
    for name in (measured_on, device):
        if name not in DEVICE_PRESETS:
            raise ValueError(f"unknown device {name!r}: expected one of {', '.join(DEVICE_PRESETS)}")
    ratio = bandwidth_ratio(measured_on, device)
    return replace(costs, verify_ms=costs.verify_ms * ratio, verify_ms_per_token=costs.verify_ms_per_token * ratio,
                   pass_ms=costs.pass_ms * ratio)
