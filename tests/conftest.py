"""Shared fixtures: hypothesis profiles, seeded RNG, tiny models, the SmolLM2 default."""
from __future__ import annotations

import os

import torch

# Without a GPU, backend="triton" runs Triton's interpreter (peagle_lab.kernels.backend turns
# it on when it imports Triton); set here too, at collection start, in case a test module
# imports triton before peagle_lab.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings

# "ci" keeps a fixed example budget and derandomised draws so CI time is bounded and
# reproducible; "dev" draws fresh examples; "long" is the on-demand deep profile.
settings.register_profile(
    "ci", max_examples=25, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile("long", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; the CPU twin of this test runs instead")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def smollm2():
    """The embedded default (SmolLM2-135M-Instruct, float32, CPU) and its tokenizer."""
    from peagle_lab import zoo

    return zoo.load_default(quiet=True)

