"""Where a run writes, decided by the CLI before Lightning writes anything: one folder per run, never shared.

- A new ``fit`` gets the next free ``<root>/lightning_logs/version_N``. Lightning's loggers pick ``N`` by listing the
  folder, so two fits started at once would share one; here ``os.mkdir`` decides, which fails for all but one. A
  logger's own ``version`` names the folder instead, where it does not exist yet.
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
import errno
import json
import os
import re
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
from vitlit.text import say, shown

#: The longest path a run's folder may have: PATH_MAX, less what a run adds below it.
PATH_ROOM = 4096 - 200
LOCK = ".vitlit.lock"
LOCKED_BYTE = 1 << 20  # Windows locks byte ranges, and a locked byte cannot be read by another process
CARD = "run_card.json"  # what a fit did and how to repeat it (`vitlit.runs.records.RunCard`)


def allocate_version(root: Path) -> int:
    """Create the next free ``root/version_N`` and return ``N``; two processes asking at once get two numbers."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where the runs' folders go, or above it
        blocking = next(p for p in (root, *root.parents) if p.exists())
        raise ConfigError(f"{shown(blocking)} is a file, where the runs' folders go; remove it, or give another "
                          f"--trainer.default_root_dir (or the logger's save_dir).") from None  # fmt: skip
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
    except OSError as err:
        if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EDEADLK):  # not held: the file system locks nothing
            os.close(fd)
            raise ConfigError(f"{run_dir} cannot be locked ({err.strerror}), so a second fit could write into it at "
                              f"once; give --trainer.default_root_dir a folder on a local disk.") from None  # fmt: skip
        os.lseek(fd, 0, os.SEEK_SET)  # another fit holds it: name its owner
        owner = os.read(fd, 200).decode(errors="replace") or "another process"
        os.close(fd)
        raise ConfigError(
            f"{run_dir} is in use by a fit of {owner}; wait for it to end (or stop it), then run this again."
        ) from None
    try:  # the file locked is still the one at its path: its last owner removes it on the way out (`unlock`)
        current = os.path.samestat(os.fstat(fd), os.stat(run_dir / LOCK))
    except FileNotFoundError:
        current = False
    if not current:  # a lock of a removed file holds nothing: take the new one
        os.close(fd)
        return lock(run_dir)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
    return fd


def unlock(run_dir: Path, fd: int) -> None:
    """Let the lock of `lock` go (the operating system also does when the process ends, however it ends)."""
    with contextlib.suppress(OSError):  # Windows removes no open file; the lock goes with the descriptor anyway
        (run_dir / LOCK).unlink()
    os.close(fd)


class Placed(NamedTuple):
    """Where `place_run` put a run: its folder, the lock of a fit (a file descriptor), and the folders it made."""

    run_dir: Path
    lock: int | None
    made: tuple[Path, ...]  # the run's folder and those above it that did not exist, deepest first; () for a resume
    existed: frozenset[Path] = frozenset()  # a resume: what the run's folder held before it (not its sub-folders)
    saved: frozenset[tuple[str, int]] = frozenset()  # a resume: its run's checkpoints' (name, time) before it
    started: int = -1  # a resume: the step of the checkpoint it starts from


def checkpoint_times(run_dir: Path) -> frozenset[tuple[str, int]]:
    """Each checkpoint of ``run_dir`` with its modification time."""
    return frozenset((p.name, p.stat().st_mtime_ns) for p in (run_dir / "checkpoints").glob("*.ckpt") if p.is_file())


def trained_since(placed: Placed) -> bool:
    """Whether a resume saved a checkpoint of a step past the one it started from: it trained.

    Only the files written since it was placed are read. Not their times alone: Lightning saves ``last.ckpt`` again,
    at the step it started from, when a run stops on an error before its first step.
    """
    written = {name for name, _ in checkpoint_times(placed.run_dir) - placed.saved}
    return any(checkpoint_step(placed.run_dir / "checkpoints" / name) > placed.started for name in written)


#: The loggers that write into a folder: the run's folder is its first logger's (`place_run`).
FOLDER_LOGGERS = (TensorBoardLogger, CSVLogger)


