"""Checkpoint files that survive a kill during the save, and load errors that say what is wrong with the file."""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol

from vitlit.errors import ConfigError

# What torch.load raises on a truncated, foreign or tampered-with file.
UNREADABLE = (RuntimeError, EOFError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's TorchCheckpointIO, with saves that are atomic on the checkpoint's own file system.

    Lightning (2.6) serialises the checkpoint into memory, writes it to a temporary file in the system's temp
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
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # A leading dot keeps the partial file out of `*.ckpt` globs (and out of Lightning's own checkpoint search).
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)
        # Partial files of earlier, killed writers of this same target (each target has one writer: rank 0).
        for stale in target.parent.glob(f".{target.name}.*.tmp"):
            stale.unlink(missing_ok=True)

    def load_checkpoint(
        self,
        path: str | Path,
        map_location: Callable | None = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        if _is_local_file_protocol(path) and not Path(path).is_file():
            raise ConfigError(f"checkpoint {path} does not exist; give the path of a .ckpt file of an earlier run.")
        try:
            checkpoint = super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        except UNREADABLE as err:
            raise unreadable_checkpoint(path, err) from None
        if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
            raise ConfigError(
                f"checkpoint {path} is not a Lightning checkpoint (no state_dict); for plain timm weights use "
                f"--model.pretrained_file instead."
            )
        return checkpoint


def unreadable_checkpoint(path: str | Path, err: BaseException) -> ConfigError:
    """The one-line error for a checkpoint file that ``torch.load`` refused with ``err`` (one of `UNREADABLE`)."""
    if isinstance(err, pickle.UnpicklingError) and "weights_only" in str(err):
        return ConfigError(
            f"checkpoint {path} holds Python objects besides tensors, which weights-only loading refuses; "
            f"if you trust the file's origin, pass --weights_only false."
        )
    first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return ConfigError(
        f"checkpoint {path} cannot be read ({first_line[:120]}); it is truncated or not a PyTorch checkpoint: use an "
        f"earlier snapshot from the same checkpoints/ folder."
    )


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX); a power cut right after a save keeps the new file."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
