"""Optimizer parameter groups and the default learning-rate schedule.

Both are plain PyTorch so that any optimizer or scheduler class can be swapped in from YAML.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from vitlit.errors import ConfigError


def weight_decay_param_groups(model: nn.Module, skip: Iterable[str] = ()) -> list[dict]:
    """Split parameters into a decayed group and a group with ``weight_decay=0``.

    Follows timm's rule (``timm.optim.param_groups_weight_decay``): biases, norm weights (every tensor with one
    dimension) and the names in ``skip`` (timm models list ``pos_embed`` and ``cls_token`` in
    ``model.no_weight_decay()``) are not decayed, since shrinking them towards zero only hurts. Unlike timm's helper
    the decayed group carries no ``weight_decay`` key, so the value configured on the optimizer (in YAML) applies.

    Args:
        model: The network whose trainable parameters are grouped.
        skip: Parameter names (as in ``named_parameters``) that must not be decayed.

    Returns:
        Parameter groups for any ``torch.optim`` optimizer; empty groups are left out.
    """
    skip = set(skip)
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 or name in skip or name.endswith(".bias") else decay).append(param)
    # The names label LearningRateMonitor's curves (lr-AdamW/decay, lr-AdamW/no_decay).
    groups = [{"params": decay, "name": "decay"}, {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"}]
    return [g for g in groups if g["params"]]


class WarmupCosineLR(LambdaLR):
    """Linear warmup to the optimizer's learning rate, then cosine decay to a floor; stepped every optimizer step.

    ``total_steps`` may be left unset: `vitlit.ViTClassifier` then fills in the run's number of optimizer steps
    (``trainer.estimated_stepping_batches``, which accounts for epochs, gradient accumulation and ``max_steps``), so
    the schedule follows ``--trainer.max_epochs`` without a second number to keep in sync.

    Args:
        optimizer: The wrapped optimizer; its learning rates are the peak values.
        warmup_steps: Optimizer steps of linear warmup from ``lr / warmup_steps`` to ``lr`` (0 disables warmup).
        total_steps: Optimizer steps of the whole run, warmup included; ``None`` lets the model fill it in.
        min_lr_ratio: The floor at the end of the cosine, as a fraction of the peak learning rate.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        warmup_steps: int = 500,
        total_steps: int | None = None,
        min_lr_ratio: float = 0.01,
    ) -> None:
        if warmup_steps < 0:
            raise ConfigError(f"warmup_steps={warmup_steps} is negative; set it to 0 or more.")
        if total_steps is not None and total_steps < 1:
            raise ConfigError(f"total_steps={total_steps} must be at least 1; leave it unset to use the run's length.")
        if not 0.0 <= min_lr_ratio <= 1.0:
            raise ConfigError(f"min_lr_ratio={min_lr_ratio} is outside [0, 1]; use e.g. 0.01 for a 1% floor.")
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.min_lr_ratio = min_lr_ratio
        super().__init__(optimizer, self.lr_factor)

    def lr_factor(self, step: int) -> float:
        """Return the multiplier of the peak learning rate at optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.total_steps is None:
            if step == 0:  # LambdaLR evaluates step 0 in its constructor, before the model can fill total_steps in.
                return 1.0
            raise ConfigError("WarmupCosineLR needs total_steps; set it, or let ViTClassifier fill it in.")
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
