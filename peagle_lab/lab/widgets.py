"""ipywidgets that compose the figures of ``peagle_lab.lab.figures`` (the only module importing ipywidgets).

- ``DraftBatchExplorer``: sliders for K, c and accepted counts over the draft-batch figure (notebook 2);
- ``LiveFigure``: a figure redrawn in place from a growing result (the live sweep of notebook 5);
- ``TrainingMonitor``: a ``Trainer`` callback drawing the loss and per-depth agreement live (notebook 6);
- ``KModelExplorer``: sliders for the K model's acceptance and costs over its predicted curves (notebook 5);
- ``ScaleExplorer``: a target shape, c and acceptance source over predicted TPS against K (notebook 8).

``DraftBatchExplorer`` lays out a toy decode batch with ``prepare_draft_inputs`` and redraws
the draft-batch figure whenever a slider moves:

```
 [K ───●──]  [c ──●───]
 [accepted request 0 ─●──] [accepted request 1 ───●]     (one slider per request, 0..K)
 ┌ figure: request × slot grid, coloured context / bonus / mask / padding ┐
```
The figure is redrawn into an ``ipywidgets.Output``: plotly's in-place ``FigureWidget`` needs
the ``anywidget`` package, which the notebook extra does not install. ``explorer.figure`` is
always the figure on screen, so tests can read what a slider did without a browser.
"""
from __future__ import annotations

from collections.abc import Callable

import ipywidgets as w
from IPython.display import Markdown, display

from .figures import draft_batch_figure, figure_mime_bundle, training_curves_figure
from .kmodel import METHODS, Acceptance, fit_k_model, predicted_peak_k
from .layout import layout_toy_batch
from .mechanics_figures import k_model_figure
from . import predict
from .scale_figures import prediction_figure
from ..train.loop import Callback

__all__ = ["DraftBatchExplorer", "LiveFigure", "TrainingMonitor", "KModelExplorer", "ScaleExplorer"]


def _show_in(output, figure) -> None:
    """Replace what the widget Output area ``output`` shows with ``figure``."""
    with output:
        output.clear_output(wait=True)
        display(figure)


