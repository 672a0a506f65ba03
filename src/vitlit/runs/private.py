"""Every private attribute of Lightning or PyTorch that the runs part reads or writes, in one place.

The core's are in `vitlit.private`; these serve the runs part alone and go with it. Each has no public equivalent
today; ``tests/test_private.py`` fails, naming the attribute, if a release renames or removes one.
"""

from __future__ import annotations

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import BatchSizeFinder, ModelCheckpoint
from lightning.pytorch.utilities.parsing import lightning_setattr


def set_checkpoint_interval(callback: ModelCheckpoint, every_n_train_steps: int) -> None:
    """Change a ModelCheckpoint's step interval after construction.

    ``every_n_train_steps`` is a constructor argument only, but a fraction of the run becomes a step count only once
    the Trainer knows the run's length (`vitlit.runs.snapshots.Snapshots`).
    """
    callback._every_n_train_steps = every_n_train_steps


def cap_batch_search(finder: BatchSizeFinder, largest: int) -> None:
    """Lower a BatchSizeFinder's ``max_val`` after construction.

    ``max_val`` is a constructor argument only, but the training split's size, which no batch should pass, is known
    only once the data is set up (`vitlit.runs.batch_size.BatchSizeSearch`).
    """
    finder._max_val = min(finder._max_val, largest)


def set_batch_size(trainer: Trainer, batch_size: int) -> None:
    """Set the data module's batch size during a fit and rebuild the data loaders, as Lightning's finder does.

    Lightning's power search stops at ``max_val`` with the doubled size it never tried; `BatchSizeSearch` goes back
    to the last size that ran, and the loaders in use must follow (``_reset_dataloaders``, the tuner's own).
    """
    from lightning.pytorch.tuner.batch_size_scaling import _reset_dataloaders

    lightning_setattr(trainer.lightning_module, "batch_size", batch_size)
    _reset_dataloaders(trainer)


def kill_started_processes(trainer: Trainer, signum: int) -> None:
    """Pass ``signum`` on to the processes the Trainer's launcher started (none under torchrun or SLURM)."""
    launcher = trainer.strategy.launcher
    if launcher is not None:
        launcher.kill(signum)
