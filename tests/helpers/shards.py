"""A callback for the DDP tests' subprocesses: each process writes down which training images it gets each epoch."""

from __future__ import annotations

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
