"""A fit stopped by Ctrl-C, SIGTERM or a guard saves a checkpoint and ends in one line with the command that resumes it.

Python raises KeyboardInterrupt wherever the main thread happens to be, and where that is inside a finaliser or a C
callback it is swallowed and training goes on. Lightning's SIGTERM handling instead sets a flag the loops check
between steps; `ResumableStop` routes the first Ctrl-C there (a second one interrupts at once; POSIX and main
thread only, where signal handlers live). Under DDP, `StopTogetherOnSigterm` takes over SIGTERM: every process must
stop at the same step. Both are in the shared defaults of run operations (``runs/defaults.yaml``); without them a
run keeps Lightning's own handling.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit.private import kill_started_processes
from vitlit.runs.folders import checkpoint_folders, config_saver
from vitlit.runs.nonfinite import TrainingHalted


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


def resume_hint(trainer: Trainer, program: str = "vitlit") -> str:
    """The command that resumes a stopped run (its checkpoint was saved on the way out), or why there is none."""
    saved = [p for folder in checkpoint_folders(trainer) for p in folder.glob("*.ckpt")]
    # The logger's folder, not trainer.log_dir: under DDP that is a collective, and this runs on the way out.
    log_dir = trainer.logger.log_dir if trainer.logger is not None else None
    if not saved or log_dir is None:
        return "no checkpoint was written, so there is nothing to resume."
    saver = config_saver(trainer)
    config = Path(log_dir) / (saver.config_filename if saver is not None else "config.yaml")
    newest = max(saved, key=lambda p: (p.name == "last.ckpt", p.stat().st_mtime))  # last.ckpt: written on the way out
    return f"resume with: python -m {program} fit --config {config} --ckpt_path {newest}"


class ResumableStop(Callback):
    """A fit stopped by a signal or a guard ends in one line with the command that resumes it, and a shell status.

    The first Ctrl-C of a fit stops it like a SIGTERM (`FirstInterruptAsSigterm`): at the next step, with
    ``last.ckpt`` saved on the way out (``save_on_exception``). The process exits with the shell's status for the
    signal (130 for Ctrl-C, 143 for SIGTERM), or 1 for a run a guard halted (`TrainingHalted`), after one line that
    says where it stopped and how to resume (the CLI drops Lightning's own notes about the signal).
    The CLI calls `before_run`, `on_exception` and `teardown` (`vitlit.cli.VitLitCLI`).

    Args:
        program: The command named in the lines.
    """

    def __init__(self, program: str = "vitlit") -> None:
        self.program = program
        self.interrupts = FirstInterruptAsSigterm(program)
        self._line: str | None = None

    def before_run(self, trainer: Trainer, pl_module: LightningModule, subcommand: str, ckpt: Any) -> None:
        self._line, self.interrupts.signal_name = None, None
        if subcommand == "fit":
            self.interrupts.install()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning calls this inside the run, the CLI again with what leaves it (after a second Ctrl-C that is
        # Lightning's sys.exit(1), not the KeyboardInterrupt): the status is set on the last, the line kept for
        # `teardown`, when the checkpoint callbacks (which Lightning calls last) have saved last.ckpt.
        if isinstance(exception, TrainingHalted):
            self._line, status = f"{self.program}: error: {exception}", 1
        elif trainer.interrupted and isinstance(exception, (SystemExit, KeyboardInterrupt)):
            name = self.interrupts.signal_name or ("SIGTERM" if isinstance(exception, SIGTERMException) else "SIGINT")
            status = 128 + signal.Signals[name].value
            self._line = self._line or (
                f"{self.program}: interrupted by {name} at epoch {trainer.current_epoch}, step {trainer.global_step}"
            )
        else:
            return
        if isinstance(exception, SystemExit):
            exception.code = status

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.interrupts.restore()
        if self._line is not None and trainer.is_global_zero:  # one line, not one per DDP process
            print(f"{self._line}; {resume_hint(trainer, self.program)}", file=sys.stderr)
        self._line = None
