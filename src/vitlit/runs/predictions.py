"""``predict`` writes ``predictions.csv``: one row per image, in data order, with the top classes and probabilities."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from vitlit.types import PositiveInt


class PredictionWriter(Callback):
    """Write what ``predict`` computes to ``<run>/predictions.csv``, one row per image, in data order.

    A plain callback, not Lightning's ``BasePredictionWriter``: that one makes Lightning track the data indices of
    every batch, and the rows are in data order without them.

    Columns: ``index`` (position in what was predicted: ``--data.predict_dir``'s images or the test split),
    ``source`` (the image file, where the data module knows it:
    `vitlit.data.ImageClassificationDataModule.files_of`), for the test split ``label`` (the true class) and
    ``correct`` (``true``/``false``), ``predicted`` (class name), ``confidence`` (its
    probability), then ``top2``, ``p_top2``, ... up to ``top_k``, then one ``p_<class>`` column per class. Class
    names are those the model was trained with (kept in its checkpoint). The file goes into the log folder of this
    ``predict`` (for a run's checkpoint, ``<run>/predict/version_K``), so earlier predictions are never overwritten.

    Args:
        filename: Name of the CSV file inside the run directory.
        probabilities: Also write every class's probability (one column per class).
        top_k: Name the ``top_k`` most probable classes of each image (1: only ``predicted``).
    """

    def __init__(self, filename: str = "predictions.csv", probabilities: bool = True, top_k: PositiveInt = 3) -> None:
        self.filename = filename
        self.probabilities = probabilities
        self.top_k = int(top_k)
        self._predictions: list[torch.Tensor] = []

    def on_predict_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._predictions = []

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._predictions.append(outputs.detach().float().cpu())

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        from vitlit.runs.prediction_table import write_predictions  # the CSV's code runs (and loads) in predict only

        probs, self._predictions = torch.cat(self._predictions), []
        write_predictions(trainer, pl_module, probs, self.filename, self.top_k, self.probabilities)
