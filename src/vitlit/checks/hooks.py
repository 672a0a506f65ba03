"""The checks part's hooks, named by pyproject.toml's ``vitlit.hooks`` entry points; `vitlit.cli` calls each one.

A fork may add its own checks the same way: a module (or object) with any of the hooks `vitlit.config.hooks` lists,
named by an entry point of that group.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vitlit.checks import images
from vitlit.checks.config_files import check_config_files
from vitlit.checks.reports import out_of_range, system_refused, unknown_flag
from vitlit.errors import ConfigError


def before_parsing(argv: list[str]) -> None:
    """Refuse config files jsonargparse would misreport, wait on, or expand for minutes (`check_config_files`)."""
    check_config_files(argv)


def after_parsing(subcommand: str, config: Any) -> None:
    """Check the parsed options of ``subcommand`` before any class is built."""
    check_seed(config.get("seed_everything"))  # before Lightning would silently replace it
    if subcommand == "fit":
        check_seed_shared(config.get("seed_everything"))
    check_ckpt_path_given(subcommand, config.get("ckpt_path"))


def parser_report(report: str, argv: list[str], usage: str) -> str | None:
    """One line for a jsonargparse report: an unknown flag with the nearest known one, a value out of range."""
    return unknown_flag(report, argv, usage) or out_of_range(report)


def error_line(err: BaseException) -> str | None:
    """One line for an error the user can fix that is not a `ConfigError`: a full disk, a refused path or class."""
    return system_refused(err)


def image_problem(path: Path, img_size: int | None) -> str | None:
    """Why an image file cannot be read, from its header and ending (`vitlit.checks.images.image_problem`)."""
    return images.image_problem(path, img_size)


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


_SEED_RANGE = (0, 2**32 - 1)  # what NumPy's seeding, and so Lightning's seed_everything, accepts


def check_seed(seed: Any) -> None:
    """Refuse a ``seed_everything`` value outside what NumPy accepts (``true``/``false``/``null`` are fine)."""
    if isinstance(seed, bool) or seed is None:
        return
    low, high = _SEED_RANGE
    if not low <= seed <= high:
        raise ConfigError(f"--seed_everything={seed} is outside {low}..{high}; give a seed in that range, e.g. 42.")


def check_ckpt_path_given(subcommand: str, ckpt_path: str | None) -> None:
    """Refuse an evaluation without ``--ckpt_path``: it would evaluate untrained weights without a word."""
    if ckpt_path is None and subcommand != "fit":
        raise ConfigError(
            f"{subcommand} without --ckpt_path would evaluate untrained weights; give a checkpoint (a run's "
            f"checkpoints/*.ckpt, or last), or --ckpt_path none to {subcommand} the model as it is built."
        )
