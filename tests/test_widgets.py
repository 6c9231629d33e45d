"""DraftBatchExplorer: moving a slider redraws the draft-batch figure (peagle_lab.lab.widgets)."""
from __future__ import annotations

import pytest

from peagle_lab.lab.layout import SLOT_KINDS
from peagle_lab.lab.widgets import DraftBatchExplorer

PAD = SLOT_KINDS.index("padding")


@pytest.fixture
def explorer(capsys):
    e = DraftBatchExplorer(k=3, accepted=(2, 3), backend="torch")
    capsys.readouterr()  # outside a kernel, display() prints the figure; keep test logs short
    return e


def grid(e):
    return [list(r) for r in e.figure.data[0].z]


def test_initial_figure_is_the_worked_example(explorer):
    assert explorer.redraws == 1
    assert len(grid(explorer)) == 2 and len(grid(explorer)[0]) == 6
    assert explorer.inputs.input_ids.tolist() == [11, 12, 100, 99, 99, 0, 21, 22, 23, 200, 99, 99]
    assert "K=3, c=2, accepted [2, 3]" in explorer.figure.layout.title.text


def test_k_slider_widens_rows_and_clamps_accepted(explorer):
    explorer.k_slider.value = 5
    assert explorer.redraws == 2
    assert len(grid(explorer)[0]) == 10  # R = T + K - 1 = 2K
    explorer.k_slider.value = 2
    assert explorer.accepted == [2, 2] and [s.max for s in explorer.accepted_sliders] == [2, 2]
    assert explorer.redraws == 3


def test_c_slider_adds_and_drops_requests(explorer):
    explorer.c_slider.value = 4
    assert explorer.accepted == [2, 3, 2, 3] and len(grid(explorer)) == 4
    assert len(explorer.accepted_box.children) == 4
    explorer.c_slider.value = 1
    assert explorer.accepted == [2] and len(grid(explorer)) == 1


def test_accepted_slider_moves_padding(explorer):
    before = grid(explorer)
    explorer.accepted_sliders[0].value = 0
    after = grid(explorer)
    assert after != before
    assert after[0].count(PAD) == 3 and before[0].count(PAD) == 1  # K - n padding slots


def test_old_sliders_are_detached(explorer):
    old = explorer.accepted_sliders[0]
    explorer.k_slider.value = 4  # rebuilds the accepted sliders
    redraws = explorer.redraws
    old.value = 0
    assert explorer.redraws == redraws


def test_triton_backend_draws_the_same(explorer, capsys):
    other = DraftBatchExplorer(k=3, accepted=(2, 3), backend="triton")  # interpreted on CPU
    capsys.readouterr()
    assert grid(other) == grid(explorer)


@pytest.mark.parametrize("k, accepted", [(0, (0,)), (9, (1,)), (3, ()), (3, (4,)), (3, (1, 1, 1, 1, 1))])
def test_bad_initial_values(k, accepted):
    with pytest.raises(ValueError):
        DraftBatchExplorer(k=k, accepted=accepted)


def test_live_figure_keeps_the_latest_figure():
    from peagle_lab.lab.figures import acceptance_figure
    from peagle_lab.lab.widgets import LiveFigure

    live = LiveFigure(lambda ys: acceptance_figure(list(range(len(ys))), ys))
    assert live.figure is None and live.redraws == 0
    live.update([1.0])
    live.update([1.0, 1.5])
    assert live.redraws == 2 and list(live.figure.data[0].y) == [1.0, 1.5]


def test_training_monitor_redraws_every_n_steps():
    from peagle_lab.train.loop import Callback
    from peagle_lab.lab.widgets import TrainingMonitor

    monitor = TrainingMonitor(every=3)
    assert isinstance(monitor, Callback)
    for s in range(1, 8):
        monitor.on_step({"step": s, "loss": 1.0 / s, "depth_acc": [0.1, 0.0]})
    assert monitor.live.redraws == 3  # steps 1, 3, 6
    assert len(monitor.figure.data[0].x) == 6
    monitor.finish()
    assert len(monitor.figure.data[0].x) == 7 and len(monitor.history) == 7
    with pytest.raises(ValueError):
        TrainingMonitor(every=0)


def test_training_monitor_follows_a_real_run(tmp_path):
    from peagle_lab.train import TrainConfig, Trainer, new_drafter
    from peagle_lab.lab.train_walkthrough import tiny_setup
    from peagle_lab.lab.widgets import TrainingMonitor

    setup = tiny_setup(num_examples=48, num_heldout=8)
    monitor = TrainingMonitor(every=2)
    cfg = TrainConfig(method="peagle", steps=4, batch_size=4, row_len=64, k_train=3, ckpt_every=0,
                      eval_at_end=False, log_every=1)
    Trainer(setup.target, new_drafter(setup.target, "peagle", 1, setup.vocab), setup.train, cfg, tmp_path,
            callbacks=[monitor], progress=False).run()
    assert [m["step"] for m in monitor.history] == [1, 2, 3, 4] and len(monitor.history[0]["depth_acc"]) == 3


def test_live_figure_update_switches_mimetype_before_each_frame():
    # JupyterLab reuses a renderer for an update of the same mimetype, and plotly's renderer
    # keeps its first plot: each frame must follow a bundle of another mimetype.
    from peagle_lab.lab.figures import acceptance_figure
    from peagle_lab.lab.widgets import LiveFigure

    class Handle:
        def __init__(self):
            self.sent = []

        def update(self, bundle, raw):
            assert raw
            self.sent.append(sorted(k for k in bundle if k != "text/plain"))

    live = LiveFigure(lambda ys: acceptance_figure(list(range(len(ys))), ys))
    live._handle = handle = Handle()
    live.update([1.0])
    live.update([1.0, 1.5])
    plotly = "application/vnd.plotly.v1+json"
    assert [plotly in kinds for kinds in handle.sent] == [False, True, False, True]
