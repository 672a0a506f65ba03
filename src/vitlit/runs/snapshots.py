"""Periodic snapshots: a checkpoint every N optimizer steps or every fraction of the run, the newest kept.

The first write-up keeps a snapshot every 20% of training (``configs/cifar100_vit_base_224.yaml`` lists it).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from vitlit.config import Fraction, PositiveInt
from vitlit.errors import ConfigError
from vitlit.optim import planned_steps
from vitlit.runs.private import set_checkpoint_interval


class Snapshots(ModelCheckpoint):
    """Keep a checkpoint every N optimizer steps or every fraction of the run, pruned to the newest ``keep``.

    Lightning's ModelCheckpoint does the saving; this fixes its settings for periodic snapshots (the newest ``keep``
    checkpoints by step) and turns a fraction of the run into a step interval once the run's length is known, at
    the start of training. The vitlit CLI writes every checkpoint atomically (`vitlit.runs.checkpoint_io`), so a kill
    during a save leaves the previous snapshots intact. A snapshot taken mid-epoch restores the weights, optimizer
    and counters exactly; for a bit-exact continuation of the data order resume from ``last.ckpt`` (epoch ends).

    Args:
        every_fraction: Save every ``round(every_fraction x the run's optimizer steps)`` steps (0.2 of 36 steps: at
            7, 14, 21, 28 and 35, about every 20%; the run's end is ``last.ckpt``). The default when neither this nor
            ``every_n_steps`` is given.
        every_n_steps: Save every this many optimizer steps instead; give at most one of the two.
        keep: Number of newest snapshots to keep; older ones are deleted. -1 keeps all.
        dirpath: Folder of the snapshots; by default the run's ``checkpoints/`` folder.
        filename: File name pattern; ``{step}`` and ``{epoch}`` are filled in.
    """

    def __init__(
        self,
        every_fraction: Fraction | None = None,
        every_n_steps: PositiveInt | None = None,
        keep: int = 5,
        dirpath: str | None = None,
        filename: str = "snapshot-step{step:07d}",
    ) -> None:
        if every_fraction is not None and every_n_steps is not None:
            raise ConfigError(
                f"Snapshots got every_fraction={every_fraction} and every_n_steps={every_n_steps}; give one of them."
            )
        if every_n_steps is None and every_fraction is None:
            every_fraction = 0.2
        if keep == 0 or keep < -1:
            raise ConfigError(f"Snapshots keep={keep} must be positive, or -1 to keep all.")
        # monitor="step", mode="max": Lightning's way of keeping the newest k (monitor=None only allows k <= 1).
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            monitor="step",
            mode="max",
            save_top_k=keep,
            every_n_train_steps=int(every_n_steps or 1),
            auto_insert_metric_name=False,
            enable_version_counter=False,
        )
        self.every_fraction = None if every_fraction is None else float(every_fraction)
        self.given_dirpath = dirpath  # what tells two of them apart (`state_key`)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # After checkpoint restore and configure_optimizers: the step count is known and no random draw is moved.
        self._space(trainer)
        super().on_train_start(trainer, pl_module)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        self._space(trainer)  # the plan may change: a time budget re-sizes the schedule as the run goes
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)

    def _space(self, trainer: Trainer) -> None:
        """Space the snapshots on the planned length: the schedule's (a time budget's plan), else the Trainer's."""
        if self.every_fraction is None:
            return
        total = planned_steps(trainer)
        if total is None:
            raise ConfigError(
                "Snapshots every_fraction needs the run's length, but max_epochs and max_steps are unbounded; "
                "set --trainer.max_epochs or use every_n_steps."
            )
        set_checkpoint_interval(self, max(1, round(total * self.every_fraction)))

    @property
    def state_key(self) -> str:
        # Distinct from the ModelCheckpoints next to it, whose state (best paths) is stored under their own settings;
        # in the form of Lightning's keys made from settings, which checkpoints saved before hold.
        settings = {"snapshots": self.filename, "every_fraction": self.every_fraction}
        if self.every_fraction is None and self.given_dirpath is not None:  # by steps, two (frequent, rare) may run
            settings["dirpath"] = self.given_dirpath  # each into its folder; without one, the key checkpoints hold
        return f"{type(self).__qualname__}{settings!r}"
