"""The one CUDA-graph replay timer (peagle_lab.bench.timing) and the code that times with it."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.bench import scale_moe
from peagle_lab.bench.timing import replay_ms


def test_cpu_times_plain_calls_after_one_untimed_call():
    calls = []
    ms = replay_ms(lambda: calls.append(1), "cpu", reps=5)
    assert len(calls) == 6 and ms >= 0.0


def test_the_median_is_returned(monkeypatch):
    ticks = iter([0.0, 0.001, 1.0, 1.010, 2.0, 2.002])  # calls of 1, 10 and 2 ms
    monkeypatch.setattr("peagle_lab.bench.timing.time.perf_counter", lambda: next(ticks))
    assert replay_ms(lambda: None, torch.device("cpu"), reps=3) == pytest.approx(2.0)


def test_reps_below_one_are_refused():
    with pytest.raises(ValueError, match="reps=0"):
        replay_ms(lambda: None, "cpu", reps=0)


def test_the_moe_layer_and_the_attention_script_share_the_timer():
    from peagle_lab.testing import script_module

    assert scale_moe.replay_ms is replay_ms
    assert script_module("gpu/decode_attention_gpu.py").replay_ms is replay_ms


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_replays_a_captured_graph():
    x = torch.zeros(1024, device="cuda")
    assert replay_ms(lambda: x.add_(1), "cuda", reps=4) > 0.0
    torch.cuda.synchronize()
    assert x[0].item() == 2 + 1 + 4  # two warm-up calls, the untimed replay, four timed ones (capture runs nothing)
