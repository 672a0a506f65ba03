"""The progress bar on a terminal: Lightning's RichProgressBar, showing the training loss without a GPU sync a step.

Lightning converts every metric logged with ``prog_bar=True`` into a Python number after every training batch, bar
refresh rate or not, and on a GPU each conversion waits for all queued work: the step cannot be queued ahead (the
cost is in `benchmarks/RESULTS.md`). So the model logs ``train/loss`` for TensorBoard only, and this bar reads it from
``trainer.callback_metrics`` at the logging steps (``--trainer.log_every_n_steps``), where the logger synchronises
anyway. `vitlit.runs.progress.DefaultBar` puts it in place of Lightning's default bar, on a terminal only.
"""

from __future__ import annotations

import sys
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import RichProgressBar

from vitlit.runs.progress import reader_gone
from vitlit.optim import logging_step


class ProgressBar(RichProgressBar):
    """RichProgressBar plus the training loss, read once every ``log_every_n_steps`` optimizer steps.

    It also leaves out Lightning's ``v_num`` (the run's folder is printed when it starts), which Rich would show as
    ``v_num: 0.000``. Every option is RichProgressBar's; its console writes to `TerminalOut` unless
    ``console_kwargs`` names a file.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["console_kwargs"] = {"file": TerminalOut(), **(kwargs.get("console_kwargs") or {})}
        super().__init__(*args, **kwargs)
        self._loss: float | None = None
        self._read_at_step = -1

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        step = trainer.global_step
        loss = trainer.callback_metrics.get("train/loss")
        # At logging steps and once at the start; a step of several accumulated batches is read once.
        due = self._loss is None or (logging_step(trainer) and step != self._read_at_step)
        if trainer.training and loss is not None and due:
            self._read_at_step = step
            self._loss = float(loss)  # the one sync, on a step where the logger syncs too
        if self._loss is not None:
            items["train/loss"] = self._loss
        return items


class TerminalOut:
    """The standard output as the bar's Rich console writes to it, where a closed terminal calls `reader_gone`.

    Looked up at each use, as Rich looks up ``sys.stdout`` (a test's capture, a notebook's stream; under Rich's live
    display, the stream its proxy stands for, as Rich unwraps it). Rich handles a broken pipe only, by exiting with
    status 1; a closed terminal's EIO would end its refresh thread with a traceback and the loop's next redraw too.
    """

    def __init__(self) -> None:
        self.gone = False  # told once: where the stream has no descriptor to redirect, every write fails again

    def write(self, text: str) -> int:
        try:
            return _stdout().write(text)
        except OSError:
            self._lost()
            return len(text)

    def flush(self) -> None:
        try:
            _stdout().flush()
        except OSError:
            self._lost()

    def _lost(self) -> None:
        if not self.gone:
            self.gone = True
            reader_gone()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's own
        return getattr(_stdout(), name)


def _stdout() -> Any:
    return getattr(sys.stdout, "rich_proxied_file", sys.stdout)
