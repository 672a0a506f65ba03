"""Checks on the Trainer settings and the run's folder, made after parsing and before anything is built or written.

Lightning accepts values that end a run in a ZeroDivisionError deep inside its loops (``accumulate_grad_batches
0``, ``log_every_n_steps 0``), that silently do nothing and exit 0 (``max_steps 0``, ``limit_train_batches 0``, a
negative ``gradient_clip_val``), or that it quietly replaces (``16-mixed`` on a CPU becomes bf16). Each is refused
here with one line naming the flag and the fix, before a ``version_N`` folder exists.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vitlit.errors import ConfigError

_PATH_MAX = 4096  # Linux's; macOS allows 1024, Windows (long paths on) more: the common bound
_SEED_RANGE = (0, 2**32 - 1)  # what NumPy's seeding, and so Lightning's seed_everything, accepts


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


def check_seed(seed: Any) -> None:
    """Refuse a ``seed_everything`` value outside what NumPy accepts (``true``/``false``/``null`` are fine)."""
    if isinstance(seed, bool) or seed is None:
        return
    low, high = _SEED_RANGE
    if not low <= seed <= high:
        raise ConfigError(f"--seed_everything={seed} is outside {low}..{high}; give a seed in that range, e.g. 42.")


def check_seed_shared(seed: Any, environ: Mapping[str, str] = os.environ) -> None:
    """Refuse a seed each process would draw for itself when torchrun or SLURM started several (DDP).

    With ``seed_everything: true`` every process picks a random seed; Lightning's own launcher hands the first one's
    to the processes it starts (``PL_GLOBAL_SEED``), but processes that torchrun or SLURM start together each pick
    their own, and their samplers would then shuffle differently: shards that overlap and leave images out.
    """
    started = max(int(environ.get(name, "1") or 1) for name in ("WORLD_SIZE", "SLURM_NTASKS"))
    if seed is True and started > 1 and "PL_GLOBAL_SEED" not in environ:
        raise ConfigError(
            f"--seed_everything=true gives each of the {started} processes its own random seed, so their data "
            f"shards would overlap; give a number (e.g. --seed_everything 42)."
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
