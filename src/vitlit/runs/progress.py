"""The progress bar: Lightning's RichProgressBar, showing the training loss without a GPU sync on every step.

Lightning converts every metric logged with ``prog_bar=True`` into a Python number after every training batch, bar
refresh rate or not, and on a GPU each conversion waits for all queued work: the step cannot be queued ahead (the
cost is in `benchmarks/RESULTS.md`). So the model logs ``train/loss`` for
TensorBoard only, and this bar reads it from ``trainer.callback_metrics`` at the logging steps
(``--trainer.log_every_n_steps``), where the logger synchronises anyway. The CLI puts it in place of Lightning's
default bar; a bar named in a config's callbacks is kept as it is.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar


class ProgressBar(RichProgressBar):
    """RichProgressBar plus the training loss, read once every ``log_every_n_steps`` optimizer steps.

    It also leaves out Lightning's ``v_num`` (the run's folder is printed when it starts), which Rich would show as
    ``v_num: 0.000``. Every option is RichProgressBar's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loss: float | None = None
        self._read_at_step = -1

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        step = trainer.global_step
        loss = trainer.callback_metrics.get("train/loss")
        # At logging steps and once at the start; a step of several accumulated batches is read once.
        due = self._loss is None or (step % trainer.log_every_n_steps == 0 and step != self._read_at_step)
        if trainer.training and loss is not None and due:
            self._read_at_step = step
            self._loss = float(loss)  # the one sync, on a step where the logger syncs too
        if self._loss is not None:
            items["train/loss"] = self._loss
        return items


class DefaultBar(Callback):
    """Put `ProgressBar` in place of the bar Lightning adds by default; a bar a config names is kept as it is.

    Why a swap and not a bar in the shared callbacks: Lightning refuses ``--trainer.enable_progress_bar false``
    while its callbacks hold a bar, and that flag must keep working for batch jobs. With it, there is no bar to swap.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        bar = trainer.progress_bar_callback
        if type(bar) in (TQDMProgressBar, RichProgressBar):  # Lightning's default (also a config naming one of them)
            trainer.callbacks[trainer.callbacks.index(bar)] = ProgressBar()
