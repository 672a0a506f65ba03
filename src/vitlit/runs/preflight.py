"""`Preflight`: checks of the Trainer settings and the run's folder, before the run starts or writes anything.

Lightning accepts values that end a run in a ZeroDivisionError deep inside its loops (``accumulate_grad_batches
0``, ``log_every_n_steps 0``), that silently do nothing and exit 0 (``max_steps 0``, ``limit_train_batches 0``, a
negative ``gradient_clip_val``), or that it quietly replaces (``16-mixed`` on a CPU becomes bf16). Each is refused
here with one line naming the flag and the fix, before a ``version_N`` folder exists (the callback comes first in
this part's ``defaults.yaml``, before `vitlit.runs.placement.RunFolders`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from vitlit.errors import ConfigError
from vitlit.runs.folders import config_saver

_PATH_MAX = 4096  # Linux's; macOS allows 1024, Windows (long paths on) more: the common bound


def _positive_or_unlimited(settings: Mapping[str, Any], name: str) -> None:
    value = settings.get(name)
    if value is not None and value != -1 and value < 1:
        raise ConfigError(f"--trainer.{name}={value} would train nothing; give a positive number (-1: no limit).")


def check_trainer(settings: Mapping[str, Any]) -> None:
    """Refuse Trainer settings that crash, silently do nothing, or are silently replaced.

    Args:
        settings: The ``trainer`` section of the parsed config (plain values, before instantiation).

    Raises:
        ConfigError: Naming the first bad flag, its value and the fix.
    """
    for name in ("accumulate_grad_batches", "log_every_n_steps"):
        value = settings.get(name)
        if value is not None and value < 1:
            raise ConfigError(f"--trainer.{name}={value} must be at least 1.")
    _positive_or_unlimited(settings, "max_steps")
    _positive_or_unlimited(settings, "max_epochs")
    limit = settings.get("limit_train_batches")
    if limit is not None and (limit <= 0 or (isinstance(limit, float) and limit > 1.0)):
        raise ConfigError(
            f"--trainer.limit_train_batches={limit} would train nothing; give a number of batches (1 or more) or a "
            f"fraction in (0, 1]."
        )
    clip = settings.get("gradient_clip_val")
    if clip is not None and clip < 0:
        raise ConfigError(
            f"--trainer.gradient_clip_val={clip} is negative; give a positive norm (e.g. 1.0), or 0 for none."
        )
    check_precision(str(settings.get("precision")), str(settings.get("accelerator")))


def check_precision(precision: str, accelerator: str) -> None:
    """Refuse fp16 mixed precision where there is no GPU; Lightning would silently train in bf16 instead.

    Args:
        precision: The Trainer's ``precision`` flag.
        accelerator: The Trainer's ``accelerator`` flag (``auto`` resolves to the CPU when there is no GPU).
    """
    on_cpu = accelerator == "cpu" or (
        accelerator == "auto" and not torch.cuda.is_available() and not torch.backends.mps.is_available()
    )
    if precision in ("16-mixed", "16") and on_cpu:
        raise ConfigError(
            f"--trainer.precision {precision} needs a GPU, and this run is on the CPU; CPUs run bf16-mixed or 32-true "
            f"(--trainer.precision bf16-mixed)."
        )


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def check_writable_folder(folder: str | Path, flag: str = "--trainer.default_root_dir") -> None:
    """Refuse a folder that cannot be created or written to, before a run starts writing into it.

    Args:
        folder: The folder the run writes into (it may not exist yet).
        flag: The option that named it, for the message.
    """
    path = Path(folder).expanduser().absolute()
    for part in path.parts:
        if len(os.fsencode(part)) > 255:  # NAME_MAX of every common file system
            raise ConfigError(f"{flag}={folder} has a name of {len(part)} characters, over the 255 a folder may have.")
    # PATH_MAX (4096 on Linux), less what a run adds below it (lightning_logs/version_N/checkpoints/<file>.ckpt).
    if len(os.fsencode(str(path))) > _PATH_MAX - 200:
        raise ConfigError(
            f"{flag} is {len(str(path))} characters long; with the run's own folders and files below it that is over "
            f"the {_PATH_MAX} a path may have; give a shorter folder."
        )
    existing = path
    while not existing.exists():  # the nearest part of the path that exists must be a writable folder
        if existing.is_symlink():
            raise ConfigError(
                f"{flag}={folder}: {existing} is a symbolic link to {os.readlink(existing)}, which does not exist; "
                f"create its target or give another folder."
            )
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag}={folder} lies inside {existing}, which is a file; give a folder.")
    if not _writable(existing):
        raise ConfigError(f"{flag}={folder}: {existing} is not writable for this user; give a folder you can write to.")


class Preflight(Callback):
    """Run `check_trainer` and `check_writable_folder` on the run's settings as parsed, before the run starts.

    The vitlit CLI calls `before_run` once the classes are built (Lightning has already replaced some values, such
    as ``16-mixed`` on a CPU, so the settings are read as the user gave them: from the CLI's SaveConfigCallback).
    """

    def before_run(self, trainer: Trainer, pl_module: LightningModule, stage: str, ckpt: Path | None) -> None:
        """Refuse bad Trainer settings and an unwritable ``default_root_dir`` in one line."""
        saver = config_saver(trainer)
        settings = dict(saver.config.get("trainer") or {}) if saver is not None else {}
        check_trainer(settings)
        check_writable_folder(settings.get("default_root_dir") or trainer.default_root_dir)
