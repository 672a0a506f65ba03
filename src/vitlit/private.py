"""Every private attribute of Lightning or PyTorch that vitlit touches, in one place.

Each has no public equivalent today. Checked against Lightning 2.5 and 2.6 and PyTorch 2.4 to 2.14;
``tests/test_private.py`` fails, naming the attribute, if a release renames or removes one, so a version bump shows
here first instead of as a silent change in behaviour.
"""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import ModelCheckpoint


def set_checkpoint_interval(callback: ModelCheckpoint, every_n_train_steps: int) -> None:
    """Change a ModelCheckpoint's step interval after construction.

    ``every_n_train_steps`` is a constructor argument only, but a fraction of the run becomes a step count only once
    the Trainer knows the run's length (`vitlit.callbacks.Snapshots`).
    """
    callback._every_n_train_steps = every_n_train_steps


def unscales_internally(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` unscales fp16 gradients inside its own step (fused Adam/AdamW/SGD).

    PyTorch marks such optimizers with ``_step_supports_amp_scaling``; the GradScaler reads the same flag.
    """
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))
