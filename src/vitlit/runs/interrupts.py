"""Under DDP, stop every process at the same step after a SIGTERM (or the first Ctrl-C, which the CLI routes to one).

Part of the shared defaults of run operations (``runs/defaults.yaml``); a single process keeps Lightning's own
handling.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit.private import kill_started_processes


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
    prints the resume command. A single process keeps Lightning's own handling. Part of `vitlit.Trainer`.
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
