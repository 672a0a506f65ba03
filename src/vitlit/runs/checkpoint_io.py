"""Checkpoints: written whole or not at all, and carrying the random state a resumed run continues with.

Lightning writes a checkpoint to a temporary file in the system's temp directory and moves it into place. Where that
directory lies on another file system (a tmpfs ``/tmp``, a scratch disk) the move is a copy, and a kill during the
copy leaves a truncated ``last.ckpt``: the one file a resume needs. Here (`AtomicCheckpointIO`) the temporary file
sits next to its target, is flushed, and ``os.replace`` swaps it in (`vitlit.atomic`): a reader sees the old file or
the new one. Remote paths (``s3://``, ...) keep Lightning's own handling.

Exact resume (`RNGStateCheckpoint`): Lightning restores model, optimizer, scheduler and loop counters, but not the
generators behind shuffling, augmentation, Mixup and drop path, so a resumed run would draw other random numbers than
the run it continues. With the generators' state in every checkpoint, a run resumed from an end-of-epoch checkpoint
(``last.ckpt``) continues with the very numbers the stopped run would have drawn: on the CPU with
``deterministic: true`` it ends with the same weights. A run folder moved or copied keeps its best checkpoints.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from fsspec.utils import get_protocol
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch import Callback, LightningModule, Trainer

from vitlit.atomic import replacing
from vitlit.exits import save_failed
from vitlit.optim import length_reached, steps_per_epoch, total_steps
from vitlit.text import say


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's TorchCheckpointIO with saves that are atomic on the checkpoint's own file system."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        # A remote path (s3://, ...) as Lightning tells it, by its fsspec protocol: Lightning's own handling.
        if storage_options is not None or get_protocol(str(path)) != "file":
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with replacing(target) as tmp, tmp.open("wb") as f:
                # Through a file object, not the path: an OSError of the write (a full disk) then stays attached to
                # the RuntimeError torch's zip writer raises for it, and `disk_full` can tell.
                torch.save(checkpoint, f)
        except (OSError, RuntimeError) as err:
            refused = save_failed(err, target)  # a full disk's one line, or None: the error as it is
            if refused is None:
                raise
            raise refused from None
        for stale in target.parent.glob(f".{target.name}.*.tmp"):  # left by a writer killed mid-save (one per target)
            stale.unlink(missing_ok=True)

    def load_checkpoint(
        self, path: str | Path, map_location: Callable | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if get_protocol(str(path)) != "file":
            return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        from vitlit.checkpoints import read_checkpoint  # a resume only

        return read_checkpoint(path, weights_only, mmap=False)


class RNGStateCheckpoint(Callback):
    """Save torch's (CPU and CUDA), NumPy's and Python's generator states in checkpoints; restore them on resume.

    Nothing random happens in DataLoader workers (every augmentation runs on the training device, from torch's
    generator there, which is saved), and the loaders' shuffle follows the run's seed and the epoch
    (`vitlit.data.base.ImageClassificationDataModule.sampler`), so both sources resume alike. It also says so when
    a resumed run keeps the learning-rate schedule of a run of another length (the checkpoint's), and saves
    ``last.ckpt`` at the fit's end where no checkpoint holds its last step (`on_train_epoch_end`).
    """

    #: The step training started at and the step of the last checkpoint saved (`on_train_epoch_end`).
    _steps: tuple[int, int] = (-1, -1)

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

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        """A run folder moved or copied keeps its best checkpoints: their states are read as this folder's.

        Each ModelCheckpoint's state names the folder it saved into. Where that is not this run's ``checkpoints/``,
        Lightning forgets the best k, so the next validation became "best" however it scored. Called before the
        callbacks load their states; only where every file the state names is in this folder.
        """
        for callback in trainer.checkpoint_callbacks:
            state = checkpoint.get("callbacks", {}).get(callback.state_key)
            here = getattr(callback, "dirpath", None)
            if not isinstance(state, dict) or here is None or state.get("dirpath") in (None, here):
                continue
            best = {os.path.join(here, os.path.basename(p)): s for p, s in (state.get("best_k_models") or {}).items()}
            if all(os.path.isfile(path) for path in best):
                paths = ("best_model_path", "kth_best_model_path", "last_model_path")
                state.update({key: os.path.join(here, os.path.basename(state[key])) for key in paths if state.get(key)})
                state.update(dirpath=here, best_k_models=best)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        self._steps = (self._steps[0], trainer.global_step)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Save ``last.ckpt`` where the fit ends with this epoch and its last steps were never saved.

        The shared ``last`` ModelCheckpoint saves after each validation (or at an epoch's end). With
        ``check_val_every_n_epoch`` over 1 or ``val_check_interval`` under 1, a fit that ``max_steps`` or
        ``max_time`` ends between two validations exited 0 with an older ``last.ckpt``, or none. Saved here, where
        Lightning's own epoch-end checkpoints are (the epoch not yet counted as completed), so it resumes as they do.
        """
        started, saved = self._steps
        last = [cb for cb in trainer.checkpoint_callbacks  # a last-only one, not a best one named "last"
                if getattr(cb, "filename", None) == "last" and getattr(cb, "monitor", "") is None
                and cb.dirpath]  # fmt: skip
        ending = length_reached(trainer, trainer.current_epoch + 1) or trainer.should_stop
        # Steps trained, none saved at the last; a fast_dev_run's checkpoints Lightning never saves.
        if last and ending and not trainer.fast_dev_run and trainer.global_step not in (started, saved):
            trainer.save_checkpoint(last[0].format_checkpoint_name({}))

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """On a resume, say in one line where it differs from the run it continues: mid-epoch, another schedule length.

        Lightning's own warning of a mid-epoch resume is left out of the log (`vitlit.cli.quiet`).
        """
        self._steps = (trainer.global_step, self._steps[1])
        if trainer.ckpt_path is None or not trainer.is_global_zero:  # a resume only
            return
        per_epoch = steps_per_epoch(trainer)
        if per_epoch:
            done = trainer.global_step - trainer.current_epoch * per_epoch
            where = f"vitlit: resuming in the middle of epoch {trainer.current_epoch} ({done} of {per_epoch} steps)"
            if 0 < done < per_epoch and getattr(trainer.datamodule, "resumes_in_place", False):  # a LitData stream
                say(f"{where} at its place in the stream: the rest of the epoch has the samples the stopped run would "
                    f"have had", error=True)  # fmt: skip
            elif 0 < done < per_epoch:
                say(f"{where}: the rest of it draws new batches, so the run is not bit-identical to one never stopped "
                    f"(end-of-epoch checkpoints are)", error=True)  # fmt: skip
        kept, total = getattr(pl_module.lr_schedulers(), "total_steps", None), total_steps(trainer)
        # A callback that sizes the schedule again as the resume runs (`vitlit.runs.budget.TimeBudget`): not kept.
        resized = any(getattr(cb, "sizes_schedule", False) for cb in trainer.callbacks)
        if kept and total and kept != total and not resized:
            say(f"vitlit: resumed with the learning-rate schedule of the checkpoint's run ({kept} steps; this run has "
                f"{total}); steps after its end keep the final learning rate", error=True)  # fmt: skip
