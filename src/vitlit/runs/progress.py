"""Progress: Lightning's RichProgressBar on a terminal (`ProgressBar`), else one line per epoch (`EpochLines`).

Neither reads a value back from the GPU on every step. Lightning converts every metric logged with ``prog_bar=True``
into a Python number after every training batch, bar refresh rate or not, and on a GPU each conversion waits for all
queued work: the step cannot be queued ahead (the cost is in `benchmarks/RESULTS.md`). So the model logs
``train/loss`` for TensorBoard only, and the bar reads it from ``trainer.callback_metrics`` at the logging steps
(``--trainer.log_every_n_steps``), where the logger synchronises anyway. `DefaultBar` puts
one of them in place of Lightning's default bar; a bar named in a config's callbacks is kept as it is. Where the
output is not a terminal (a batch job's log, ``nohup``, CI, a notebook), a bar would write escape codes or thousands
of redraws: `EpochLines` writes one line per epoch instead.

A terminal that closes (its window, an ssh session that drops) or a pipe whose reader leaves (``| head``) stops the
fit at the next step with ``last.ckpt``, as SIGHUP does (`reader_gone`): the bar's writes and the epoch lines meet
the loss as an ``OSError`` (EIO, EPIPE), on the loop or on Rich's refresh thread, never as a traceback.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.callbacks import RichProgressBar, Timer, TQDMProgressBar

from vitlit.optim import is_logged_step, steps_per_epoch
from vitlit.text import say, stream_gone


class EpochLines(LightningProgressBar):
    """Progress as one line per training epoch: ``epoch 3/25  train/loss 0.912  val/acc 0.874  1.9 s/epoch  ETA 42 s``.

    The values are the last logged training loss and the epoch's validation metrics (``val/acc``, ``val/loss``);
    the time per epoch is the mean since the fit (or the resume) started, and the ETA assumes it for the epochs left
    to ``--trainer.max_epochs``, or is what is left of ``--trainer.max_time`` where that ends the run first.
    Printed by the main process only.
    """

    def __init__(self) -> None:
        super().__init__()
        self._enabled = True
        self._started = time.monotonic()
        self._first_epoch = 0

    def enable(self) -> None:
        self._enabled = True

    def disable(self) -> None:
        self._enabled = False

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._started, self._first_epoch = time.monotonic(), trainer.current_epoch

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._enabled or not trainer.is_global_zero or trainer.sanity_checking:
            return
        try:
            say(epoch_line(trainer, time.monotonic() - self._started, trainer.current_epoch + 1 - self._first_epoch))
            sys.stdout.flush()
        except OSError:  # the reader went away (`vitlit fit | head`, a closed terminal)
            self._enabled = False
            reader_gone()


def reader_gone() -> None:
    """The output's reader went away: point it at the null device, and stop at the next step and save, as on SIGHUP.

    Raised as a signal (from any thread: Python runs the handler on the main thread) so that the CLI's fit stops as
    a hangup stops it, with the same line and status; a caller in Python without the CLI's handler is left running.
    """
    stream_gone()
    hangup = getattr(signal, "SIGHUP", signal.SIGINT)
    if callable(signal.getsignal(hangup)):
        signal.raise_signal(hangup)


def epoch_line(trainer: Trainer, seconds: float, epochs_timed: int) -> str:
    """`EpochLines`'s line for the epoch that just ended, ``epochs_timed`` of them having taken ``seconds``."""
    epoch, total, steps = trainer.current_epoch + 1, trainer.max_epochs, steps_per_epoch(trainer)
    if trainer.max_steps > 0 and steps:  # --trainer.max_steps may end the run before max_epochs does
        by_steps = math.ceil(trainer.max_steps / steps)
        total = min(total, by_steps) if total and total > 0 else by_steps
    parts = [f"epoch {epoch}/{total}" if total and total > 0 else f"epoch {epoch}"]
    metrics = trainer.callback_metrics
    parts += [f"{name} {float(metrics[name]):.4f}" for name in ("train/loss", "val/loss", "val/acc") if name in metrics]
    per_epoch = seconds / max(epochs_timed, 1)
    parts.append(f"{per_epoch:.1f} s/epoch")
    left = [per_epoch * (total - epoch)] if total and total > 0 else []  # and --trainer.max_time's Timer, if any:
    left += [max(t, 0.0) for c in trainer.callbacks if isinstance(c, Timer) and (t := c.time_remaining()) is not None]
    if left and min(left) > 0:  # whichever ends the run first
        parts.append(f"ETA {min(left):.0f} s")
    return "  ".join(parts)


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
        due = self._loss is None or (is_logged_step(trainer) and step != self._read_at_step)
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


class DefaultBar(Callback):
    """Put `ProgressBar` (a terminal) or `EpochLines` (any other output) in place of Lightning's default bar.

    Why a swap and not a bar in the shared callbacks: Lightning refuses ``--trainer.enable_progress_bar false``
    while its callbacks hold a bar, and that flag must keep working for batch jobs. With it, there is no bar to swap.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        bar = trainer.progress_bar_callback
        if type(bar) in (TQDMProgressBar, RichProgressBar):  # Lightning's default (also a config naming one of them)
            if on_terminal():
                trainer.callbacks[trainer.callbacks.index(bar)] = ProgressBar()
            else:
                trainer.callbacks[trainer.callbacks.index(bar)] = EpochLines()


def on_terminal() -> bool:
    """Whether the output is a terminal (else a file, a pipe, a notebook: no bar, a line per epoch)."""
    return sys.stdout.isatty()
