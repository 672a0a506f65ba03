"""A callback that kills its own process with SIGKILL, for the kill-and-resume test (imported by the subprocess)."""

from __future__ import annotations

import os
import signal

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
            os.kill(os.getpid(), self.signum)
