"""Checkpoint files that survive a kill during the save, and load errors that say what is wrong with the file."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from vitlit.checkpoints import UNREADABLE, disk_full
from vitlit.errors import ConfigError
from vitlit.private import is_local_path
from vitlit.runs.atomic import replacing
from vitlit.runs.resume import require_checkpoint_file, require_lightning_checkpoint, unreadable_checkpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's TorchCheckpointIO, with saves that are atomic on the checkpoint's own file system.

    Lightning serialises the checkpoint into memory, writes it to a temporary file in the system's temp
    directory and moves it into place. Where that directory lies on another file system (a tmpfs ``/tmp``, a scratch
    disk), the move is a copy, and a kill during the copy leaves a truncated ``last.ckpt``: the one file a resume
    needs. Here the temporary file sits next to its target, is flushed to disk, and ``os.replace`` swaps it in, so a
    reader sees the old file or the new one, never a part. The checkpoint is streamed to disk rather than held twice
    in memory. Remote paths (``s3://``, ...) keep Lightning's own handling. The vitlit CLI installs this plugin
    unless the Trainer's ``plugins`` name another CheckpointIO.

    Loading is Lightning's, with ``weights_only`` as the caller asks (Lightning resumes with ``weights_only=True``:
    tensors and plain values only, so a checkpoint cannot run code); an unreadable file raises one ``ConfigError``
    that names it and the way out.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        if storage_options is not None or not is_local_path(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with replacing(target) as tmp, tmp.open("wb") as f:
                # Through a Python file object, not the path: then an OSError of the write (a full disk) stays
                # attached to the RuntimeError that torch's zip writer raises for it, and `disk_full` can tell.
                torch.save(checkpoint, f)
        except (OSError, RuntimeError) as err:
            full = disk_full(err)
            if full is None:
                raise
            free = shutil.disk_usage(target.parent).free / 2**30
            raise ConfigError(
                f"saving {target} failed: {full} ({free:.2f} GiB free; the previous checkpoints are intact); free "
                f"some space or set --trainer.default_root_dir to a larger disk, then resume."
            ) from None
        # Partial files of earlier, killed writers of this same target (each target has one writer: rank 0).
        for stale in target.parent.glob(f".{target.name}.*.tmp"):
            stale.unlink(missing_ok=True)

    def load_checkpoint(
        self,
        path: str | Path,
        map_location: Callable | None = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        if is_local_path(path):
            require_checkpoint_file(path)
        try:
            checkpoint = super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        except UNREADABLE as err:
            raise unreadable_checkpoint(path, err, weights_only) from None
        return require_lightning_checkpoint(checkpoint, path)