def place_run(trainer: Trainer, subcommand: str, ckpt: Path | None = None, run: Path | None = None) -> Placed | None:
    """Choose and create the run's folder and point the logger and the config there.

    ``None`` where there is nothing to place: no logger (Lightning's own folder), or a process other than the main
    one under DDP (Lightning sends the main one's folders to the others).
    """
    if trainer.loggers and not isinstance(trainer.loggers[0], FOLDER_LOGGERS):
        # MLflow or W&B keep no folder of ours, but the config, checkpoints and run card need one: a TensorBoard
        # logger in front gives it.
        trainer.loggers = [TensorBoardLogger(save_dir=trainer.default_root_dir), *trainer.loggers]
    logger = trainer.logger
    if logger is None or not trainer.is_global_zero:
        return None
    save_dir, name = Path(logger.save_dir).expanduser().absolute(), logger.name
    version: int | str | None = None
    config_name = note = None
    if run is not None:  # a run's checkpoint: into that run, beside it, or into its evaluations
        save_dir, name, version, config_name, note = placement(trainer, subcommand, ckpt, run, save_dir, name)
    saver = next((cb for cb in trainer.callbacks if isinstance(cb, SaveConfigCallback)), None)
    spec: Any = saver.config.get("trainer", {}).get("logger") if saver is not None else None
    spec = spec[0] if isinstance(spec, list) and spec else spec  # a list: the first logger holds the folder
    configured = hasattr(spec, "get") and str(spec.get("class_path")).endswith(type(logger).__name__)
    init_args = dict(spec.get("init_args") or {}) if configured else {}
    made: tuple[Path, ...] = ()
    named_version = init_args.get("version")
    named = save_dir / name / (f"version_{named_version}" if isinstance(named_version, int) else str(named_version))
    # A new run named by its logger's version; a resume going beside its run takes a name not yet taken (its saved
    # config names the run it came from, whose folder exists), else a number.
    taken = run is not None and named.exists()
    if version is None and subcommand == "fit" and named_version is not None and not taken:
        version = named_version
        made = tuple(d for d in named.parents if not d.exists())
        named.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(named)  # as allocate_version: of two fits started at once, one gets it
        except FileExistsError:
            raise ConfigError(
                f"{named} exists: --trainer.logger.init_args.version {version} names an earlier run; "
                f"give a new version, or none to number runs (continue it with --ckpt_path)."
            ) from None
    elif version is None:
        made = tuple(d for d in (save_dir / name, *(save_dir / name).parents) if not d.exists())
        version = allocate_version(save_dir / name)
    run_dir = save_dir / name / (f"version_{version}" if isinstance(version, int) else version)
    fd = lock(run_dir) if subcommand == "fit" else None
    if note:
        say(f"vitlit: {note}", error=True)
    if saver is not None and config_name:
        saver.config_filename = config_name  # never overwrite the run's config.yaml
    if isinstance(logger, TensorBoardLogger):  # no "hp_metric -1" row in TensorBoard unless asked for
        init_args.setdefault("default_hp_metric", False)
    relocated = type(logger)(**{**init_args, "save_dir": os.fspath(save_dir), "name": name, "version": version})
    trainer.loggers = [relocated, *trainer.loggers[1:]]
    if config_name is None:
        return Placed(run_dir, fd, (run_dir, *made))
    # A refused resume removes only what it added, and nothing once it has saved a checkpoint.
    started = checkpoint_step(ckpt) if ckpt is not None else -1
    return Placed(run_dir, fd, (), frozenset(run_dir.iterdir()), checkpoint_times(run_dir), started)


def saved_config(trainer: Trainer, run_dir: Path) -> Path:
    """The config a run saved in ``run_dir``: ``config.yaml``, or a resume's ``config.resume-K.yaml`` (`place_run`)."""
    saver = next((cb for cb in trainer.callbacks if isinstance(cb, SaveConfigCallback)), None)
    return run_dir / (saver.config_filename if saver is not None else "config.yaml")


