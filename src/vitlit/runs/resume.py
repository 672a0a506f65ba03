"""Exact resume: the random-number generators' state in every checkpoint, restored with it.

Lightning restores model, optimizer, scheduler and loop counters, but not the generators behind shuffling,
augmentation, Mixup and drop path, so a resumed run draws other random numbers than the run it continues. With
`RNGStateCheckpoint`, a run resumed from an end-of-epoch checkpoint (``last.ckpt``) continues with the very numbers the
stopped run would have drawn: on the CPU with ``deterministic: true`` it ends with the same weights.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from vitlit.optim import total_steps
from vitlit.text import say


class RNGStateCheckpoint(Callback):
    """Save torch's (CPU and CUDA), NumPy's and Python's generator states in checkpoints; restore them on resume.

    Nothing random happens in DataLoader workers (every augmentation runs on the training device, from torch's
    generator there, which is saved), and the loaders' shuffle follows the run's seed and the epoch
    (`vitlit.data.base.ImageClassificationDataModule.sampler`), so both sources resume alike. It also says so when
    a resumed run keeps the learning-rate schedule of a run of another length (the checkpoint's).
    """

    def state_dict(self) -> dict[str, Any]:
        # Tensors, ints and tuples only: the checkpoint stays loadable with torch.load(weights_only=True).
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        return {
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": [torch.cuda.get_rng_state()] if torch.cuda.is_available() else [],  # this process's device
                "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
                "python": random.getstate(),
            }
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Restored at once: Lightning loads callback states before configure_optimizers, whose
        # estimated_stepping_batches creates the first training iterator (and draws its shuffle order). The sanity
        # check in between runs under isolate_rng, so the next draws are the ones the stopped run would have made.
        rng = state_dict["rng"]
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["cuda"][0])
        kind, keys, pos, has_gauss, cached = rng["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """On a resume, say in one line where it differs from the run it continues: mid-epoch, another schedule length.

        Lightning's own warning of a mid-epoch resume is left out of the log (`vitlit.runtime.quiet`).
        """
        if trainer.ckpt_path is None or not trainer.is_global_zero:  # a resume only
            return
        per_epoch = trainer.num_training_batches // max(trainer.accumulate_grad_batches, 1)
        if isinstance(per_epoch, int) and per_epoch:
            done = trainer.global_step - trainer.current_epoch * per_epoch
            where = f"vitlit: resuming in the middle of epoch {trainer.current_epoch} ({done} of {per_epoch} steps)"
            if 0 < done < per_epoch and getattr(trainer.datamodule, "resumes_in_place", False):  # a LitData stream
                say(f"{where} at its place in the stream: the rest of the epoch has the samples the stopped run would "
                    f"have had", error=True)  # fmt: skip
            elif 0 < done < per_epoch:
                say(f"{where}: the rest of it draws new batches, so the run is not bit-identical to one never stopped "
                    f"(end-of-epoch checkpoints are)", error=True)  # fmt: skip
        kept, total = getattr(pl_module.lr_schedulers(), "total_steps", None), total_steps(trainer)
        if kept and total and kept != total:
            say(f"vitlit: resumed with the learning-rate schedule of the checkpoint's run ({kept} steps; this run has "
                f"{total}); steps after its end keep the final learning rate", error=True)  # fmt: skip
