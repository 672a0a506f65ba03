"""The run's length in optimizer steps and the fraction of it done: one definition for everything that follows it.

The learning-rate schedule, the random-erasing schedule and the snapshots every N% of the run all need the same
number. Lightning computes it (``trainer.estimated_stepping_batches``: epochs or ``max_steps``, batches per epoch,
gradient accumulation, devices) and caches the data loaders it needs for it, so reading it again is cheap.
"""

from __future__ import annotations

import math
from typing import Any

from lightning.pytorch import Trainer


def total_steps(trainer: Trainer) -> int | None:
    """The run's number of optimizer steps, or ``None`` when neither ``max_epochs`` nor ``max_steps`` bounds it."""
    total = trainer.estimated_stepping_batches
    return None if math.isinf(total) else int(total)


def schedule_of(trainer: Trainer) -> Any:
    """The run's (first) learning-rate schedule, or ``None``."""
    return trainer.lr_scheduler_configs[0].scheduler if trainer.lr_scheduler_configs else None


def planned_steps(trainer: Trainer) -> int | None:
    """The run's planned length: its schedule's ``total_steps`` (a time budget re-sizes it), else `total_steps`."""
    return getattr(schedule_of(trainer), "total_steps", None) or total_steps(trainer)


def training_progress(trainer: Trainer) -> float:
    """Fraction of the run's planned optimizer steps done (`planned_steps`), in [0, 1]; 0 for a run without a length."""
    total = planned_steps(trainer)
    return 0.0 if total is None else min(1.0, trainer.global_step / max(1, total))
