"""What runs under DDP need: every process stopping at the same step, and sharded results put back in data order.

`StopTogetherOnSigterm` is listed in ``configs/scale/ddp.yaml``: a single process keeps Lightning's own SIGTERM
handling. Every evaluation shard in vitlit (from either data source) holds the positions ``rank, rank + world_size,
...`` of its split (`vitlit.data.ImageClassificationDataModule.sampler`), which `interleave` relies on.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit.runs.private import kill_started_processes


class StopTogetherOnSigterm(Callback):
    """Under DDP, stop every process at the same step after a SIGTERM (or first Ctrl-C) reaches any of them.

    Lightning's SIGTERM handler broadcasts from inside the signal handler. Python runs a handler between two
    bytecodes of whatever the process is doing, so that broadcast pairs up with whichever collective the other
    processes are in (the per-step broadcast of the flag, or DDP's gradient all-reduce), and the processes wait for
    each other for ever (a SIGTERM to a 2-process run hung until killed). This handler only notes the
    signal and passes it on to the processes this one started (Lightning's launcher, as Lightning's handler does);
    after every training batch all processes agree whether any of them was signalled (one all-reduce of a flag,
    where Lightning's loop already reads one flag per step under DDP), and if so all raise Lightning's
    ``SIGTERMException`` at that step: ``last.ckpt`` is saved on the way out (``save_on_exception``) and vitlit
    prints the resume command. A single process keeps Lightning's own handling.
    """

    def __init__(self) -> None:
        self.signalled = False
        self._active = False

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.signalled, self._active = False, False

    # Lightning installs its handlers just before the sanity check (or training, without one); these hooks run after
    # that, and Lightning puts back the handlers it found when the run ends.
    def on_sanity_check_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._install(trainer)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._install(trainer)

    def _install(self, trainer: Trainer) -> None:
        if self._active or trainer.world_size == 1 or os.name != "posix":
            return
        if threading.current_thread() is not threading.main_thread():
            return

        def note(signum: int, frame: FrameType | None) -> None:
            if not self.signalled:
                kill_started_processes(trainer, signum)  # as Lightning's own handler does
            self.signalled = True

        signal.signal(signal.SIGTERM, note)
        self._active = True

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        if self._active and trainer.strategy.reduce_boolean_decision(self.signalled, all=False):
            raise SIGTERMException()


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
