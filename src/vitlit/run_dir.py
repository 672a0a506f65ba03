"""Where a run writes, decided by the CLI before Lightning writes anything: one folder per run, never shared.

- A new ``fit`` gets the next free ``<root>/lightning_logs/version_N``. Lightning's loggers pick ``N`` by listing the
  folder, so two fits started at once would share one; here ``os.mkdir`` decides, which fails for all but one.
- A ``fit`` from a run's checkpoint continues that run: one TensorBoard curve, one ``checkpoints/`` folder, its config
  saved as ``config.resume-K.yaml`` beside the first. Where the run holds a checkpoint of a later step (resuming from
  the best one, say), it continues in a new folder instead, so that nothing newer is overwritten.
- ``validate``/``test``/``predict`` of a run's checkpoint write into ``<run>/<subcommand>/version_K``, unless
  ``--trainer.default_root_dir`` names another folder than the run's.

A fit's folder is locked (``flock``, on Windows ``msvcrt.locking``: released however the process ends) so that a
second fit into it stops with one line. A logger takes its folder in its constructor only, so the logger is built
again, from its configured arguments, into the chosen folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch
import yaml
from lightning.pytorch import Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from vitlit.errors import ConfigError
from vitlit.text import say

LOCK = ".vitlit.lock"
LOCKED_BYTE = 1 << 20  # Windows locks byte ranges, and a locked byte cannot be read by another process


def run_of_checkpoint(ckpt: Path) -> Path | None:
    """The run folder a checkpoint belongs to (``<run>/checkpoints/<file>.ckpt``), or ``None`` for a loose file."""
    run = ckpt.parent.parent
    saved = (run / "config.yaml").is_file() or (run / "hparams.yaml").is_file()
    return run if ckpt.parent.name == "checkpoints" and saved else None


def checkpoint_step(path: Path) -> int:
    """The optimizer step a checkpoint was saved at (-1 if unknown); memory-mapped, its tensors are not read."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])
    except Exception:  # a foreign or damaged file has no known step
        return -1


def resolve_checkpoint(
    ckpt_path: str | None, subcommand: str, root: Path, config: Mapping[str, Any] | None = None
) -> Path | None:
    """The checkpoint a run starts from: ``--ckpt_path`` as a file, or ``last``/``auto``/``none`` resolved.

    ``last`` is the newest ``last.ckpt`` under ``root`` of a run whose saved model and data are ``config``'s
    (Lightning's own ``last`` looks only in the new run's empty folder); ``auto`` (fit only) is the same, or a fresh
    start where there is none, said in one line: the switch for job scripts restarted after preemption. Another
    experiment's run under the same root is never continued. ``none`` evaluates the model as it is built.
    """
    if ckpt_path is not None and not str(ckpt_path).strip():  # a job script's unset variable
        raise ConfigError("--ckpt_path is empty; give a checkpoint file, last or auto, or leave the flag out.")
    if ckpt_path is None or str(ckpt_path).lower() == "none":
        return None
    if ckpt_path not in ("last", "auto"):
        return Path(ckpt_path).expanduser().absolute()
    if ckpt_path == "auto" and subcommand != "fit":
        raise ConfigError(f"--ckpt_path auto is for fit only; {subcommand} takes last or a checkpoint path.")
    from vitlit.preflight import newest_checkpoint  # --ckpt_path last or auto only

    return newest_checkpoint(ckpt_path, root, config)


def allocate_version(root: Path) -> int:
    """Create the next free ``root/version_N`` and return ``N``; two processes asking at once get two numbers."""
    root.mkdir(parents=True, exist_ok=True)
    n = 1 + max((int(m.group(1)) for p in root.iterdir() if (m := re.fullmatch(r"version_(\d+)", p.name))), default=-1)
    while True:
        try:
            (root / f"version_{n}").mkdir()
            return n
        except FileExistsError:
            n += 1


