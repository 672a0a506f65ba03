"""Ctrl-C and SIGTERM during ``fit`` stop at the next safe point of the loop, with a checkpoint to resume from.

Python raises KeyboardInterrupt wherever the main thread happens to be, and where that is inside a finaliser or a C
callback it is swallowed and training goes on. Lightning's SIGTERM handling instead sets a flag the loops check
between steps; the first Ctrl-C is routed there. A second Ctrl-C interrupts at once. POSIX only (on Windows a
SIGTERM to oneself terminates the process) and main thread only (signal handlers live there).

Under DDP, `StopTogetherOnSigterm` takes over SIGTERM: every process must stop at the same step.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit.private import kill_started_processes


class FirstInterruptAsSigterm:
    """While installed, the first SIGINT becomes a SIGTERM to this process; `signal_name` says which one stopped it."""

    def __init__(self, program: str = "vitlit") -> None:
        self.program = program
        self.signal_name: str | None = None
        self._previous: Any = None
        self._installed = False

    def install(self) -> None:
        """Route the first SIGINT (where possible: POSIX, main thread)."""
        if os.name != "posix" or threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        self._installed = True

    def restore(self) -> None:
        """Put the previous SIGINT handler back."""
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_name is not None:
            raise KeyboardInterrupt
        self.signal_name = "SIGINT"
        if rank_zero_only.rank == 0:  # a terminal's Ctrl-C reaches every DDP process; one line is enough
            print(
                f"{self.program}: stopping after this step and saving a checkpoint; Ctrl-C again to stop at once",
                file=sys.stderr,
            )
        os.kill(os.getpid(), signal.SIGTERM)


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
