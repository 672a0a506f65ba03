"""Ctrl-C and SIGTERM during ``fit`` stop at the next safe point of the loop, with a checkpoint to resume from.

Python raises KeyboardInterrupt wherever the main thread happens to be, and where that is inside a finaliser or a C
callback it is swallowed and training goes on. Lightning's SIGTERM handling instead sets a flag the loops check
between steps; the first Ctrl-C is routed there. A second Ctrl-C interrupts at once. POSIX only (on Windows a
SIGTERM to oneself terminates the process) and main thread only (signal handlers live there).

Under DDP, `vitlit.runs.interrupts.StopTogetherOnSigterm` takes over SIGTERM: every process must stop at the same step.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from lightning.pytorch.utilities import rank_zero_only


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


class QuietInterruptionNotes(logging.Filter):
    """Drop Lightning's notes that a vitlit user cannot act on, while the CLI runs.

    On a SIGTERM, or the Ctrl-C that vitlit routes to one, vitlit prints one line with the resume command instead
    of ``Received SIGTERM: 15`` and ``An SIGTERMException was raised with message: , ...``; and every run would
    start with Lightning's advertisement for its cloud logger. Added to Lightning's two loggers by `install` and
    removed by `restore`, so Lightning's logging is left as it was outside vitlit's CLI.
    """

    LOGGERS = ("lightning.pytorch.trainer.connectors.signal_connector", "lightning.pytorch.utilities.rank_zero")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        notes = ("An SIGTERMException was raised", "💡 Tip:")
        return "Received SIGTERM" not in message and not message.startswith(notes)

    def install(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)

    def restore(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)
