"""What happens around a run: the signals that stop a fit between steps, and the log lines the CLI leaves out.

Beside the main path (`vitlit.cli`), so that it reads top to bottom: a first Ctrl-C (or SIGHUP, Ctrl-Break) becomes
Lightning's SIGTERM stop at the next step, with ``last.ckpt`` written; `quiet` leaves out what a user cannot act on
and cleans every other line (`vitlit.text.clean`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from vitlit.text import clean, tell

#: The signal that stopped this process's fit (``signal_name``, e.g. ``SIGINT``), ``None`` while none has.
STOP = SimpleNamespace(signal_name=None)
#: Lightning's log lines a vitlit user cannot act on (advertisements, what the resume line says better, the seed that
#: the run card keeps), and the loggers they come from.
QUIET = ("💡 Tip:", " was raised with message: ", "Received SIGTERM", "attempting graceful shutdown", "Seed set to",
         "Finished batch size finder", "`weights_only` was not set", "/.scale_batch_size_")  # fmt: skip
QUIET_LOGGERS = [
    f"lightning.{name}"
    for name in (
        "pytorch.utilities.rank_zero",
        "pytorch.trainer.call",
        "pytorch.trainer.connectors.signal_connector",
        "fabric.utilities.seed",
        "pytorch.tuner.batch_size_scaling",
        "pytorch.trainer.connectors.checkpoint_connector",
    )
]


@contextlib.contextmanager
def interrupts_stop_the_fit() -> Iterator[None]:
    """While a fit runs, the first Ctrl-C (or SIGHUP, or Ctrl-Break: `stop_signals`) stops it at the next step.

    Python raises KeyboardInterrupt wherever the main thread happens to be (inside an optimizer step, or swallowed in a
    finaliser); Lightning's SIGTERM handling stops between steps and saves ``last.ckpt`` on the way out, so the signal
    becomes a SIGTERM raised in this process (``raise_signal``: Windows' ``os.kill`` would end it at once). Before
    Lightning listens (data setup), and at a second Ctrl-C, it stops at once. Main thread only.
    """
    STOP.signal_name = None

    def stop(signum: int, frame: Any) -> None:
        listening = signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)  # Lightning's handler is in
        if STOP.signal_name is not None and signal.Signals(signum).name == "SIGHUP":
            return  # a hangup does not insist: a closed terminal is met by the kernel's signal and the bar's writes
        if STOP.signal_name is not None or not listening:
            raise KeyboardInterrupt
        STOP.signal_name = signal.Signals(signum).name
        tell("vitlit: stopping at the next step; Ctrl-C again to stop at once")
        signal.raise_signal(signal.SIGTERM)

    handled = stop_signals() if threading.current_thread() is threading.main_thread() else ()
    previous = {s: signal.signal(s, stop) for s in handled}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def stop_signals() -> tuple[signal.Signals, ...]:
    """What stops a fit at the next step: Ctrl-C, and SIGHUP (POSIX) or Ctrl-Break (Windows) where they exist."""
    return tuple(getattr(signal, name) for name in ("SIGINT", "SIGHUP", "SIGBREAK") if hasattr(signal, name))


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Leave out Lightning's notes and warnings a user cannot act on, while the CLI runs (`QUIET`); clean the rest.

    Cleaning (`vitlit.text.clean`) shows escapes and redacts credentials, in vitlit's own ``rank_zero_info`` lines
    too. Every entry is listed, with its reason, in docs/training.md: "What the command line leaves out of the log".
    """

    def note(record: logging.LogRecord) -> bool:  # a callable is a filter too
        record.msg, record.args = clean(record.getMessage()), None
        return not any(text in record.msg for text in QUIET)

    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    for logger in loggers:
        logger.addFilter(note)
    with warnings.catch_warnings():
        for message in ("LightningCLI's args parameter is intended",  # main(args) from Python: a notebook, pytest
                        r"Precision .* is not supported by the model summary", "The dirpath has changed from",
                        r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # Lightning's own, of torch's API
                        # A resume writes into its own run's folder; a mid-epoch one is said in vitlit's words
                        # (`vitlit.runs.checkpoint_io.RNGStateCheckpoint`: not bit-identical, end-of-epoch ones are).
                        r"Checkpoint directory .* exists and is not empty", r".*resuming from a checkpoint that ended",
                        r"(?s).*was deprecated in v4",  # jsonargparse's, of what Lightning calls
                        # LitData's streams are sharded per worker by LitData itself, which Lightning cannot know.
                        r"Your `IterableDataset` has `__len__` defined"):  # fmt: skip
            warnings.filterwarnings("ignore", message=message)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeFilter(note)
