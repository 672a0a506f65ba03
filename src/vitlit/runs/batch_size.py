"""The largest batch that fits, for the whole run: Lightning's BatchSizeFinder, and what must follow the batch.

Lightning's callback alone chose 8192 for 1,348 training images (a trial batch that no epoch fills costs nothing, so
it "fits"), left the learning rate and the schedule's length where the old batch put them, and wrote nothing to the
run's config, so a resume trained at the old batch (issue 45). `BatchSizeSearch` searches no further than the
training split, scales the learning rate with the batch it chose (or keeps it, when told to), sizes the schedule to
the new number of steps, says all of it in one line and saves the batch and rate in the run's config. Lightning's own
``BatchSizeFinder``, which does none of that, is refused by the CLI with a pointer here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import yaml
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BatchSizeFinder

from vitlit.atomic import write_atomically
from vitlit.config import PositiveFloat, PositiveInt
from vitlit.errors import ConfigError
from vitlit.optim import total_steps
from vitlit.run_dir import saved_config
from vitlit.runs.private import cap_batch_search, set_batch_size
from vitlit.text import say

#: Where Lightning says what each trial of its search did: sizes tried, each trial's "fit stopped", its checkpoint.
_TRIAL_LOGGERS = ("lightning.pytorch.tuner.batch_size_scaling", "lightning.pytorch.utilities.rank_zero",
                  "lightning.pytorch.trainer.connectors.checkpoint_connector")  # fmt: skip


@contextlib.contextmanager
def _trials_unsaid() -> Iterator[None]:
    """Leave Lightning's notes on each trial out of the log; the search's one closing line says what came of it.

    Its notes read as the run's own: a "`Trainer.fit` stopped" per trial, a batch size the search then halves.
    Warnings and vitlit's lines stay.
    """

    def note(record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or record.getMessage().startswith("vitlit:")

    loggers = [logging.getLogger(name) for name in _TRIAL_LOGGERS]
    for logger in loggers:
        logger.addFilter(note)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(note)


class BatchSizeSearch(BatchSizeFinder):
    """Find the largest training batch that fits (Lightning's BatchSizeFinder), capped at the training split.

    Given as ``--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch``. Before training, batches of
    ``init_val``, twice that, ... are tried for ``steps_per_trial`` steps each until one runs out of memory, the
    training split (or ``max_val``) is reached, or ``max_trials`` are done; the run trains with the last that fitted.
    Then the learning rate follows the batch (``lr_scaling``), the learning-rate schedule is sized to the run's new
    number of optimizer steps, and the batch and rate are written into the run's ``config.yaml``, so that a resume
    trains as the run did.

    Args:
        lr_scaling: How the learning rate follows the batch: ``linear`` (x chosen/configured batch, the rule of
            docs/training.md), ``sqrt`` (x its square root, a common choice for Adam-type optimizers) or ``none``
            (kept as configured; the closing line says so).
        mode: ``power`` (double until a trial fails) or ``binsearch`` (then search between the last two).
        steps_per_trial: Training steps each trial batch size runs.
        init_val: The first batch size tried.
        max_trials: Most batch sizes tried.
        max_val: Largest batch size tried; the training split's size lowers it, and so does ``min_steps``.
        min_steps: Optimizer steps an epoch keeps at least: the batch is at most the training images divided by it
            (digits' 1,213 images: 64, not the 1,024 that fit in memory and left one step an epoch).
        max_lr_scale: The learning rate is scaled with the batch by at most this factor (the recipes' rates are
            tuned near their own batch); the closing line says where it bounded the rule.
    """

    def __init__(
        self,
        lr_scaling: Literal["linear", "sqrt", "none"] = "linear",
        mode: Literal["power", "binsearch"] = "power",
        steps_per_trial: PositiveInt = 3,
        init_val: PositiveInt = 2,
        max_trials: PositiveInt = 25,
        max_val: PositiveInt = 8192,
        min_steps: PositiveInt = 10,
        max_lr_scale: PositiveFloat = 4.0,
    ) -> None:
        super().__init__(mode, int(steps_per_trial), int(init_val), int(max_trials), max_val=int(max_val))
        self.lr_scaling, self.mode, self.init_val, self.max_val = lr_scaling, mode, int(init_val), int(max_val)
        self.min_steps, self.max_lr_scale = int(min_steps), float(max_lr_scale)
        # The batch the search chose and each optimizer's default rate after it (in checkpoints: a resume trains at
        # them whatever batch and rate its flags name).
        self.chosen: int | None = None
        self.default_lrs: list[float | None] = []
        self._old_factor = 1.0

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Search before a new run's first step; a resume trains at the batch its run chose, without a search.

        Lightning restores a checkpoint's training state (step, optimizer, schedule) after this hook: a search's
        trial fits would drop it, and the resumed run would start over. The groups' rates and the schedule it scaled
        come back with that state; the batch and the optimizer's default rate, which no checkpoint of Lightning's
        holds, come back from this one's.
        """
        if trainer.ckpt_path is None:
            super().on_fit_start(trainer, pl_module)
            return
        given = int(trainer.datamodule.batch_size)
        if self.chosen is not None and self.chosen != given:
            set_batch_size(trainer, self.chosen)
            if not self.default_lrs:  # such a checkpoint kept the factor: not the run's saved config, which holds both
                self.default_lrs = [lr * self._old_factor if isinstance(lr := o.defaults.get("lr"), float) else None
                                    for o in trainer.optimizers]  # fmt: skip
        # The groups' rates come back with the optimizer's state; its default rate, which no state holds, from here.
        for optimizer, lr in zip(trainer.optimizers, self.default_lrs, strict=False):
            if lr is not None:
                optimizer.defaults["lr"] = lr
        if self.chosen is not None:  # the resume's own saved config holds the flags: the batch and rate it trains at
            self._save(trainer, self.chosen, next(iter(self.default_lrs), None))
        if trainer.is_global_zero:
            said = "the one its run chose" if self.chosen is not None else "as given: its checkpoint names none"
            say(f"vitlit: a resume trains at batch size {self.chosen or given} ({said}); BatchSizeSearch searches a "
                f"new run only", error=True)  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {} if self.chosen is None else {"batch_size": self.chosen, "default_lrs": self.default_lrs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.chosen, self.default_lrs = state_dict.get("batch_size"), list(state_dict.get("default_lrs", []))
        self._old_factor = float(state_dict.get("lr_factor", 1.0))  # a checkpoint of the day before default_lrs

    def scale_batch_size(self, trainer: Trainer, pl_module: LightningModule) -> None:
        data = trainer.datamodule
        before, images = int(data.batch_size), len(data.train_set)
        # An epoch keeps min_steps optimizer steps: each takes a batch from every process, every accumulated one.
        per_step = trainer.accumulate_grad_batches * trainer.world_size
        largest = min(self.max_val, images // (self.min_steps * per_step))
        if self.init_val > largest:
            most = images // per_step
            fix = ("a smaller --trainer.callbacks.init_val" if largest >= 1 else
                   f"a smaller --trainer.callbacks.min_steps (at most {most:,}), more images")  # fmt: skip
            raise ConfigError(f"BatchSizeSearch init_val={self.init_val} leaves the {images:,} training images fewer "
                              f"than min_steps={self.min_steps} optimizer steps an epoch; give {fix}, or drop the "
                              f"search.")  # fmt: skip
        # Mixup/CutMix mix images in pairs: every size tried must be even. Doubling an even size keeps it even; a
        # binary search's midpoints do not.
        if getattr(data.batch_augment, "mixes", False) and (self.init_val % 2 or self.mode == "binsearch"):
            raise ConfigError(f"Mixup/CutMix mix images in pairs, but BatchSizeSearch with init_val={self.init_val} "
                              f"and mode={self.mode} would try odd batch sizes; give an even "
                              f"--trainer.callbacks.init_val and mode power.")  # fmt: skip
        cap_batch_search(self, largest + 1)  # Lightning tries sizes below max_val: the largest is one to try
        with _trials_unsaid():
            super().scale_batch_size(trainer, pl_module)
        chosen = int(data.batch_size)
        while chosen > largest:  # the doubled size Lightning stopped at without trying it: back to the last that ran
            chosen //= 2
        if chosen != int(data.batch_size):
            set_batch_size(trainer, chosen)
        self.chosen = chosen
        rule = {"linear": chosen / before, "sqrt": (chosen / before) ** 0.5, "none": 1.0}[self.lr_scaling]
        factor = min(max(rule, 1 / self.max_lr_scale), self.max_lr_scale)
        for optimizer in trainer.optimizers:
            # Groups added later start from the default rate (`vitlit.transfer.finetune`).
            if isinstance(optimizer.defaults.get("lr"), (int, float)):
                optimizer.defaults["lr"] *= factor
            for group in optimizer.param_groups:
                group["lr"] *= factor
                if "initial_lr" in group:  # what a scheduler restarts from
                    group["initial_lr"] *= factor
        self.default_lrs = [lr if isinstance(lr := optimizer.defaults.get("lr"), float) else None
                            for optimizer in trainer.optimizers]  # fmt: skip
        steps, note = total_steps(trainer), None  # another batch, another number of steps per epoch
        for config in trainer.lr_scheduler_configs:
            schedule = config.scheduler
            schedule.base_lrs = [lr * factor for lr in schedule.base_lrs]
            if steps is not None and callable(getattr(schedule, "set_total_steps", None)):
                note = schedule.set_total_steps(steps)
        saved = self._save(trainer, chosen, next(iter(self.default_lrs), None))
        if trainer.is_global_zero:
            rate = (
                f"x{factor:.3g} ({self.lr_scaling}{f', x{rule:.3g} bounded by max_lr_scale' if rule != factor else ''})"
            )
            where = f"; saved in {saved}" if saved else ""
            say(f"vitlit: batch size {chosen} (was {before}; at most {largest:,}, {self.min_steps} optimizer steps an "
                f"epoch of the {images:,} training images); learning rate {rate}; {steps or 'unbounded'} optimizer "
                f"steps{where}", error=True)  # fmt: skip
            if note:
                say(f"vitlit: {note}", error=True)

    @staticmethod
    def _save(trainer: Trainer, chosen: int, lr: float | None) -> Path | None:
        """Write the batch and the learning rate (``None``: as it is) into the run's saved config; return its path."""
        if getattr(trainer, "log_dir", None) is None or not trainer.is_global_zero:
            return None
        path = saved_config(trainer, Path(trainer.log_dir))
        if not path.is_file():
            return None
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        config["data"]["init_args"]["batch_size"] = chosen
        optimizer = ((config.get("model") or {}).get("init_args") or {}).get("optimizer") or {}
        if lr is not None and isinstance(optimizer, dict) and "lr" in (optimizer.get("init_args") or {}):
            optimizer["init_args"]["lr"] = lr
        write_atomically(path, yaml.safe_dump(config, sort_keys=False))
        return path
