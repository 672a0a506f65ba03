"""Every private attribute of Lightning or PyTorch that the runs part reads or writes, in one place.

The core's are in `vitlit.private`; these serve the runs part alone and go with it. Each has no public equivalent
today; ``tests/test_private.py`` fails, naming the attribute, if a release renames or removes one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch import Callback, Trainer
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


def state_key(callback: Callback, **settings: Any) -> str:
    """Lightning's key for a callback's state in checkpoints, made from its class and ``settings``.

    Two callbacks of one class (ModelCheckpoints with other settings) need distinct keys; Lightning builds them with
    the callback's ``_generate_state_key``.
    """
    return callback._generate_state_key(**settings)


#: The attributes through which PyTorch's GradScaler tells a fused optimizer's next step to skip itself (a non-zero
#: ``found_inf``) and that the gradients are not scaled (``grad_scale`` None).
_SKIP_FLAGS = ("found_inf", "grad_scale")


def skip_next_step_if(optimizer: torch.optim.Optimizer, found_inf: torch.Tensor) -> None:
    """Make a fused optimizer's next step a no-op where ``found_inf`` is non-zero, on the device (no host sync)."""
    optimizer.found_inf = found_inf.float()
    optimizer.grad_scale = None


def skip_flag(optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
    """The ``found_inf`` flag the optimizer's last step was given (`skip_next_step_if`, then the clipping), or None."""
    return vars(optimizer).get("found_inf")


def clear_skip_flags(optimizer: torch.optim.Optimizer) -> None:
    """Remove what `skip_next_step_if` set, so that the next step is an ordinary one."""
    for name in _SKIP_FLAGS:
        if name in vars(optimizer):
            delattr(optimizer, name)


def is_local_path(path: str | Path) -> bool:
    """Whether ``path`` is on the local file system (not ``s3://``, ``gs://``, ...), as Lightning decides it."""
    return _is_local_file_protocol(path)


def kill_started_processes(trainer: Trainer, signum: int) -> None:
    """Pass ``signum`` on to the processes the Trainer's launcher started (none under torchrun or SLURM)."""
    launcher = trainer.strategy.launcher
    if launcher is not None:
        launcher.kill(signum)
