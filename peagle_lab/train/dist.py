"""Several processes, one GPU each, through ``torchrun`` (PyTorch's own launcher and DDP).

``torchrun --nproc-per-node N -m peagle_lab.train.cli {data,train} ...`` starts N copies;
each reads ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` from the environment, and
:func:`init_distributed` joins them into one process group (NCCL on GPUs, gloo on CPUs, so
CI can run two CPU processes). Without torchrun the same code runs as a world of one and
none of these helpers communicates.

Who does what:

* data generation shards its prompts by rank (:func:`shard`), each rank writes its own
  files, rank 0 writes the card after a :func:`barrier`;
* training wraps the loss module in ``DistributedDataParallel``: every rank computes a
  slice of the global batch, DDP averages the gradients, and the loss is normalised by the
  *global* count (:func:`all_reduce_sum`), so N processes make the same update as one
  process on the whole batch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Sequence

import torch
import torch.distributed as dist

# How long a collective waits for the slowest rank. Ranks legitimately drift apart by minutes
# (data shards that finish at different times, rank 0 evaluating while the others wait), well past
# NCCL's 10-minute default, and a timeout then kills a run that was merely waiting.
GROUP_TIMEOUT = timedelta(hours=12)


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """Rank 0 writes shared files (cards, checkpoints, summaries) and prints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def env_world() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from torchrun's environment (a world of one without it)."""
    try:
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), \
            int(os.environ.get("LOCAL_RANK", 0))
    except ValueError as e:
        raise ValueError(f"RANK / WORLD_SIZE / LOCAL_RANK must be integers (torchrun sets them): {e}") from None


def init_distributed(device: torch.device | str) -> DistInfo:
    """Join the torchrun job (if any) and pick this rank's device.

    Args:
        device: the device asked for; under torchrun a CUDA device becomes ``cuda:LOCAL_RANK``.

    Raises:
        ValueError: more ranks on this host than visible GPUs.
    """
    rank, world, local = env_world()
    device = torch.device(device)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", local if world > 1 else torch.cuda.current_device())
        if world > 1:
            if local >= torch.cuda.device_count():
                raise ValueError(f"LOCAL_RANK={local} but only {torch.cuda.device_count()} GPU(s) are visible; "
                                 "use --nproc-per-node ≤ the GPU count")
            device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=GROUP_TIMEOUT,
                                device_id=device if device.type == "cuda" else None)
    return DistInfo(rank, world, local, device)


def rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)`` of the joined process group; ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    """Wait for every rank (a no-op in a world of one)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum ``t`` over ranks in place and return it (device-side: no host synchronisation)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_reduce_min(value: float) -> float:
    """The smallest ``value`` over ranks (used once, to agree on a step count)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        t = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return float(t.item())
    return value


def all_gather_objects(obj) -> list:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in a world of one."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out
    return [obj]


def shard(items: Sequence, rank: int, world_size: int) -> list:
    """Rank ``rank``'s share of ``items``: every ``world_size``-th item, so shares differ by ≤ 1.

    >>> shard(list("abcdefg"), 0, 3), shard(list("abcdefg"), 2, 3)
    (['a', 'd', 'g'], ['c', 'f'])
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} is out of range; expected [0, {world_size})")
    return list(items[rank::world_size])


def shutdown() -> None:
    """Leave the process group (safe to call twice or without one)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
