"""Checks of what only some runs are given, imported where they are given: a default run loads none of this.

Each refuses a value in one line (`vitlit.errors.ConfigError`) before anything is built on it.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from vitlit.errors import ConfigError


def check_loss(loss: Any, num_classes: int, label_smoothing: float | None = None) -> None:
    """Refuse a loss of the user's that does not take (logits, class indices) and give one number, or smoothing.

    Tried on what it will get, before the run starts: a regression loss or ``reduction: none`` would otherwise fail,
    or silently train on something else, at the first step. ``label_smoothing`` is the default cross-entropy's.
    """
    if label_smoothing:
        raise ConfigError(
            f"label_smoothing={label_smoothing} is for the default cross-entropy, but loss is "
            f"{type(loss).__name__}; give the smoothing to that loss and pass --model.label_smoothing 0."
        )
    try:
        with warnings.catch_warnings():  # MSELoss warns of broadcasting before it fails: the line below says it
            warnings.simplefilter("ignore")
            value = loss(torch.zeros(2, num_classes), torch.zeros(2, dtype=torch.long))
        problem = None if value.numel() == 1 else f"it gives shape {tuple(value.shape)}, not one number"
    except Exception as err:
        problem = str(err).splitlines()[0][:120]
    if problem:
        raise ConfigError(
            f"loss {type(loss).__name__} does not fit logits of shape (batch, {num_classes}) and class indices "
            f"({problem}); use a classification loss such as torch.nn.CrossEntropyLoss."
        )
