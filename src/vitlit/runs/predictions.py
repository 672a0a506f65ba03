"""``predict`` writes ``predictions.csv``: one row per image, in data order, with the top classes and probabilities."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info

from vitlit.data import ImageClassificationDataModule
from vitlit.errors import CheckFailed
from vitlit.types import PositiveInt


class PredictionWriter(Callback):
    """Write what ``predict`` computes to ``<run>/predictions.csv``, one row per image, in data order.

    A plain callback, not Lightning's ``BasePredictionWriter``: that one makes Lightning track the data indices of
    every batch, and the rows are in data order without them.

    Columns: ``index`` (position in what was predicted: ``--data.predict_dir``'s images or the test split),
    ``source`` (the image file, where the data module knows it:
    `vitlit.data.ImageClassificationDataModule.files_of`), ``predicted`` (class name), ``confidence`` (its
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
        probs, self._predictions = torch.cat(self._predictions), []
        if trainer.world_size > 1:  # each process predicted its shard: back in data order (collectives: all call)
            from vitlit.runs.ddp import all_gather_objects, interleave

            probs = interleave(all_gather_objects(probs, trainer))
        path = Path(trainer.log_dir or trainer.default_root_dir) / self.filename
        broken = int((~torch.isfinite(probs).all(dim=1)).sum())
        if broken:  # on every process: a row of NaN would still name a class (argmax), and look like a prediction
            raise CheckFailed(
                f"the model gave {broken} of {len(probs)} images probabilities that are not finite numbers (NaN or "
                f"infinity); nothing was written to {path}; predict with an earlier checkpoint of the run"
            )
        if not trainer.is_global_zero:
            return
        from vitlit.runs.prediction_table import write_table  # the CSV's code runs (and loads) in predict only

        data = trainer.datamodule
        files = data.predict_files() if isinstance(data, ImageClassificationDataModule) else None
        sources = files if files is not None and len(files) == len(probs) else [""] * len(probs)
        classes = _class_names(trainer, pl_module, probs.shape[1])
        write_table(path, probs, classes, sources, self.top_k, self.probabilities)
        rank_zero_info(f"vitlit: wrote {len(probs)} predictions to {path}")


def _class_names(trainer: Trainer, pl_module: LightningModule, n: int) -> list[str]:
    """The model's class names (from its checkpoint), else the data module's, else the class indices."""
    names = getattr(pl_module, "hparams", {}).get("class_names")
    if not names and isinstance(trainer.datamodule, ImageClassificationDataModule):
        names = trainer.datamodule.class_names
    return list(names) if names and len(names) == n else [str(i) for i in range(n)]
