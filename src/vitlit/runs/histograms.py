"""Weight histograms in TensorBoard, for a config that asks for them (``--trainer.callbacks+=...WeightHistograms``)."""

from __future__ import annotations

import sys

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only

from vitlit.config import PositiveInt


class WeightHistograms(Callback):
    """Log a histogram of every weight matrix of the network to TensorBoard at the end of every ``every_n_epochs``.

    The ViT-B/16 write-up watches them to see blocks that stop learning (a frozen distribution) or blow up. Off by
    default (a histogram per tensor per epoch grows the event file):
    ``--trainer.callbacks+=vitlit.runs.histograms.WeightHistograms``.
    Needs the TensorBoard logger (the default); with another logger it does nothing, and says so once.

    Args:
        every_n_epochs: Epochs between two sets of histograms.
    """

    def __init__(self, every_n_epochs: PositiveInt = 1) -> None:
        self.every_n_epochs = int(every_n_epochs)
        self._warned = False

    @rank_zero_only
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        writer = getattr(trainer.logger, "experiment", None)
        if not hasattr(writer, "add_histogram"):
            if not self._warned:
                self._warned = True
                print(
                    "vitlit: WeightHistograms needs the TensorBoard logger; no histograms are written", file=sys.stderr
                )
            return
        for name, param in pl_module.named_parameters():
            if param.ndim > 1:  # matrices and convolutions; biases and norms say little
                writer.add_histogram(f"weights/{name}", param.detach().float().cpu(), trainer.global_step)
