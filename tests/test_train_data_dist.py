"""`train-data` under torchrun: two CPU processes (gloo) write one folder that reads back as one dataset."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch.distributed as dist

from peagle_lab.train.data import load_split

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with the gloo backend is not available")

SIZES = ["--num-magpie", "8", "--max-code-prompts", "6", "--max-math-prompts", "6", "--max-writing-prompts", "6",
         "--response-max-tokens", "6", "--concurrency", "8", "--heldout-fraction", "0.2", "--shard-rows", "4"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(out, nproc: int = 2) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr",
           "127.0.0.1", "--master-port", str(_free_port()), "-m", "peagle_lab.train.cli", "data", "--tiny",
           "--device", "cpu", "--no-progress", "--seed", "5", "--out", str(out), *SIZES]
    env = dict(os.environ, OMP_NUM_THREADS="1")  # two ranks on two cores: one thread each
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    a, b = tmp_path_factory.mktemp("rank_data_a"), tmp_path_factory.mktemp("rank_data_b")
    _torchrun(a)
    _torchrun(b)
    return a, b


def test_both_ranks_write_shards_and_the_card_lists_them(two_runs):
    out, _ = two_runs
    card = json.loads((out / "card.json").read_text())
    assert card["world_size"] == 2 and card["seed"] == 5 and card["config"]["seed"] == 5
    listed = [e for s in ("train", "heldout") for e in card["shards"][s]]
    assert {e["rank"] for e in card["shards"]["train"]} == {0, 1}
    assert sorted(e["file"] for e in listed) == sorted(f.name for f in out.glob("*.jsonl"))
    assert {f.name[:9] for f in out.glob("train-*.jsonl")} == {"train-r00", "train-r01"}
    tp = card["throughput"]
    assert [r["rank"] for r in tp["per_rank"]] == [0, 1] and all(r["tokens"] > 0 for r in tp["per_rank"])
    assert tp["total"]["tokens"] == sum(r["tokens"] for r in tp["per_rank"])
    assert card["splits"]["train"]["greedy_share"] >= 0.7


def test_the_folder_reads_back_with_disjoint_rank_shards(two_runs):
    out, _ = two_runs
    card = json.loads((out / "card.json").read_text())
    for split in ("train", "heldout"):
        rows = load_split(out, split)
        assert len(rows) == card["splits"][split]["examples"] == sum(e["rows"] for e in card["shards"][split])
    by_rank = {}
    for e in card["shards"]["train"] + card["shards"]["heldout"]:
        by_rank.setdefault(e["rank"], set()).update(
            json.loads(line)["prompt"] for line in (out / e["file"]).read_text().splitlines())
    assert by_rank[0] and by_rank[1] and not by_rank[0] & by_rank[1]  # each prompt answered by one rank
    train, held = load_split(out, "train"), load_split(out, "heldout")
    assert not {r.group for r in train} & {r.group for r in held}


def test_the_same_seed_gives_the_same_rows(two_runs):
    a, b = two_runs
    for split in ("train", "heldout"):
        assert load_split(a, split) == load_split(b, split)
