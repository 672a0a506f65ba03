"""The run's length in optimizer steps and the fraction of it done: one definition for everything that follows it.

The learning-rate schedule, the random-erasing schedule and the snapshots every N% of the run all need the same
number. Lightning computes it (``trainer.estimated_stepping_batches``: epochs or ``max_steps``, batches per epoch,
gradient accumulation, devices) and caches the data loaders it needs for it, so reading it again is cheap.
"""

from __future__ import annotations

import math
from typing import Any

from lightning.pytorch import Trainer

from vitlit.errors import ConfigError
from vitlit.text import say


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


def logging_step(trainer: Trainer, stepped: bool = True) -> bool:
    """Whether Lightning writes this optimizer step's logged values (every ``--trainer.log_every_n_steps`` steps).

    ``stepped``: asked after the step (``on_train_batch_end``), else before it (clipping). A value logged on the
    other steps is dropped unread, so a per-step value that costs work is logged at these steps only.
    """
    return (trainer.global_step + (not stepped)) % trainer.log_every_n_steps == 0


def fit_to_run(scheduler: Any, trainer: Trainer) -> None:
    """Give a schedule whose ``total_steps`` is ``None`` the run's length, or refuse a run that sets no end.

    Through the schedule's ``set_total_steps`` where it has one, which may say how it resolved a warmup share.
    """
    if getattr(scheduler, "total_steps", 0) is not None:
        return
    total = total_steps(trainer)
    if total is None:
        raise ConfigError(f"the learning-rate schedule needs the run's length, but max_epochs={trainer.max_epochs} and "
                          f"max_steps={trainer.max_steps} set no end (-1 means no limit); give --trainer.max_epochs or "
                          f"--trainer.max_steps a positive value.")  # fmt: skip
    set_total = getattr(scheduler, "set_total_steps", None)
    # A fast_dev_run (a batch or a few) checks that the code runs, not that it learns: no warmup refused.
    note = set_total(total) if callable(set_total) and not trainer.fast_dev_run else None
    if not callable(set_total) or trainer.fast_dev_run:
        scheduler.total_steps = total
    # A resumed run's schedule is replaced by the checkpoint's (the runs part says so if its length differs).
    if note and trainer.is_global_zero and trainer.ckpt_path is None:
        say(f"vitlit: {note}", error=True)
