"""Run folders (``<root>/version_N``): allocate one safely, find the newest checkpoint, continue a run, read it back.

A run folder is what a logger writes: ``config.yaml``, ``hparams.yaml``, TensorBoard events and ``checkpoints/``.
The CLI uses these functions (it only decides when); notebooks, benchmarks and tests use `read_scalars`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vitlit.errors import ConfigError

_VERSION = re.compile(r"version_(\d+)")
#: The lock file of a run folder that a ``fit`` is writing into (hidden: not a file of the run's).
LOCK_FILE = ".vitlit.lock"


class RunLock:
    """An exclusive lock on a run folder while one ``fit`` writes into it, so that a second process refuses to.

    The lock is the operating system's (``flock``; ``msvcrt.locking`` on Windows) on ``<run>/.vitlit.lock``, which
    also holds the owner's PID, host and start time for the message. The kernel releases it when the process ends,
    however it ends, so a lock is never stale: a killed run's folder can be resumed at once. A run that ends
    normally removes the file; one that finds it left behind knows its owner was killed.
    """

    def __init__(self, run_dir: Path, fd: int) -> None:
        # A plain file descriptor, not a file object: a run's objects are deep-copied (EMA) and pickled (spawn).
        self.run_dir, self._fd = run_dir, fd

    @classmethod
    def acquire(cls, run_dir: Path) -> RunLock:
        """Take the lock of ``run_dir`` or raise.

        Raises:
            ConfigError: If another process holds it, naming the process.
        """
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        if not _try_lock(fd):
            owner = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(
                f"{run_dir} is in use by a fit of {owner}; wait for it to end (or stop it), then run this again."
            )
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        return cls(run_dir, fd)

    def release(self) -> None:
        """Remove the lock file and let the lock go (the file first, so that no one takes a lock on a removed file)."""
        if self._fd < 0:
            return
        try:
            (self.run_dir / LOCK_FILE).unlink(missing_ok=True)
        except OSError:  # Windows removes no open file: let go first, then remove it
            os.close(self._fd)
            self._fd = -1
            (self.run_dir / LOCK_FILE).unlink(missing_ok=True)
            return
        os.close(self._fd)
        self._fd = -1


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


def _try_lock(fd: int) -> bool:
    """Lock the file of ``fd`` exclusively without waiting; whether that worked."""
    try:
        if os.name == "nt":
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def left_by_a_killed_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` is what a run killed before its first checkpoint left: nothing to resume, no owner.

    Such a run could not remove its folder (a SIGKILL, the OOM killer, a power cut); its lock file is still there but
    nobody holds it, and it holds no checkpoint and no finished epoch.
    """
    lock = run_dir / LOCK_FILE
    if not lock.is_file() or any(run_dir.rglob("*.ckpt")):
        return False
    try:
        card = json.loads((run_dir / "run_card.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        card = {}
    if isinstance(card, dict) and card.get("epochs_done"):
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        return _try_lock(fd)  # and let it go at once
    finally:
        os.close(fd)


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Return every scalar curve of a run as ``{tag: [(step, value), ...]}``.

    Args:
        run_dir: A ``lightning_logs/version_N`` directory (it holds the ``events.out.tfevents.*`` files).

    Returns:
        The curves by tag, e.g. ``train/loss``, ``val/acc``, ``lr-AdamW/decay``; steps are optimizer steps.
    """
    # size_guidance 0 keeps every point; TensorBoard's default would subsample long curves to 10,000 points.
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def remove_killed_runs(root: Path) -> list[Path]:
    """Remove the ``version_N`` folders under ``root`` that runs killed before their first checkpoint left behind."""
    removed = []
    for folder in sorted(root.glob("version_*")) if root.is_dir() else []:
        if folder.is_dir() and not folder.is_symlink() and left_by_a_killed_run(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def allocate_version(root: Path) -> int:
    """Create the next free ``root/version_N`` folder and return ``N``; two runs started at once never share one.

    ``os.mkdir`` fails for all but one process that asks for the same name, so the loser takes the next number
    (Lightning's own loggers only list the folders, and two runs then both pick the same ``N``).
    """
    root.mkdir(parents=True, exist_ok=True)
    taken = [int(m.group(1)) for p in root.iterdir() if (m := _VERSION.fullmatch(p.name)) and p.is_dir()]
    n = max(taken, default=-1) + 1
    while True:
        try:
            (root / f"version_{n}").mkdir()
            return n
        except FileExistsError:
            n += 1


def relocated_logger(
    logger: Logger, init_args: dict[str, Any], save_dir: Path, name: str, version: int | str
) -> Logger:
    """A new logger of ``logger``'s class with its configured arguments, writing into ``save_dir/name/version``.

    Lightning's loggers take their folder in the constructor only, and the config must stay as the user wrote it (it
    is saved with the run and used to resume), so the CLI builds the logger again through its public constructor.

    Args:
        logger: The TensorBoardLogger or CSVLogger the Trainer was built with.
        init_args: The arguments the config gave it (empty for ``logger: true``).
        save_dir: The folder that holds the run's ``name`` folder.
        name: The folder of the run's versions (``lightning_logs``, or the subcommand for evaluations).
        version: The run's version: ``N`` for ``version_N``.
    """
    return type(logger)(**{**init_args, "save_dir": os.fspath(save_dir), "name": name, "version": version})


def checkpoint_step(path: str | Path) -> int | None:
    """The optimizer step a checkpoint was saved at, or ``None`` if the file cannot be read as a checkpoint."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])
    except Exception:  # any unreadable or foreign file simply has no known step
        return None


def newer_checkpoint(ckpt_path: Path, run_dir: Path) -> tuple[Path, int] | None:
    """A checkpoint of ``run_dir`` saved at a later step than ``ckpt_path``, if there is one (with its step).

    Resuming from an older checkpoint into the same run would overwrite the newer ones (``last.ckpt`` first), so
    the CLI continues such a resume in a new run instead. Steps are read memory-mapped, without the tensors.
    """
    step = checkpoint_step(ckpt_path)
    if step is None:
        return None
    others = [p for p in (run_dir / "checkpoints").glob("*.ckpt") if p.resolve() != ckpt_path.resolve()]
    later = [(p, s) for p in others if (s := checkpoint_step(p)) is not None and s > step]
    # The latest step; among equals, last.ckpt (the one a resume would overwrite first), then by name: stable messages.
    return max(later, key=lambda item: (item[1], item[0].name == "last.ckpt", item[0].name)) if later else None


def resume_config_name(run_dir: Path) -> str:
    """The first free ``config.resume-K.yaml`` name in ``run_dir``: a resumed run never overwrites a saved config."""
    k = 1
    while (run_dir / f"config.resume-{k}.yaml").exists():
        k += 1
    return f"config.resume-{k}.yaml"


def own_files(run_dir: Path, before: set[Path], config_name: str | None) -> list[Path]:
    """Files this process added to an existing run folder: its resumed config and its TensorBoard event files.

    TensorBoard names event files ``events.out.tfevents.<time>.<host>.<pid>.<n>``, so a file of another process
    writing into the same folder is never taken for one of ours.
    """
    pid = f".{os.getpid()}."
    added = [p for p in run_dir.iterdir() if p.is_file() and p not in before]
    return [p for p in added if p.name == config_name or (p.name.startswith("events.out.tfevents.") and pid in p.name)]


@dataclass
class RunFolder:
    """The folder a run writes into (``save_dir/name/version``), and how to leave it as it was after a user error."""

    run_dir: Path
    created: bool  # the folder was made for this run (else: an existing run continues)
    save_dir: Path
    name: str
    version: int | str  # N for version_N, or the folder's own name when a run continues
    before: set[Path] = field(default_factory=set)  # its top-level files before this run started
    config_name: str | None = None  # the name the run's config is saved under, when it is not config.yaml
    note: str | None = None  # a line for the user about where the run went
    lock: RunLock | None = None  # held while a fit writes into the folder
    made: list[Path] = field(default_factory=list)  # folders above run_dir created for it, deepest first

    def release(self) -> None:
        """Let the folder go (the run ended, whichever way)."""
        if self.lock is not None:
            self.lock.release()

    def undo(self, started: float, epochs_done: int) -> None:
        """Remove what this process added, unless it trained something worth keeping.

        A new run that stops in its first epoch goes entirely, also the ``last.ckpt`` that Lightning saves on the
        way out, so ``--ckpt_path last`` never prefers a half-trained run. A run that finished an epoch, or that
        continued an older run and saved a checkpoint, is kept: it can be resumed once the problem is fixed.
        """
        if self.created and epochs_done == 0:
            self.release()
            shutil.rmtree(self.run_dir, ignore_errors=True)
            for folder in self.made:  # lightning_logs/ and --trainer.default_root_dir, where this run made them
                with contextlib.suppress(OSError):  # not empty: another run wrote there meanwhile
                    folder.rmdir()
        elif not self.created and not [p for p in self.run_dir.rglob("*.ckpt") if p.stat().st_mtime >= started]:
            for path in own_files(self.run_dir, self.before, self.config_name):
                path.unlink(missing_ok=True)


def place_run(save_dir: Path, name: str, subcommand: str, ckpt: Path | None) -> RunFolder:
    """Choose the folder of a ``fit``/``validate``/``test``/``predict`` and create it (atomically) if it is new.

    - ``fit`` from a run's checkpoint continues that run, wherever it is and whatever the current directory: one
      TensorBoard curve, one checkpoints folder, its config saved as ``config.resume-K.yaml`` next to the original.
      If the run holds a checkpoint of a later step (resuming from the best, say), the resume goes to a new folder
      beside it instead, so nothing newer is overwritten.
    - ``validate``/``test``/``predict`` of a run's checkpoint write into ``<run>/<subcommand>/version_K`` (metrics,
      ``predictions.csv``), next to the run and without touching its training files.
    - Anything else is a new ``version_N`` in ``save_dir/name`` (the logger's folder).

    Args:
        save_dir: The logger's ``save_dir``.
        name: The logger's ``name`` (``lightning_logs``).
        subcommand: ``fit``, ``validate``, ``test`` or ``predict``.
        ckpt: The checkpoint the run starts from, if any.
    """
    run = run_of_checkpoint(ckpt) if ckpt is not None else None
    note = None
    if run is not None and subcommand == "fit":
        newer = newer_checkpoint(ckpt, run)
        if newer is None:
            lock = RunLock.acquire(run)  # before anything of the run is read or named: a second fit stops here
            return RunFolder(run, False, run.parent.parent, run.parent.name, run.name, before=set(run.iterdir()),
                             config_name=resume_config_name(run), lock=lock)  # fmt: skip
        save_dir, name = run.parent.parent, run.parent.name
        note = (
            f"{ckpt.name} is from step {checkpoint_step(ckpt)}, but {newer[0]} is from step {newer[1]}; continuing "
            f"in a new run beside {run.name} so that nothing newer is overwritten"
        )
    elif run is not None:
        save_dir, name = run, subcommand
    if subcommand == "fit":
        removed = remove_killed_runs(save_dir / name)
        if removed:
            folders = ", ".join(p.name for p in removed)
            removal = f"removed {folders}, left by a run killed before its first checkpoint"
            note = f"{note}; {removal}" if note else removal
    made = [folder for folder in (save_dir / name, *(save_dir / name).parents) if not folder.exists()]
    version = allocate_version(save_dir / name)
    run_dir = save_dir / name / f"version_{version}"
    lock = RunLock.acquire(run_dir) if subcommand == "fit" else None
    return RunFolder(run_dir, True, save_dir, name, version, note=note, lock=lock, made=made)


def another_root(root: str | None, ckpt: Path) -> bool:
    """Whether ``root`` (``--trainer.default_root_dir``) names another folder than the run of ``ckpt`` was trained in.

    Left at the current directory (Lightning's default), or set to what the run's own config says (its
    ``config.yaml`` passed back, wherever the run folder was moved since), it is the run's; otherwise it was asked for.
    """
    run = run_of_checkpoint(ckpt)
    if root is None or run is None or Path(root).expanduser().resolve() == Path.cwd().resolve():
        return False
    if Path(root).expanduser().resolve() == run.parent.parent.resolve():
        return False
    try:
        saved = (yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) or {}).get("trainer") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        saved = {}
    given = saved.get("default_root_dir")
    return given is None or Path(str(root)).expanduser().resolve() != Path(str(given)).expanduser().resolve()
