"""Checkpoint files that survive a kill during the save, and load errors that say what is wrong with the file."""

from __future__ import annotations

import errno
import pickle
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from vitlit.atomic import replacing
from vitlit.errors import ConfigError
from vitlit.private import is_local_path

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


def require_checkpoint_file(path: str | Path) -> Path:
    """Return ``path`` if it is a file that can hold a PyTorch checkpoint; raise a one-line `ConfigError` if not."""
    file = Path(path).expanduser()
    if file.is_dir():
        found = sorted(file.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)
        hint = f", e.g. {found[-1]}" if found else ""
        raise ConfigError(f"--ckpt_path {path} is a folder; give a .ckpt file in it{hint}.")
    if file.exists() and not file.is_file():
        raise ConfigError(f"checkpoint {path} is not a regular file (a device, a pipe); give a .ckpt file.")
    if not file.is_file():
        raise ConfigError(f"checkpoint {path} does not exist; give the path of a .ckpt file of an earlier run.")
    try:
        with file.open("rb") as f:
            head = f.read(4)
    except OSError as err:
        raise ConfigError(f"checkpoint {path} cannot be opened ({err.strerror}); check its permissions.") from None
    # torch.save writes a zip archive (PK..); files of torch < 1.6 are a bare pickle (protocol 2+: 0x80).
    if not (head.startswith(ZIP_HEAD) or is_legacy(head)):
        raise ConfigError(
            f"checkpoint {path} is not a PyTorch checkpoint (it is {'empty' if not head else 'another kind of file'}); "
            f"give a .ckpt file that vitlit or Lightning saved."
        )
    return file


ZIP_HEAD = b"PK\x03\x04"


def is_legacy(head: bytes) -> bool:
    """Whether a file starting with ``head`` is in PyTorch's format from before 1.6 (a bare pickle, protocol 2+)."""
    return head[:1] == b"\x80"


def verify_checksums(path: Path) -> None:
    """Refuse a checkpoint whose bytes changed after it was saved (a flipped bit on disk, a damaged copy).

    ``torch.save`` writes a zip archive with a CRC-32 of every record, which ``torch.load`` does not check: a flipped
    byte inside a tensor loads silently as a different weight. Reading the file once to check them costs about as
    much as loading it.

    Raises:
        ConfigError: Naming the first damaged record, or a file cut short.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise unreadable_checkpoint(path, err) from None
    if damaged is not None:
        raise ConfigError(
            f"checkpoint {path} is damaged: its record {damaged} does not match the checksum saved with it (a disk "
            f"or copy error); use an earlier snapshot from the same checkpoints/ folder, or copy it again."
        )


def require_lightning_checkpoint(checkpoint: Any, path: str | Path) -> dict[str, Any]:
    """Return ``checkpoint`` if it is a Lightning checkpoint (it has a ``state_dict``); raise a `ConfigError` if not."""
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(
            f"checkpoint {path} is not a Lightning checkpoint (no state_dict); for plain timm weights use "
            f"--model.pretrained_file instead."
        )
    return checkpoint


def read_checkpoint(path: str | Path, weights_only: bool | None = True) -> dict[str, Any]:
    """Read a checkpoint's counters and hyperparameters without reading its tensors (memory-mapped), or refuse it.

    Used before a run starts, so that an unreadable, damaged or mismatched checkpoint stops it before anything is
    written. The file's checksums are checked first (`verify_checksums`). A file in PyTorch's format from before
    1.6 cannot be memory-mapped, so it is read whole.

    Args:
        path: The checkpoint file.
        weights_only: ``torch.load``'s ``weights_only``; ``None`` means ``True`` (``--weights_only`` unset).

    Raises:
        ConfigError: For a missing, foreign, truncated, damaged or non-Lightning file, naming it and the way out.
    """
    file = require_checkpoint_file(path)
    with file.open("rb") as f:
        legacy = is_legacy(f.read(1))
    if not legacy:
        verify_checksums(file)
    safe = weights_only is not False
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=safe, mmap=not legacy)
    except UNREADABLE as err:
        raise unreadable_checkpoint(path, err, safe) from None
    return require_lightning_checkpoint(checkpoint, path)


def checkpoint_step(path: str | Path) -> int | None:
    """The optimizer step a checkpoint was saved at, or ``None`` if the file cannot be read as a checkpoint."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])
    except Exception:  # any unreadable or foreign file simply has no known step
        return None


def unreadable_checkpoint(path: str | Path, err: BaseException, weights_only: bool | None = True) -> ConfigError:
    """The one-line error for a checkpoint file that ``torch.load`` refused with ``err`` (one of `UNREADABLE`)."""
    if weights_only is not False and isinstance(err, pickle.UnpicklingError) and "weights_only" in str(err):
        return ConfigError(
            f"checkpoint {path} holds Python objects besides tensors, which weights-only loading refuses; "
            f"if you trust the file's origin, pass --weights_only false."
        )
    return ConfigError(
        f"checkpoint {path} cannot be read ({_first_words(err)}); it is truncated or not a PyTorch checkpoint: use an "
        f"earlier snapshot from the same checkpoints/ folder."
    )


def _first_words(err: BaseException, limit: int = 100) -> str:
    """The first sentence of ``err``'s message, cut at a word boundary within ``limit`` characters."""
    text = " ".join(str(err).split()) or type(err).__name__
    text = text.split(". ")[0].rstrip(".")
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return text


def disk_full(err: BaseException) -> str | None:
    """What ran out, if ``err`` (or an error it was raised while handling) is a write refused for lack of space.

    torch's zip writer reports a failed write as ``RuntimeError: ... unexpected pos``; the OSError behind it is only
    its ``__context__``.
    """
    reasons = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
               errno.EFBIG: "the file is larger than this process may write (ulimit -f)"}  # fmt: skip
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in reasons:
            return reasons[err.errno]
        err = err.__cause__ or err.__context__
    return None
