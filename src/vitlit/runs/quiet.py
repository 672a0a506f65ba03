"""Lightning's notes and warnings that a vitlit user cannot act on, left out while the CLI runs.

The ``around_run`` hook of pyproject.toml's ``vitlit.hooks`` entry point (`vitlit.config.hooks`); outside a run,
Lightning's logging and Python's warning filters are left as they were.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def around_run(subcommand: str) -> Iterator[None]:
    """Leave out `quiet_warnings` and `QuietNotes` while ``subcommand`` runs."""
    notes = QuietNotes()
    notes.install()
    try:
        with warnings.catch_warnings():
            for message in quiet_warnings(subcommand):
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        notes.restore()


def quiet_warnings(subcommand: str) -> list[str]:
    """Messages of Lightning's warnings that a user cannot act on, for ``warnings.filterwarnings`` during a run."""
    return [
        # main(args) from Python (a notebook's kernel, pytest) is exactly what Lightning's warning is about.
        "LightningCLI's args parameter is intended",
        # Short epochs: vitlit.runs.callbacks.LogEveryEpoch lowers log_every_n_steps to the epoch's length instead.
        r"The number of training batches \(\d+\) is smaller than",
        # The model summary's size estimate assumes fp32 under mixed precision and says so on every run.
        r"Precision .* is not supported by the model summary",
        # Lightning's own use of a torch API that torch deprecated.
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        # An evaluation saves no checkpoints: the checkpoint callbacks' saved state is of no use to it.
        *(["The dirpath has changed from"] if subcommand != "fit" else []),
    ]


class QuietNotes(logging.Filter):
    """Drop Lightning's log notes that a vitlit user cannot act on, while the CLI runs (`install`, `restore`).

    Every run would start with Lightning's advertisements for its cloud services; a SIGTERM would add ``Received
    SIGTERM: 15`` and ``An SIGTERMException was raised with message: ...`` (`vitlit.runs.interrupts.ResumableStop`
    prints one line with the resume command instead). Lightning's logging is left as it was outside the CLI.
    """

    LOGGERS = ("lightning.pytorch.trainer.connectors.signal_connector", "lightning.pytorch.utilities.rank_zero")
    NOTES = ("💡 Tip:", "An SIGTERMException was raised", "Received SIGTERM")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(note in record.getMessage() for note in self.NOTES)

    def install(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)

    def restore(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)