def read_card(run_dir: Path) -> dict[str, Any]:
    """The card of the run in ``run_dir`` (``run_card.json``), or ``{}`` if it has none or an unreadable one.

    `vitlit.runs.records` writes it; the timm folder's README quotes it, and a damaged card must not stop either.
    """
    try:
        card = json.loads((run_dir / CARD).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, not UTF-8 or not JSON
        return {}
    return card if isinstance(card, dict) else {}


def placement(
    trainer: Any, subcommand: str, ckpt: Path, run: Path, save_dir: Path, name: str
) -> tuple[Path, str, str | None, str | None, str | None]:
    """Where a command from ``run``'s checkpoint writes: ``(save_dir, name, version, config_name, note)``.

    A ``fit`` continues ``run`` (version: its folder, config: ``config.resume-K.yaml``), or, where the run holds a
    checkpoint of a later step, goes beside it (a new version, and a note saying why: nothing newer is overwritten).
    An evaluation writes into ``<run>/<subcommand>/``, unless ``--trainer.default_root_dir`` names another folder.
    A ``None`` version is a new ``version_N``.
    """
    if subcommand == "fit":
        last = run / "checkpoints" / "last.ckpt"
        step, newest = checkpoint_step(ckpt), checkpoint_step(last) if last.is_file() else -1
        if newest <= step:
            k = next(k for k in range(1, 10**6) if not (run / f"config.resume-{k}.yaml").exists())
            return run.parent.parent, run.parent.name, run.name, f"config.resume-{k}.yaml", None
        note = (f"{ckpt.name} is from step {step}, but {last} is from step {newest}; continuing in a new run "
                f"beside {run.name} so that nothing newer is overwritten")  # fmt: skip
        return run.parent.parent, run.parent.name, None, None, note
    if not another_root(trainer.default_root_dir, ckpt, run):
        return run, subcommand, None, None, None
    return save_dir, name, None, None, None


def checkpoint_step(path: Path) -> int:
    """The optimizer step a checkpoint was saved at (-1 if unknown); memory-mapped, its tensors are not read."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])
    except Exception:  # a foreign or damaged file has no known step
        return -1


def another_root(root: str, ckpt: Path, run: Path) -> bool:
    """Whether ``--trainer.default_root_dir`` names another folder than the one the run of ``ckpt`` was trained in."""
    given = Path(root).expanduser().resolve()
    if given in (Path.cwd().resolve(), run.parent.parent.resolve()):
        return False
    try:
        saved = ((yaml.safe_load((run / "config.yaml").read_text()) or {}).get("trainer") or {}).get("default_root_dir")
    except (OSError, ValueError, yaml.YAMLError, AttributeError):  # ValueError: a hand-edited date out of range
        saved = None
    return saved is None or given != Path(str(saved)).expanduser().resolve()


def written_folders(trainer: Mapping[str, Any]) -> tuple[Path, Path]:
    """The folders a run writes into, their links resolved: ``default_root_dir``, and its logger's folder.

    The logger's folder holds the ``version_N`` folders (`vitlit.run_dir.place_run`): ``<default_root_dir>/
    lightning_logs``, or the ``save_dir``/``name`` of a configured TensorBoard or CSV logger (the first of a list).
    Resolved, because a ``lightning_logs`` that is a link has the run written where it points.
    """
    spec = trainer.get("logger")
    spec = spec[0] if isinstance(spec, list) and spec else spec
    root = Path(trainer.get("default_root_dir") or ".").expanduser()
    save_dir, name = root, "lightning_logs"
    class_path = str(spec.get("class_path")) if hasattr(spec, "get") else ""
    if class_path.rsplit(".", 1)[-1] in {logger.__name__ for logger in FOLDER_LOGGERS}:
        init = spec.get("init_args") or {}
        save_dir, name = Path(init.get("save_dir") or root).expanduser(), init.get("name", name)
    return root.resolve(), (save_dir / (name or "")).resolve()


def check_writable_folder(folder: str | Path, flag: str = "--trainer.default_root_dir") -> None:
    """Refuse a folder that cannot be created or written to, before a run starts writing into it.

    An existing folder this user may write to, with room below it for a run's files, is taken at once; any other is
    made sure of by `check_new_folder`, which names what is wrong.
    """
    path = Path(folder).expanduser().absolute()
    if not (os.path.isdir(path) and writable(path)) or len(os.fsencode(str(path))) > PATH_ROOM:  # isdir: no OSError
        check_new_folder(path, folder, flag)


def check_new_folder(path: Path, folder: str | Path, flag: str) -> None:
    """Refuse ``path`` (typed as ``folder`` for ``flag``) where it cannot be created and written to, naming why.

    The name of each part fits every common file system (NAME_MAX), the whole leaves room for a run's files
    (`PATH_ROOM`), no part is a dangling link, and the nearest part that exists is a folder this user
    may write to.
    """
    if any(len(os.fsencode(part)) > 255 for part in path.parts):
        raise ConfigError(f"{flag}={folder} has a name of over 255 characters, more than a folder's name may have.")
    if len(os.fsencode(str(path))) > PATH_ROOM:
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
    if not writable(existing):
        raise ConfigError(f"{flag}={folder}: {existing} is not writable for this user; give a folder you can write to.")


def writable(folder: Path) -> bool:
    """Whether this user may create files in ``folder``."""
    return os.access(folder, os.W_OK | os.X_OK)
