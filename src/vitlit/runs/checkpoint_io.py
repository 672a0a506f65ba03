"""Checkpoint files that survive a kill or a full disk during the save, and load errors that name the file.

Lightning writes a checkpoint to a temporary file in the system's temp directory and moves it into place. Where that
directory lies on another file system (a tmpfs ``/tmp``, a scratch disk) the move is a copy, and a kill during the
copy leaves a truncated ``last.ckpt``: the one file a resume needs. Here the temporary file sits next to its target,
is flushed, and ``os.replace`` swaps it in (`vitlit.atomic`): a reader sees the old file or the new one. Remote paths
(``s3://``, ...) keep Lightning's own handling.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from vitlit.atomic import replacing
from vitlit.exits import save_failed
from vitlit.private import is_local_path


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's TorchCheckpointIO with saves that are atomic on the checkpoint's own file system."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        if storage_options is not None or not is_local_path(path):
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
        if not is_local_path(path):
            return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        from vitlit.checkpoints import read_checkpoint  # a resume only

        return read_checkpoint(path, weights_only, mmap=False)
