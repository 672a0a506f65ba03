"""Checks of what only some runs are given, imported where they are given: a default run loads none of this.

Each refuses a value in one line (`vitlit.errors.ConfigError`) before anything is built on it.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml

from vitlit.errors import CheckFailed, ConfigError
from vitlit.text import say, shown


def check_loss(loss: Any, num_classes: int, label_smoothing: float | None = None) -> None:
    """Refuse a loss of the user's that does not take (logits, class indices) and give one number, or smoothing.

    Tried on what it will get, before the run starts: a regression loss or ``reduction: none`` would otherwise fail,
    or silently train on something else, at the first step. ``label_smoothing`` is the default cross-entropy's.
    """
    if label_smoothing:
        raise ConfigError(
            f"label_smoothing={label_smoothing} is for the default cross-entropy, but loss is "
            f"{type(loss).__name__}; give the smoothing to that loss and pass --model.label_smoothing 0."
        )
    try:
        with warnings.catch_warnings():  # MSELoss warns of broadcasting before it fails: the line below says it
            warnings.simplefilter("ignore")
            value = loss(torch.zeros(2, num_classes), torch.zeros(2, dtype=torch.long))
        problem = None if value.numel() == 1 else f"it gives shape {tuple(value.shape)}, not one number"
    except Exception as err:
        problem = str(err).splitlines()[0][:120]
    if problem:
        raise ConfigError(
            f"loss {type(loss).__name__} does not fit logits of shape (batch, {num_classes}) and class indices "
            f"({problem}); use a classification loss such as torch.nn.CrossEntropyLoss."
        )


#: Keys that do not make a run another experiment: the optimizer and the schedule, which a resume restores from the
#: checkpoint (`vitlit.runs.batch_size.BatchSizeSearch` also rewrites the rate in the saved config), the batch the
#: search rewrites, and the model's keys that the CLI links from the data (`vitlit.cli.VitLitCLI`), which the data's
#: own keys decide.
REWRITTEN = ("data.init_args.batch_size", "model.init_args.optimizer", "model.init_args.scheduler",
             *(f"model.init_args.{key}" for key in ("num_classes", "class_names", "img_size", "in_chans", "input_mean",
                                                    "input_std", "input_crop_pct", "input_interpolation")))  # fmt: skip


#: What a resume restores from the checkpoint, whatever the config says: a change there would silently not apply.
RESTORED = ("model.init_args.optimizer", "model.init_args.scheduler")


def differs(saved: Path, config: Mapping[str, Any], only: tuple[str, ...] = ()) -> str | None:
    """The first setting of the model or the data where the run config ``saved`` is not ``config``; ``None`` if none.

    What ``--ckpt_path last`` and ``auto`` compare before they take a run's checkpoint: another experiment under the
    same root (another data set, model or recipe) is never continued. ``only`` compares those keys alone (their
    prefixes), `REWRITTEN` left out of them too.
    """
    try:
        theirs = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return "its config.yaml (unreadable)"
    ours = {key: config.get(key) for key in ("model", "data")}
    ours = json.loads(
        json.dumps({k: v.as_dict() if hasattr(v, "as_dict") else v for k, v in ours.items()}, default=str)
    )
    skip: tuple[str, ...] = REWRITTEN
    if only:  # BatchSizeSearch's rewrite of the batch and the rate is the run's own
        searched = "BatchSizeSearch" in str((theirs.get("trainer") or {}).get("callbacks"))
        skip = ("data.init_args.batch_size", "model.init_args.optimizer.init_args.lr") if searched else ()
    theirs = json.loads(json.dumps({key: theirs.get(key) for key in ("model", "data")}, default=str))
    return _first_difference(ours, theirs, "", skip, only)


def _first_difference(ours: Any, theirs: Any, key: str, skip: tuple[str, ...], only: tuple[str, ...]) -> str | None:
    if key.startswith(skip) or (only and key and not any(key.startswith(o) or o.startswith(key) for o in only)):
        return None
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for name in sorted(set(ours) | set(theirs)):
            found = _first_difference(ours.get(name), theirs.get(name), f"{key}.{name}" if key else name, skip, only)
            if found:
                return found
        return None
    return None if ours == theirs else f"{key}: {shown(theirs)!r} there, {shown(ours)!r} here"


def check_resumed_settings(ckpt_path: str, run: Path, config: Mapping[str, Any]) -> None:
    """Refuse a fit resumed from ``run`` whose optimizer or schedule differs from the one the run last trained with.

    A resume restores both from the checkpoint (Lightning's), so a changed learning rate or warmup would be silently
    ignored while the resume's saved config recorded it. The run's newest saved config is compared (a resume's
    ``config.resume-K.yaml``); `vitlit.runs.batch_size.BatchSizeSearch`'s rewrite of the rate is the run's own.
    """
    resumes = [
        int(m.group(1))
        for p in run.glob("config.resume-*.yaml")
        if (m := re.fullmatch(r"config\.resume-(\d+)\.yaml", p.name))
    ]
    saved = run / (f"config.resume-{max(resumes)}.yaml" if resumes else "config.yaml")
    found = differs(saved, config, only=RESTORED) if saved.is_file() else None
    if found is not None:
        raise ConfigError(f"--ckpt_path {ckpt_path} resumes {run}, whose optimizer or schedule differs ({found}); a "
                          f"resume continues the checkpoint's, so the change would not apply: drop it to resume, or "
                          f"start a fresh run with --ckpt_path none.")  # fmt: skip


def newest_checkpoint(ckpt_path: str, root: Path, config: Mapping[str, Any] | None) -> Path | None:
    """``--ckpt_path last`` or ``auto``: the newest ``last.ckpt`` under ``root`` of a run of this config, or ``None``.

    A run of this config has ``config``'s model and data (`differs`); ``auto`` starts afresh where there is none, said
    in one line where other runs are there.

    Raises:
        ConfigError: For ``last`` where no run of this config has a ``last.ckpt``.
    """
    found = sorted((p for p in root.glob("*/checkpoints/last.ckpt") if p.is_file()), key=lambda p: -p.stat().st_mtime)
    if found and config is not None:  # only this experiment's runs
        other = {p: differs(p.parent.parent / "config.yaml", config) for p in found}
        if all(other.values()):  # every run here is another experiment's
            newest = found[0].parent.parent
            if ckpt_path == "last":
                raise ConfigError(f"--ckpt_path last: no run under {root} has this run's config (the newest, "
                                  f"{newest.name}, differs in {other[found[0]]}); give its checkpoint's path to "
                                  f"resume it anyway.")  # fmt: skip
            say(f"vitlit: --ckpt_path auto: no run under {root} has this run's config (the newest, {newest.name}, "
                f"differs in {other[found[0]]}): a fresh start", error=True)  # fmt: skip
        found = [p for p in found if other[p] is None]
    if not found and ckpt_path == "last":
        raise ConfigError(f"--ckpt_path last found no last.ckpt under {root}; give a checkpoint path, or check "
                          f"--trainer.default_root_dir.")  # fmt: skip
    return found[0] if found else None


def check_budget(budget: Any) -> None:
    """Refuse a ``--trainer.max_time`` that would train nothing or overflow a clock (Lightning's Timer takes both)."""
    from datetime import timedelta

    try:  # the parsed duration, as Lightning's Timer reads it (a DD:HH:MM:SS string, or timedelta's keys)
        span = timedelta(**budget) if isinstance(budget, dict) else timedelta(
            **dict(zip(("days", "hours", "minutes", "seconds"), map(int, budget.split(":")), strict=True)))  # fmt: skip
    except OverflowError:
        raise ConfigError(
            f"--trainer.max_time={budget} is longer than a clock counts; leave it out for no limit."
        ) from None
    except (AttributeError, TypeError, ValueError):
        return  # not a duration: Lightning's Timer says which format it takes
    if span.total_seconds() <= 0:
        raise ConfigError(f"--trainer.max_time={budget} would train nothing; give a time budget such as 00:12:00:00.")


def check_data_options(
    in_chans: int, mean: Any, std: Any, augment: str, crop_scale: Any, crop_ratio: Any, batch_augment: Any,
    batch_size: int,
) -> None:  # fmt: skip
    """Refuse data options given that cannot work together (`vitlit.data.base`'s arguments, where any is given)."""
    for name, values in (("mean", mean), ("std", std)):
        if values is not None and len(values) != in_chans:
            raise ConfigError(
                f"{name}={list(values)} has {len(values)} value(s) but the images have {in_chans} channel(s); "
                f"give one per channel, e.g. --data.{name} [{','.join(['0.5'] * in_chans)}]."
            )
    if augment != "none" and in_chans not in (1, 3):  # torchvision's colour operations
        raise ConfigError(f"augment={augment!r} needs 1 or 3 channels (torchvision's colour operations), but "
                          f"in_chans={in_chans}; pass --data.augment none.")  # fmt: skip
    scale, ratio = tuple(crop_scale), tuple(crop_ratio)
    # Past 1:100 no box of the scale fits an image, and every draw would fall back to the centre crop.
    if not 0 < scale[0] <= scale[1] <= 1 or not 0.01 <= ratio[0] <= ratio[1] <= 100:
        raise ConfigError(f"crop_scale={list(scale)} or crop_ratio={list(ratio)} is not a range [low, high] with "
                          f"0 < low <= high (<= 1 for the scale, 0.01 to 100 for the ratio); e.g. [0.08, 1.0] and "
                          f"[0.75, 1.333].")  # fmt: skip
    if getattr(batch_augment, "mixes", False) and batch_size % 2:
        raise ConfigError(f"batch_size={batch_size} is odd, but Mixup/CutMix mix images in pairs; use an even size.")


def check_metrics(subcommand: str, metrics: Mapping[str, torch.Tensor]) -> None:
    """A validate or test whose loss or accuracy is NaN or infinite fails (status 1) rather than exiting 0."""
    bad = [f"{k} {float(v)}" for k, v in metrics.items() if v.numel() == 1 and not math.isfinite(float(v))]
    if bad:
        raise CheckFailed(f"{subcommand} gave {', '.join(bad)}: the model's outputs are not finite numbers; evaluate "
                          f"an earlier checkpoint of the run (its checkpoints/ folder) or one trained with "
                          f"--trainer.precision 32")  # fmt: skip


def check_memory_source(size: str, need: int, free: int | None, device: torch.device) -> bool:
    """Refuse ``--data.source memory`` where the splits (``need`` bytes as stored) cannot fit at all; else ``True``.

    In host memory the decoded images and the splits' copies both live, so a CPU needs twice the stored bytes.
    """
    need *= 2 if device.type == "cpu" else 1
    if free is not None and need > free:
        raise ConfigError(f"--data.source memory: the {size} ({need / 2**30:,.1f} GB with copies), more than the "
                          f"{free / 2**30:,.1f} GB free on {device}; use --data.source auto (or workers), or a "
                          f"smaller --data.img_size.")  # fmt: skip
    return True


def check_new_folder(path: Path, folder: str | Path, flag: str) -> None:
    """Refuse ``path`` (typed as ``folder`` for ``flag``) where it cannot be created and written to, naming why.

    The name of each part fits every common file system (NAME_MAX), the whole leaves room for a run's files
    (`vitlit.config.PATH_ROOM`), no part is a dangling link, and the nearest part that exists is a folder this user
    may write to.
    """
    from vitlit import config

    if any(len(os.fsencode(part)) > 255 for part in path.parts):
        raise ConfigError(f"{flag}={folder} has a name of over 255 characters, more than a folder's name may have.")
    if len(os.fsencode(str(path))) > config.PATH_ROOM:
        raise ConfigError(f"{flag} is {len(str(path))} characters long, too long for the run's files below it; give "
                          f"a shorter folder.")  # fmt: skip
    existing = path
    while not existing.exists():
        if existing.is_symlink():
            raise ConfigError(f"{flag}={folder}: {existing} is a symbolic link to {os.readlink(existing)}, which does "
                              f"not exist; create its target or give another folder.")  # fmt: skip
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag}={folder} lies inside {existing}, which is a file; give a folder.")
    if not config.writable(existing):
        raise ConfigError(f"{flag}={folder}: {existing} is not writable for this user; give a folder you can write to.")


def check_drawn_seed(environ: Mapping[str, str]) -> None:
    """Refuse ``--seed_everything true`` where torchrun or SLURM started several processes: each would draw its own."""
    started = max(int(environ.get(name, "1") or 1) for name in ("WORLD_SIZE", "SLURM_NTASKS"))
    if started > 1 and "PL_GLOBAL_SEED" not in environ:
        raise ConfigError(f"--seed_everything=true gives each of the {started} processes its own random seed, so "
                          f"their data shards would overlap; give a number (e.g. --seed_everything 42).")  # fmt: skip


def check_half_precision(precision: str, accelerator: str) -> None:
    """Refuse fp16 (``16-mixed``) on the CPU, which Lightning would take and then fail on."""
    gpu = torch.cuda.is_available() or torch.backends.mps.is_available()
    if accelerator == "cpu" or (accelerator == "auto" and not gpu):
        raise ConfigError(f"--trainer.precision {precision} needs a GPU, and this run is on the CPU; CPUs run "
                          f"bf16-mixed or 32-true (--trainer.precision bf16-mixed).")  # fmt: skip
