"""Where a run's checkpoints and config are, and the command that resumes it; what a failed save or load means.

Choosing and checking the checkpoint a run starts from (``--ckpt_path last|auto``, damaged files) is the opt-in
part `vitlit.runs.resume`; without it ``--ckpt_path`` goes to Lightning as it is.
"""

from __future__ import annotations

import errno
import pickle
import zipfile
from pathlib import Path

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

# What torch.load raises on a truncated, foreign or tampered-with file.
UNREADABLE = (RuntimeError, EOFError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile)


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


def is_run_dir(folder: Path) -> bool:
    """Whether ``folder`` is a run's folder (a logger wrote its config or hyperparameters there)."""
    return (folder / "config.yaml").is_file() or (folder / "hparams.yaml").is_file()


def run_of_checkpoint(ckpt_path: Path) -> Path | None:
    """The run folder a checkpoint belongs to (``<run>/checkpoints/<file>.ckpt``), or ``None`` for a loose file."""
    run_dir = ckpt_path.parent.parent
    return run_dir if ckpt_path.parent.name == "checkpoints" and is_run_dir(run_dir) else None


def logger_root(logger: Logger | None) -> Path | None:
    """The folder whose ``version_*`` subfolders a TensorBoardLogger/CSVLogger writes (``save_dir/name``)."""
    if isinstance(logger, (TensorBoardLogger, CSVLogger)):
        return Path(logger.root_dir).expanduser().resolve()
    return None


def checkpoint_folders(trainer: Trainer) -> set[Path]:
    """The folders the Trainer's ModelCheckpoints write to: set in the config, or resolved once fit started."""
    return {Path(cb.dirpath) for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath}


def config_saver(trainer: Trainer) -> SaveConfigCallback | None:
    """The CLI's SaveConfigCallback of ``trainer``: the run's config as parsed, and the file it is saved under."""
    return next((cb for cb in trainer.callbacks if isinstance(cb, SaveConfigCallback)), None)


def resume_hint(trainer: Trainer, program: str = "vitlit") -> str:
    """The command that resumes a stopped run (its checkpoint was saved on the way out), or why there is none."""
    saved = [p for folder in checkpoint_folders(trainer) for p in folder.glob("*.ckpt")]
    # The logger's folder, not trainer.log_dir: under DDP that is a collective, and this runs on the way out.
    log_dir = trainer.logger.log_dir if trainer.logger is not None else None
    if not saved or log_dir is None:
        return "no checkpoint was written, so there is nothing to resume."
    saver = config_saver(trainer)
    config = Path(log_dir) / (saver.config_filename if saver is not None else "config.yaml")
    newest = max(saved, key=lambda p: (p.name == "last.ckpt", p.stat().st_mtime))  # last.ckpt: written on the way out
    return f"resume with: python -m {program} fit --config {config} --ckpt_path {newest}"
