"""What vitlit adds to Lightning's data parallelism (DDP): the effective batch, and collecting sharded results.

Lightning's strategies do the work: one process per device, gradients averaged across them, samplers sharding
each epoch, metrics synchronised at epoch ends. vitlit's own code reads data and writes files, so it needs two more
things: how many images one optimizer step sees in all, and the pieces of a sharded result (``predict``) put back
in data order on the process that writes them. Every evaluation shard in vitlit (DataLoader or device path) holds
the positions ``rank, rank + world_size, ...`` of its split, which `interleave` relies on.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch import Trainer


def effective_batch(trainer: Trainer, batch_size: int) -> tuple[int, str]:
    """Images per optimizer step over all processes, and how that number is made up, for the log and the run card.

    Args:
        trainer: The Trainer (its accumulation, devices per node and nodes).
        batch_size: Images per batch on one device.

    Returns:
        ``(total, parts)``, e.g. ``(512, "64 per device x 2 accumulated x 2 devices x 2 nodes")``.
    """
    accumulate = int(trainer.accumulate_grad_batches)
    devices = int(trainer.num_devices)
    nodes = int(trainer.num_nodes)
    total = batch_size * accumulate * devices * nodes
    parts = f"{batch_size} per device x {accumulate} accumulated x {devices} device{'s' * (devices != 1)}"
    return total, f"{parts} x {nodes} node{'s' * (nodes != 1)}"


def all_gather_objects(obj: Any, trainer: Trainer) -> list[Any]:
    """Every process's ``obj``, in rank order, on every process; ``[obj]`` in a single process.

    A collective: every process must call it at the same point. Objects are pickled (any size per process, unlike
    ``trainer.strategy.all_gather``, which needs equal tensor shapes).
    """
    if trainer.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
        return [obj]
    gathered: list[Any] = [None] * trainer.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def interleave(shards: list[torch.Tensor]) -> torch.Tensor:
    """Put per-process shards back in data order: shard ``r`` of ``w`` holds positions ``r, r + w, r + 2w, ...``.

    Args:
        shards: One tensor per rank, in rank order, with the items along the first dimension (lengths may differ
            by one, as in vitlit's unrepeated evaluation shards).
    """
    if len(shards) == 1:
        return shards[0]
    world_size = len(shards)
    out = shards[0].new_empty((sum(len(s) for s in shards), *shards[0].shape[1:]))
    for rank, shard in enumerate(shards):
        positions = out[rank::world_size]
        if len(positions) != len(shard):
            raise ValueError(
                f"shard {rank} of {world_size} holds {len(shard)} items, but positions {rank}, {rank + world_size}, "
                f"... of {len(out)} are {len(positions)}; a shard holds the items {world_size} apart from its rank on."
            )
        out[rank::world_size] = shard
    return out