def lock(run_dir: Path) -> int:
    """Lock ``run_dir`` for this process (a file descriptor to `unlock`), or refuse because another fit holds it."""
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            import fcntl
        except ImportError:  # Windows: a byte far past the owner's line, which others must still read
            import msvcrt

            os.lseek(fd, LOCKED_BYTE, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            os.lseek(fd, 0, os.SEEK_SET)
        else:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.lseek(fd, 0, os.SEEK_SET)
        owner = os.read(fd, 200).decode(errors="replace") or "another process"
        os.close(fd)
        raise ConfigError(f"{run_dir} is in use by a fit of {owner}; wait for it to end (or stop it), then run this "
                          f"again.") from None  # fmt: skip
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
    return fd


def unlock(run_dir: Path, fd: int) -> None:
    """Let the lock of `lock` go (the operating system also does when the process ends, however it ends)."""
    with contextlib.suppress(OSError):  # Windows removes no open file; the lock goes with the descriptor anyway
        (run_dir / LOCK).unlink()
    os.close(fd)


def another_root(root: str, ckpt: Path, run: Path) -> bool:
    """Whether ``--trainer.default_root_dir`` names another folder than the one the run of ``ckpt`` was trained in."""
    given = Path(root).expanduser().resolve()
    if given in (Path.cwd().resolve(), run.parent.parent.resolve()):
        return False
    try:
        saved = ((yaml.safe_load((run / "config.yaml").read_text()) or {}).get("trainer") or {}).get("default_root_dir")
    except (OSError, yaml.YAMLError, AttributeError):
        saved = None
    return saved is None or given != Path(str(saved)).expanduser().resolve()


class Placed(NamedTuple):
    """Where `place_run` put a run: its folder, the lock of a fit (a file descriptor), and the folders it made."""

    run_dir: Path
    lock: int | None
    made: tuple[Path, ...]  # the run's folder and those above it that did not exist, deepest first; () for a resume


def place_run(trainer: Trainer, subcommand: str, ckpt: Path | None) -> Placed | None:
    """Choose and create the run's folder and point the logger and the config there.

    ``None`` where there is nothing to place: no logger (Lightning's own folder), or a process other than the main
    one under DDP (Lightning sends the main one's folders to the others).
    """
    if trainer.loggers and not isinstance(trainer.loggers[0], (TensorBoardLogger, CSVLogger)):
        # MLflow or W&B keep no folder of ours, but the config, checkpoints and run card need one: a TensorBoard
        # logger in front gives it.
        trainer.loggers = [TensorBoardLogger(save_dir=trainer.default_root_dir), *trainer.loggers]
    logger = trainer.logger
    if logger is None or not trainer.is_global_zero:
        return None
    save_dir, name, config_name, note = Path(logger.save_dir).expanduser().absolute(), logger.name, None, None
    run = run_of_checkpoint(ckpt) if ckpt is not None else None
    version: int | str
    if run is not None and subcommand == "fit":
        # A resume rewrites the run's last.ckpt first: from an older checkpoint it goes beside the run instead.
        last = run / "checkpoints" / "last.ckpt"
        step, newest = checkpoint_step(ckpt), checkpoint_step(last) if last.is_file() else -1
        save_dir, name = run.parent.parent, run.parent.name
        if newest <= step:
            version, k = run.name, next(k for k in range(1, 10**6) if not (run / f"config.resume-{k}.yaml").exists())
            config_name = f"config.resume-{k}.yaml"
        else:
            note = (f"{ckpt.name} is from step {step}, but {last} is from step {newest}; continuing in a new run "
                    f"beside {run.name} so that nothing newer is overwritten")  # fmt: skip
    elif run is not None and not another_root(trainer.default_root_dir, ckpt, run):
        save_dir, name = run, subcommand
    made: tuple[Path, ...] = ()
    if config_name is None:
        made = tuple(d for d in (save_dir / name, *(save_dir / name).parents) if not d.exists())
        version = allocate_version(save_dir / name)
    run_dir = save_dir / name / (f"version_{version}" if isinstance(version, int) else version)
    fd = lock(run_dir) if subcommand == "fit" else None
    if note:
        say(f"vitlit: {note}", error=True)
    saver = next((cb for cb in trainer.callbacks if isinstance(cb, SaveConfigCallback)), None)
    if saver is not None and config_name:
        saver.config_filename = config_name  # never overwrite the run's config.yaml
    spec: Any = saver.config.get("trainer", {}).get("logger") if saver is not None else None
    spec = spec[0] if isinstance(spec, list) and spec else spec  # a list: the first logger holds the folder
    configured = hasattr(spec, "get") and str(spec.get("class_path")).endswith(type(logger).__name__)
    init_args = dict(spec.get("init_args") or {}) if configured else {}
    if isinstance(logger, TensorBoardLogger):  # no "hp_metric -1" row in TensorBoard unless asked for
        init_args.setdefault("default_hp_metric", False)
    relocated = type(logger)(**{**init_args, "save_dir": os.fspath(save_dir), "name": name, "version": version})
    trainer.loggers = [relocated, *trainer.loggers[1:]]
    return Placed(run_dir, fd, (run_dir, *made) if config_name is None else ())


def saved_config(trainer: Trainer, run_dir: Path) -> Path:
    """The config a run saved in ``run_dir``: ``config.yaml``, or a resume's ``config.resume-K.yaml`` (`place_run`)."""
    saver = next((cb for cb in trainer.callbacks if isinstance(cb, SaveConfigCallback)), None)
    return run_dir / (saver.config_filename if saver is not None else "config.yaml")


def discard(placed: Placed | None) -> None:
    """Remove the folders a refused run made (its run folder, and ``lightning_logs/`` and the root where it made them).

    For a user error found once the folder was made (an image that cannot be read, met at the data's setup), so a
    refused run leaves nothing; a folder that holds a checkpoint, or another run's files meanwhile, is kept.
    """
    if placed is None or not placed.made or any(placed.run_dir.rglob("*.ckpt")):
        return
    shutil.rmtree(placed.run_dir, ignore_errors=True)
    for folder in placed.made[1:]:
        with contextlib.suppress(OSError):  # not empty: another run wrote there meanwhile
            folder.rmdir()
