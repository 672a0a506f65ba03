"""Progress: Lightning's RichProgressBar on a terminal (`vitlit.runs.bar`), else one line per epoch (`EpochLines`).

Neither reads a value back from the GPU on every step (`vitlit.runs.bar` says why that matters). `DefaultBar` puts
one of them in place of Lightning's default bar; a bar named in a config's callbacks is kept as it is. Where the
output is not a terminal (a batch job's log, ``nohup``, CI, a notebook), a bar would write escape codes or thousands
of redraws: `EpochLines` writes one line per epoch instead.

A terminal that closes (its window, an ssh session that drops) or a pipe whose reader leaves (``| head``) stops the
fit at the next step with ``last.ckpt``, as SIGHUP does (`reader_gone`): the bar's writes and the epoch lines meet
the loss as an ``OSError`` (EIO, EPIPE), on the loop or on Rich's refresh thread, never as a traceback.
"""

from __future__ import annotations

import signal
import sys
import time

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.callbacks import RichProgressBar, Timer, TQDMProgressBar

from vitlit.streams import stream_gone
from vitlit.text import say


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
    epoch, total = trainer.current_epoch + 1, trainer.max_epochs
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


class DefaultBar(Callback):
    """Put `ProgressBar` (a terminal) or `EpochLines` (any other output) in place of Lightning's default bar.

    Why a swap and not a bar in the shared callbacks: Lightning refuses ``--trainer.enable_progress_bar false``
    while its callbacks hold a bar, and that flag must keep working for batch jobs. With it, there is no bar to swap.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        bar = trainer.progress_bar_callback
        if type(bar) in (TQDMProgressBar, RichProgressBar):  # Lightning's default (also a config naming one of them)
            if on_terminal():
                from vitlit.runs.bar import ProgressBar  # Rich's bar, on a terminal only

                trainer.callbacks[trainer.callbacks.index(bar)] = ProgressBar()
            else:
                trainer.callbacks[trainer.callbacks.index(bar)] = EpochLines()


def on_terminal() -> bool:
    """Whether the output is a terminal (else a file, a pipe, a notebook: no bar, a line per epoch)."""
    return sys.stdout.isatty()
