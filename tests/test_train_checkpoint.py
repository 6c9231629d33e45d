"""Checkpoints: a round trip restores everything; only complete folders are ever resumed."""
from __future__ import annotations

import json

import pytest
import torch

from peagle_lab.testing import tiny_drafter, tiny_target
from peagle_lab.train.checkpoint import TrainState, latest_checkpoint, load_checkpoint, save_checkpoint


def trained_drafter():
    d = tiny_drafter(tiny_target(), "peagle", num_hidden_layers=1, seed=2)
    opt = torch.optim.AdamW(d.parameters(), lr=1e-3)
    d.fc.weight.sum().backward()
    opt.step()
    return d, opt


def test_round_trip(tmp_path):
    d, opt = trained_drafter()
    gen = torch.Generator().manual_seed(9)
    torch.randperm(10, generator=gen)
    state = TrainState(step=7, epoch=1, cursor=3, elapsed_s=1.5, losses=[(1, 2.0), (2, 1.5)], total_steps=20,
                       tokens=4096, curve=[{"step": 5, "depth_acc": [0.5]}])
    cfg = {"method": "peagle", "seed": 0}
    path = save_checkpoint(tmp_path, d, opt, gen, state, cfg)
    assert latest_checkpoint(tmp_path) == path and path.name == "step-0000007"
    want_next = torch.randperm(10, generator=torch.Generator().set_state(gen.get_state()))

    d2 = tiny_drafter(tiny_target(), "peagle", num_hidden_layers=1, seed=5)
    opt2 = torch.optim.AdamW(d2.parameters(), lr=1e-3)
    gen2 = torch.Generator()
    got = load_checkpoint(path, d2, opt2, gen2, cfg, ("method",))
    assert got == state
    for (k, a), (_, b) in zip(d.state_dict().items(), d2.state_dict().items()):
        assert torch.equal(a, b), k
    (i,) = opt.state_dict()["state"]  # only fc.weight had a gradient
    assert torch.equal(opt2.state_dict()["state"][i]["exp_avg"], opt.state_dict()["state"][i]["exp_avg"])
    assert torch.equal(torch.randperm(10, generator=gen2), want_next)  # the COD stream continues


def test_pruning_and_the_latest_pointer(tmp_path):
    d, opt = trained_drafter()
    gen = torch.Generator()
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, d, opt, gen, TrainState(step=step, losses=[]), {}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-0000004", "step-0000006"]
    assert json.loads((tmp_path / "latest.json").read_text()) == {"step": 6, "dir": "step-0000006"}


def test_incomplete_checkpoints_are_never_resumed(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    d, opt = trained_drafter()
    save_checkpoint(tmp_path, d, opt, torch.Generator(), TrainState(step=3, losses=[]), {})
    # a run killed while writing step 5 leaves a temporary folder and no pointer to it
    (tmp_path / ".step-0000005.abc").mkdir()
    assert latest_checkpoint(tmp_path).name == "step-0000003"
    (tmp_path / "step-0000003" / "trainer.json").unlink()
    assert latest_checkpoint(tmp_path) is None


def test_mismatched_config_is_refused(tmp_path):
    d, opt = trained_drafter()
    path = save_checkpoint(tmp_path, d, opt, torch.Generator(), TrainState(step=1, losses=[]), {"k_train": 8})
    with pytest.raises(ValueError, match="k_train=8"):
        load_checkpoint(path, d, opt, torch.Generator(), {"k_train": 6}, ("k_train",))
