"""A callback for the DDP tests' subprocesses: each process writes down which training images it gets each epoch."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from lightning.pytorch import Callback, LightningModule, Trainer


class RecordShards(Callback):
    """Write ``<default_root_dir>/shard-<epoch>-<rank>.json``: the dataset positions this process trains on.

    Read from the training DataLoader's sampler (the DistributedSampler Lightning put in, after its ``set_epoch``),
    cut to the full batches the loader yields.
    """

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        loader = trainer.train_dataloader
        used = len(loader) * loader.batch_size
        positions = list(loader.sampler)[:used]
        path = Path(trainer.default_root_dir) / f"shard-{trainer.current_epoch}-{trainer.global_rank}.json"
        path.write_text(json.dumps(positions))


class RecordBatches(Callback):
    """Keep a fingerprint of every training image each process gets, batch by batch; write them when training ends.

    With the pipeline's random steps off (``--data.crop none --data.hflip false``), an image's normalised pixels name
    it. ``batches`` holds ``(epoch, step, [fingerprint, ...])``; a DDP process writes its own to
    ``<default_root_dir>/batches-<rank>.json``.
    """

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, list[str]]] = []

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: object, i: int) -> None:
        images = batch[0]
        prints = [hashlib.md5(image.float().cpu().numpy().tobytes()).hexdigest()[:16] for image in images]
        self.batches.append((trainer.current_epoch, trainer.global_step, prints))

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        path = Path(trainer.default_root_dir) / f"batches-{trainer.global_rank}.json"
        path.write_text(json.dumps(self.batches))
