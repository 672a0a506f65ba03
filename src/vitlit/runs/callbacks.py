"""Callbacks of vitlit's own, for what Lightning's do not cover; everything else in the configs is Lightning's."""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

from vitlit.data import ImageClassificationDataModule
from vitlit.errors import ConfigError
from vitlit.private import set_checkpoint_interval, state_key
from vitlit.runs.distributed import all_gather_objects, interleave
from vitlit.schedule import total_steps
from vitlit.types import Fraction, PositiveInt


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
                # The generator of the device this process trains on (one per process under DDP, where every
                # process draws the same numbers as the main one, whose checkpoint is the one saved).
                "cuda": [torch.cuda.get_rng_state()] if torch.cuda.is_available() else [],
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
            # This process's device. (Older checkpoints list every device's generator; the first is a one-GPU run's.)
            torch.cuda.set_rng_state(rng["cuda"][0])
        kind, keys, pos, has_gauss, cached = rng["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))


class Snapshots(ModelCheckpoint):
    """Keep a checkpoint every N optimizer steps or every fraction of the run, pruned to the newest ``keep``.

    Lightning's ModelCheckpoint does the saving; this fixes its settings for periodic snapshots (the newest ``keep``
    checkpoints by step) and turns a fraction of the run into a step interval once the run's length is known, at
    the start of training. The vitlit CLI writes every checkpoint atomically (`vitlit.runs.checkpoint_io`), so a kill
    during a save leaves the previous snapshots intact. A snapshot taken mid-epoch restores the weights, optimizer
    and counters exactly; for a bit-exact continuation of the data order resume from ``last.ckpt`` (epoch ends).

    Args:
        every_fraction: Save after every this fraction of the run's optimizer steps (0.2: at 20%, 40%, ... 100%).
            The default when neither this nor ``every_n_steps`` is given.
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

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # After checkpoint restore and configure_optimizers: the step count is known and no random draw is moved.
        if self.every_fraction is not None:
            total = total_steps(trainer)
            if total is None:
                raise ConfigError(
                    "Snapshots every_fraction needs the run's length, but max_epochs and max_steps are unbounded; "
                    "set --trainer.max_epochs or use every_n_steps."
                )
            set_checkpoint_interval(self, max(1, round(total * self.every_fraction)))
        super().on_train_start(trainer, pl_module)

    @property
    def state_key(self) -> str:
        # Distinct from the ModelCheckpoints next to it, whose state (best paths) is stored under their own settings.
        return state_key(self, snapshots=self.filename, every_fraction=self.every_fraction)


class PredictionWriter(Callback):
    """Write what ``predict`` computes to ``<run>/predictions.csv``, one row per image, in data order.

    A plain callback, not Lightning's ``BasePredictionWriter``: that one makes Lightning track the data indices of
    every batch, which it can only do for a ``DataLoader`` (it warns for the device path's loader), and the rows are
    in data order without them.

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
        # Under DDP each process predicted its shard; the main process puts them back in data order and writes.
        # (Both calls are collectives: every process makes them.)
        probs = interleave(all_gather_objects(probs, trainer))
        path = Path(trainer.log_dir or trainer.default_root_dir) / self.filename
        if not trainer.is_global_zero:
            return
        classes = _class_names(trainer, pl_module, probs.shape[1])
        data = trainer.datamodule
        files = data.predict_files() if isinstance(data, ImageClassificationDataModule) else None
        sources = files if files is not None and len(files) == len(probs) else [""] * len(probs)
        path.parent.mkdir(parents=True, exist_ok=True)
        k = min(self.top_k, probs.shape[1])
        top_p, top_i = probs.topk(k, dim=1)
        header = ["index", "source", "predicted", "confidence"]
        header += [name for j in range(2, k + 1) for name in (f"top{j}", f"p_top{j}")]
        if self.probabilities:
            header += [f"p_{c}" for c in classes]
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            for i in range(len(probs)):
                row: list[object] = [i, sources[i]]
                for j in range(k):
                    row += [classes[top_i[i, j]], f"{top_p[i, j]:.6f}"]
                if self.probabilities:
                    row += [f"{p:.6f}" for p in probs[i].tolist()]
                writer.writerow(row)
        rank_zero_info(f"Wrote {len(probs)} predictions to {path}")


def _class_names(trainer: Trainer, pl_module: LightningModule, n: int) -> list[str]:
    """The model's class names (from its checkpoint), else the data module's, else the class indices."""
    names = getattr(pl_module, "hparams", {}).get("class_names")
    if not names and isinstance(trainer.datamodule, ImageClassificationDataModule):
        names = trainer.datamodule.class_names
    return list(names) if names and len(names) == n else [str(i) for i in range(n)]


class LogEveryEpoch(Callback):
    """Lower Lightning's ``log_every_n_steps`` (50) to an epoch's optimizer steps where epochs are shorter.

    A run of short epochs would otherwise show its loss, learning-rate and throughput curves only every few epochs,
    or not at all.
    """

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if math.isinf(trainer.num_training_batches):
            return
        steps_per_epoch = max(1, int(trainer.num_training_batches) // trainer.accumulate_grad_batches)
        if trainer.log_every_n_steps > steps_per_epoch:
            trainer.log_every_n_steps = steps_per_epoch


class SkippedImages(Callback):
    """List the images a data module left out (``--data.bad_images skip``) in the run's ``skipped_images.txt``.

    Reads the data module's ``skipped`` list (`vitlit.data.ImageFolderDataModule`) after each setup, appends the new
    entries (path and problem) and logs their count as ``data/skipped_images``.
    """

    def __init__(self) -> None:
        self.listed = 0

    @rank_zero_only
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        skipped = getattr(trainer.datamodule, "skipped", None) or []
        if len(skipped) <= self.listed or not trainer.log_dir:
            return
        where = Path(trainer.log_dir)
        where.mkdir(parents=True, exist_ok=True)
        with (where / "skipped_images.txt").open("a") as f:
            f.writelines(f"{bad.path}\t{bad.problem}\n" for bad in skipped[self.listed :])
        self.listed = len(skipped)
        for logger in trainer.loggers:
            logger.log_metrics({"data/skipped_images": float(len(skipped))}, step=0)
        rank_zero_info(f"vitlit: {len(skipped)} skipped image(s) listed in {where / 'skipped_images.txt'}")
