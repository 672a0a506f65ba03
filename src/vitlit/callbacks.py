"""Callbacks of vitlit's own, for what Lightning's do not cover; everything else in the configs is Lightning's."""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter, Callback
from lightning.pytorch.utilities import rank_zero_info


class RNGStateCheckpoint(Callback):
    """Save the random-number generators' state in every checkpoint and restore it on resume.

    Lightning restores model, optimizer, scheduler and loop counters, but not the generators behind shuffling,
    augmentation, Mixup and drop path, so a resumed run draws different random numbers than the run it continues.
    With this callback, a run resumed from an end-of-epoch checkpoint (``last.ckpt``) continues with the very
    numbers the interrupted run would have drawn: on CPU with ``deterministic: true`` it ends with the same weights.
    Covered: torch (CPU and CUDA), NumPy and Python's ``random``. DataLoader workers are seeded from torch's
    generator when their iterator starts, so they are covered too, except persistent workers, whose generators live
    across epochs (use ``--data.persistent_workers false`` where exactness matters more than start-up time).
    """

    def state_dict(self) -> dict[str, Any]:
        # Tensors, ints and tuples only: the checkpoint stays loadable with torch.load(weights_only=True), which
        # Lightning uses on resume (a NumPy array would be refused).
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        return {
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
                "python": random.getstate(),
            }
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Restored at once: Lightning loads callback states before configure_optimizers, whose
        # estimated_stepping_batches creates the first training iterator (and draws its shuffle order). The sanity
        # check in between runs under isolate_rng, so the next draws are the ones the interrupted run would have made.
        rng = state_dict["rng"]
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        kind, keys, pos, has_gauss, cached = rng["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))


class PredictionWriter(BasePredictionWriter):
    """Write what ``predict`` computes to ``<run>/predictions.csv``, one row per image, in data order.

    Columns: ``index`` (position in the predicted split), ``source`` (the image file, where the data set knows it),
    ``predicted`` (class name), ``confidence`` (its probability), then one ``p_<class>`` column per class. The file
    goes into the run's own ``version_N`` directory, so an earlier run's predictions are never overwritten.

    Args:
        filename: Name of the CSV file inside the run directory.
        probabilities: Also write every class's probability (one column per class).
    """

    def __init__(self, filename: str = "predictions.csv", probabilities: bool = True) -> None:
        super().__init__(write_interval="epoch")
        self.filename = filename
        self.probabilities = probabilities

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: list[Any], batch_indices: list[Any]
    ) -> None:
        probs = torch.cat([p.float().cpu() for p in predictions])
        data = trainer.datamodule
        classes = list(getattr(data, "classes", None) or [str(i) for i in range(probs.shape[1])])
        dataset = getattr(data, "test_set", None)
        sources = _sources(dataset, len(probs))
        path = Path(trainer.log_dir or trainer.default_root_dir) / self.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        confidence, predicted = probs.max(dim=1)
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(
                ["index", "source", "predicted", "confidence"] + [f"p_{c}" for c in classes] * self.probabilities
            )
            for i in range(len(probs)):
                row = [i, sources[i], classes[predicted[i]], f"{confidence[i]:.6f}"]
                if self.probabilities:
                    row += [f"{p:.6f}" for p in probs[i].tolist()]
                writer.writerow(row)
        rank_zero_info(f"Wrote {len(probs)} predictions to {path}")


def _sources(dataset: Any, n: int) -> list[str]:
    """The file behind each predicted item (torchvision ImageFolder keeps ``samples``), else an empty string."""
    samples = getattr(getattr(dataset, "source", None), "samples", None)
    indices = getattr(dataset, "indices", None)
    if samples is None or indices is None:
        return [""] * n
    return [samples[i][0] for i in indices]
