"""Callbacks that kill or signal their own process, for the kill-and-resume tests (imported by the subprocess)."""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer


class KillAtEpoch(Callback):
    """SIGKILL the process when training epoch ``epoch`` starts, if VITLIT_TEST_KILL is set (only in the subprocess).

    Args:
        epoch: The epoch whose start is never reached alive; every earlier epoch has written its checkpoints.
    """

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch == self.epoch and os.environ.get("VITLIT_TEST_KILL"):
            os.kill(os.getpid(), signal.SIGKILL)


class SignalInValidation(Callback):
    """Send ``signum`` to the own process during the first validation batch of epoch ``epoch`` (VITLIT_TEST_KILL).

    Args:
        signum: The signal number, e.g. 15 for SIGTERM.
        epoch: The epoch whose validation is interrupted.
    """

    def __init__(self, signum: int = 15, epoch: int = 1) -> None:
        self.signum = signum
        self.epoch = epoch

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: object, **kwargs: object):
        if trainer.current_epoch == self.epoch and not trainer.sanity_checking and os.environ.get("VITLIT_TEST_KILL"):
            signal.raise_signal(self.signum)


class DieWhileSavingLast(Callback):
    """SIGKILL the process half-way through writing ``last.ckpt`` in epoch ``epoch`` (VITLIT_TEST_KILL).

    Wraps the trainer's CheckpointIO: the checkpoint is serialised, half of its bytes reach the file, then the
    process dies, exactly as it would if the kill came during the write.

    Args:
        epoch: The epoch whose save of ``last.ckpt`` never completes.
    """

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch != self.epoch or trainer.sanity_checking or not os.environ.get("VITLIT_TEST_KILL"):
            return
        checkpoint_io = trainer.strategy.checkpoint_io
        save = checkpoint_io.save_checkpoint

        def dying_save(checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
            if Path(path).name == "last.ckpt":
                real_save = torch.save

                def half_then_die(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
                    buffer = io.BytesIO()
                    real_save(obj, buffer, *args, **kwargs)
                    f.write(buffer.getvalue()[: buffer.tell() // 2])
                    f.flush()
                    os.kill(os.getpid(), signal.SIGKILL)

                torch.save = half_then_die
            save(checkpoint, path, storage_options)

        checkpoint_io.save_checkpoint = dying_save


class SigtermOnce(Callback):
    """SIGTERM the own process at the end of the first training epoch of the first run that finds no ``marker``.

    For the sweep test: the first trial is stopped the way a cluster pre-empts a job; the trials after it run on.

    Args:
        marker: A file created when the signal is sent.
    """

    def __init__(self, marker: str) -> None:
        self.marker = Path(marker)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.marker.exists():
            self.marker.touch()
            signal.raise_signal(signal.SIGTERM)


class SignalOneRank(Callback):
    """Send ``signum`` to the process of global rank ``rank`` only, after training batch ``batch`` of epoch ``epoch``.

    As ``kill <pid>`` of the command a user started (DDP's rank 0): the other processes learn of it from vitlit, not
    from a signal of their own. Armed by VITLIT_TEST_KILL.

    Args:
        signum: The signal number, e.g. 15 for SIGTERM.
        rank: The global rank whose process is signalled.
        epoch: The epoch of the signal.
        batch: The training batch of that epoch after which it is sent.
    """

    def __init__(self, signum: int = 15, rank: int = 0, epoch: int = 1, batch: int = 2) -> None:
        self.signum = signum
        self.rank = rank
        self.epoch = epoch
        self.batch = batch

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, i: int):
        armed = os.environ.get("VITLIT_TEST_KILL") and trainer.global_rank == self.rank
        if armed and trainer.current_epoch == self.epoch and i == self.batch:
            signal.raise_signal(self.signum)