class DraftBatchExplorer:
    """Sliders for K, c and each request's accepted count over a live draft-batch figure.

    Args:
        k: initial K (draft tokens per step); the toy batch has T = K + 1 tokens per request.
        accepted: initial accepted count per request (its length is the initial c).
        max_k / max_c: slider ranges.
        backend: ``prepare_draft_inputs`` backend ("auto" runs the Triton kernel on CUDA, the
            PyTorch reference on a CPU; "triton" on a CPU runs Triton's interpreter).

    Attributes:
        widget: the ``ipywidgets.VBox`` to display.
        inputs / figure: the ``DraftInputs`` and plotly figure currently shown.
        redraws: how many times the figure was rebuilt.

    Raises:
        ValueError: initial values outside the slider ranges.
    """

    def __init__(self, k: int = 3, accepted: tuple[int, ...] = (2, 3), *, max_k: int = 8, max_c: int = 4,
                 backend: str = "auto") -> None:
        if not 1 <= k <= max_k:
            raise ValueError(f"k={k} must lie in [1, max_k={max_k}]")
        if not 1 <= len(accepted) <= max_c or any(not 0 <= n <= k for n in accepted):
            raise ValueError(f"accepted={tuple(accepted)} needs 1..{max_c} counts, each in [0, K={k}]")
        self.backend = backend
        self.redraws = 0
        self._quiet = False  # set while sliders are rebuilt, so one change redraws once
        style = {"description_width": "initial"}
        self.k_slider = w.IntSlider(value=k, min=1, max=max_k, description="K (draft tokens)",
                                    continuous_update=False, style=style)
        self.c_slider = w.IntSlider(value=len(accepted), min=1, max=max_c, description="c (requests)",
                                    continuous_update=False, style=style)
        self.accepted_sliders: list[w.IntSlider] = []
        self.accepted_box = w.HBox()
        self.output = w.Output()
        self._set_accepted_sliders(list(accepted))
        self.k_slider.observe(self._on_k, names="value")
        self.c_slider.observe(self._on_c, names="value")
        self.widget = w.VBox([w.HBox([self.k_slider, self.c_slider]), self.accepted_box, self.output])
        self.redraw()

    # ------------------------------------------------------------------ state
    @property
    def k(self) -> int:
        return self.k_slider.value

    @property
    def accepted(self) -> list[int]:
        return [s.value for s in self.accepted_sliders]

    def _set_accepted_sliders(self, values: list[int]) -> None:
        for s in self.accepted_sliders:
            s.unobserve(self._on_accepted, names="value")
        self.accepted_sliders = [
            w.IntSlider(value=v, min=0, max=self.k, description=f"accepted, request {b}",
                        continuous_update=False, style={"description_width": "initial"})
            for b, v in enumerate(values)]
        for s in self.accepted_sliders:
            s.observe(self._on_accepted, names="value")
        self.accepted_box.children = tuple(self.accepted_sliders)

    # ------------------------------------------------------------------ callbacks
    def _on_k(self, change) -> None:
        # A request cannot keep more drafts than it had: clamp the counts to the new K.
        self._set_accepted_sliders([min(v, change["new"]) for v in self.accepted])
        self.redraw()

    def _on_c(self, change) -> None:
        values = self.accepted[: change["new"]]
        values += [min(b, self.k) for b in range(len(values), change["new"])]  # new requests: ragged counts
        self._set_accepted_sliders(values)
        self.redraw()

    def _on_accepted(self, _change) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Lay out the toy batch for the current sliders and show its figure."""
        self.inputs = layout_toy_batch(self.accepted, self.k, backend=self.backend)
        self.figure = draft_batch_figure(
            self.inputs, title=f"drafter batch: K={self.k}, c={len(self.accepted)}, accepted {self.accepted} "
                               f"→ R = T + K − 1 = {self.inputs.rows_per_request} slots per request")
        self.redraws += 1
        _show_in(self.output, self.figure)

    def _ipython_display_(self) -> None:
        display(self.widget)


class LiveFigure:
    """A figure rebuilt by ``make_figure(data)`` on every ``update(data)``, redrawn in place.

    It updates its output through an IPython display handle (``update_display_data``),
    not a widget: notebooks run unattended (nbconvert, nbval) handle that reliably even
    at many updates per cell, where widget output updates can stall the executor.

    Each update is sent as two messages, a spacer of the figure's height and then the
    figure. JupyterLab hands an update of the same mimetype to the renderer already on
    screen, and plotly's renderer ignores a new model once it has drawn a plot, so a
    plain update would leave the first frame showing; the spacer's other mimetype makes
    JupyterLab build a fresh plotly renderer for the figure. nbconvert keeps the last
    message, the figure.

    Attributes:
        figure: the latest figure (None before the first update). redraws: updates so far.
    """

    def __init__(self, make_figure: Callable, placeholder: str = "waiting for the first result…") -> None:
        self.make_figure = make_figure
        self.placeholder = placeholder
        self.figure = None
        self.redraws = 0
        self._handle = None

    def update(self, data) -> None:
        self.figure = self.make_figure(data)
        self.redraws += 1
        if self._handle is not None:
            self._handle.update(_spacer_bundle(self.figure), raw=True)
            self._handle.update(figure_mime_bundle(self.figure), raw=True)

    def _ipython_display_(self) -> None:
        # display() returns no handle outside IPython; updates are then only kept, not shown.
        if self.figure is None:
            self._handle = display(Markdown(f"*{self.placeholder}*"), display_id=True)
        else:
            self._handle = display(figure_mime_bundle(self.figure), raw=True, display_id=True)


def _spacer_bundle(figure) -> dict:
    """An empty block as tall as ``figure`` (plotly's renderer draws 360 px where no height is set)."""
    height = figure.layout.height or 360
    return {"text/html": f'<div style="height: {height}px"></div>', "text/plain": ""}


class TrainingMonitor(Callback):
    """Subscribe to a ``Trainer``: keep every log line's metrics and redraw the curves every ``every`` steps.

    Pass it in ``Trainer(..., callbacks=[monitor])`` and display it before ``run()``. The trainer
    calls ``on_step`` once per log line (``TrainConfig.log_every`` steps, averaged over them), so
    ``every`` should be a multiple of ``log_every``. The history stays available as
    ``monitor.history`` (one ``on_step`` dict per log line).
    """

    def __init__(self, every: int = 10, title: str = "training") -> None:
        if every < 1:
            raise ValueError(f"every={every} must be >= 1")
        self.every, self.history, self.evals = every, [], []
        self.live = LiveFigure(lambda history: training_curves_figure(history, title=title))

    @property
    def figure(self):
        return self.live.figure

    def on_step(self, metrics: dict) -> None:
        self.history.append(metrics)
        if metrics["step"] % self.every == 0 or metrics["step"] == 1:
            self.live.update(self.history)

    def on_eval(self, metrics: dict) -> None:
        self.evals.append(metrics)

    def finish(self) -> None:
        """Draw the last steps too (call after ``run()``)."""
        if self.history:
            self.live.update(self.history)

    def _ipython_display_(self) -> None:
        display(self.live)


class KModelExplorer:
    """Sliders over the K model (``peagle_lab.lab.kmodel``), redrawing its curves beside the measured ones.

    ```
     [workload ▾] [c ▾]                       (refits the model to that part of the sweep)
     EAGLE-3: [a_1 ──●──] [decay ──●──] [pass ms ──●──]
     P-EAGLE: [a_1 ──●──] [decay ──●──] [pass ms ──●──]
     verify:  [ms ──●──]  [ms per token ──●──]
     ┌ figure: decode tokens/s and AL against K, model dashed, sweep as markers ┐
    ```

    Args:
        bench: a parsed K-sweep ``bench.json`` (``docs/results/h200/k_scaling/2026-12-04-6249d56/bench.json``).
        workload / concurrency: where to start.
        max_k: the model's curves run over K = 1..max_k (beyond the sweep's K, to show where a
            peak would lie with other acceptance or costs).

    Attributes:
        fit: the ``KFit`` drawn now, sliders applied. figure / redraws: as in ``DraftBatchExplorer``.
    """

    _RANGES = {"first": (0.0, 1.0, 0.01), "decay": (0.0, 1.0, 0.01), "pass_ms": (0.0, 2.0, 0.01),
               "verify_ms": (0.0, 10.0, 0.05), "verify_ms_per_token": (-0.1, 0.5, 0.005)}

    def __init__(self, bench, workload: str = "chat", concurrency: int = 1, *, max_k: int = 12) -> None:
        self.bench, self.redraws, self._quiet = bench, 0, False
        self.ks = list(range(1, max_k + 1))
        rows = [r for r in bench["rows"] if r["method"] in METHODS]
        style = {"description_width": "initial"}
        self.workload = w.Dropdown(options=sorted({r["workload"] for r in rows}), value=workload,
                                   description="workload", style=style)
        self.concurrency = w.Dropdown(options=sorted({r["concurrency"] for r in rows}), value=concurrency,
                                      description="c", style=style)
        self.sliders = {(m, p): self._slider(p) for m in METHODS for p in ("first", "decay", "pass_ms")}
        self.sliders.update({(None, p): self._slider(p) for p in ("verify_ms", "verify_ms_per_token")})
        self.output = w.Output()
        boxes = [w.HBox([self.workload, self.concurrency])]
        boxes += [w.HBox([w.Label(f"{m}:")] + [self.sliders[m, p] for p in ("first", "decay", "pass_ms")]) for m in METHODS]
        boxes += [w.HBox([w.Label("verify:")] + [self.sliders[None, p] for p in ("verify_ms", "verify_ms_per_token")])]
        self.widget = w.VBox(boxes + [self.output])
        for dd in (self.workload, self.concurrency):
            dd.observe(lambda _change: self.refit(), names="value")
        for s in self.sliders.values():
            s.observe(lambda _change: self.redraw(), names="value")
        self.refit()

    def _slider(self, param: str) -> w.FloatSlider:
        lo, hi, step = self._RANGES[param]
        return w.FloatSlider(min=lo, max=hi, step=step, description=param, continuous_update=False,
                             readout_format=".3f", style={"description_width": "initial"})

    def refit(self) -> None:
        """Fit the model to the chosen workload and c, set the sliders to the fit, redraw."""
        self.base = fit_k_model(self.bench, self.workload.value, self.concurrency.value)
        self._quiet = True
        for (m, p), s in self.sliders.items():
            model = self.base.models[m or "peagle"]
            s.value = getattr(model.acceptance if p in ("first", "decay") else model.costs, p)
        self._quiet = False
        self.redraw()

    def predicted_peaks(self) -> dict[str, int]:
        """Each method's predicted peak K under the current sliders."""
        return {m: predicted_peak_k(model, self.fit.concurrency, self.ks) for m, model in self.fit.models.items()}

    def redraw(self) -> None:
        """Apply the sliders to the fitted model and draw it."""
        if self._quiet:
            return
        fit = self.base
        shared = {p: self.sliders[None, p].value for p in ("verify_ms", "verify_ms_per_token")}
        for m in fit.models:
            fit = fit.with_model(m, **shared, **{p: self.sliders[m, p].value for p in ("first", "decay", "pass_ms")})
        self.fit = fit
        self.figure = k_model_figure(fit, self.ks)
        self.redraws += 1
        _show_in(self.output, self.figure)

    def _ipython_display_(self) -> None:
        display(self.widget)


class ScaleExplorer:
    """Predicted throughput against K at a target's shape (``peagle_lab.lab.predict``), both methods.

    ```
     [shape ▾] [c ▾] [P-EAGLE layers ▾] [acceptance ▾  paper (HumanEval, …) | ours: chat | ours: code | sliders]
     EAGLE-3: [a_1 ──●──] [decay ──●──]      P-EAGLE: [a_1 ──●──] [decay ──●──]   (moving one picks "sliders")
     ┌ figure: predicted tokens/s against K (best K starred) │ each method's step at its best K ┐
    ```

    Args:
        scale: the scale lab's JSON (``predict.load_scale``); bench: a K sweep for "ours" (None: no such source).

    Attributes:
        figure, curves (``{method: {K: TPS}}``), redraws: what is on screen, for tests.
    """

    def __init__(self, scale, bench=None, shape: str = "gpt-oss-20b", concurrency: int = 1,
                 source: str = "paper (HumanEval)") -> None:
        self.scale, self.redraws, self._quiet = scale, 0, True
        self.sources = {f"paper ({b})": predict.paper_acceptance(b) for b in ("HumanEval", "SPEED-Bench", "MT-Bench")}
        for wl in sorted({r["workload"] for r in (bench or {"rows": []})["rows"]}):
            self.sources[f"ours: {wl}"] = predict.measured_acceptance(bench, wl)
        style = {"description_width": "initial"}
        shapes = predict.shapes_of(scale)
        self.shape = w.Dropdown(options=shapes, value=shape if shape in shapes else shapes[0], description="shape",
                                style=style)
        self.concurrency = w.Dropdown(description="c", style=style)
        self.depth = w.Dropdown(description="P-EAGLE layers", style=style)
        self.source = w.Dropdown(options=[*self.sources, "sliders"], value=source, description="acceptance",
                                 style=style)
        paper = self.sources["paper (HumanEval)"]
        self.sliders = {(m, p): w.FloatSlider(value=getattr(paper[m], p), min=0.0, max=1.0, step=0.01,
                                              description=f"{m} {p}", continuous_update=False, style=style)
                        for m in METHODS for p in ("first", "decay")}
        self.output = w.Output()
        self.widget = w.VBox([w.HBox([self.shape, self.concurrency, self.depth, self.source]),
                              w.HBox(list(self.sliders.values())), self.output])
        self._set_options(concurrency)
        self.shape.observe(lambda _c: self._set_options(self.concurrency.value), names="value")
        for dd in (self.concurrency, self.depth, self.source):
            dd.observe(lambda _c: self.redraw(), names="value")
        for s_ in self.sliders.values():
            s_.observe(lambda _c: self._slid(), names="value")
        self._quiet = False
        self.redraw()

    def _set_options(self, concurrency: int) -> None:
        quiet, self._quiet = self._quiet, True
        cs = predict.concurrencies_of(self.scale, self.shape.value)
        self.concurrency.options = cs
        self.concurrency.value = concurrency if concurrency in cs else cs[0]
        depths = predict.depths_of(self.scale, self.shape.value)
        self.depth.options = depths
        self.depth.value = predict.PEAGLE_DEPTH if predict.PEAGLE_DEPTH in depths else depths[-1]
        self._quiet = quiet
        self.redraw()

    def _slid(self) -> None:
        if self.source.value != "sliders":
            self.source.value = "sliders"  # redraws
        else:
            self.redraw()

    def acceptance(self) -> dict:
        """Each method's acceptance under the chosen source."""
        if self.source.value == "sliders":
            return {m: Acceptance(self.sliders[m, "first"].value, self.sliders[m, "decay"].value) for m in METHODS}
        return self.sources[self.source.value]

    def redraw(self) -> None:
        if self._quiet:
            return
        shape, c, depth = self.shape.value, self.concurrency.value, self.depth.value
        self.curves = predict.tps_curves(self.scale, shape, c, self.acceptance(), depth)
        best = {m: max(tps, key=lambda k: (tps[k], -k)) for m, tps in self.curves.items()}
        ratio = self.curves["peagle"][best["peagle"]] / self.curves["eagle3"][best["eagle3"]]
        self.figure = prediction_figure(self.curves, predict.step_split(self.scale, shape, c, best, depth),
                                        title=f"{shape}, c = {c}, acceptance: {self.source.value}; "
                                              f"P-EAGLE / EAGLE-3 = {ratio:.2f}x")
        self.redraws += 1
        _show_in(self.output, self.figure)

    def _ipython_display_(self) -> None:
        display(self.widget)
