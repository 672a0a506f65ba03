"""`CheckedResume`: ``--ckpt_path last|auto|none`` resolved, and the checkpoint checked before anything is written.

Lightning's own ``last`` looks only in the new run's (empty) checkpoint folder, and a damaged, foreign or
mismatched checkpoint fails only once the run has started (or, for a flipped bit inside a tensor, never). Only
headers and counters are read here (memory-mapped); Lightning restores the weights itself once the run starts.
Listed in this part's shared defaults; the vitlit CLI calls its `CheckedResume.resolve_checkpoint` hook.
"""

from __future__ import annotations

import pickle
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import nn

from vitlit.checkpoints import UNREADABLE
from vitlit.errors import ConfigError
from vitlit.runs.folders import checkpoint_folders, logger_root, run_of_checkpoint
from vitlit.schedule import total_steps


class CheckedResume(Callback):
    """Resolve ``--ckpt_path`` (``last``, ``auto``, ``none``, a file) and refuse a checkpoint that does not fit."""

    def resolve_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, subcommand: str, ckpt_path: str | None,
        weights_only: bool | None,
    ) -> Path | None:  # fmt: skip
        """The checkpoint the run starts from, read and checked; the CLI calls this before ``before_run`` hooks.

        Args:
            trainer: The run's Trainer (its logger's and checkpoints' folders are searched for ``last``).
            pl_module: The model, whose ``check_checkpoint`` compares the saved hyperparameters.
            subcommand: ``fit``, ``validate``, ``test`` or ``predict``.
            ckpt_path: ``--ckpt_path`` as typed.
            weights_only: ``--weights_only``.
        """
        # Without a folder logger (none, or MLflow/W&B alone) runs are in lightning_logs/, where RunFolders puts them.
        root = logger_root(trainer.logger) or Path(trainer.default_root_dir).expanduser().resolve() / "lightning_logs"
        folders = [Path(trainer.default_root_dir) / "checkpoints", *checkpoint_folders(trainer)]
        ckpt = resolve_checkpoint(ckpt_path, subcommand, root, folders)
        if ckpt is not None:
            read_for_run(pl_module, ckpt, weights_only, resume=subcommand == "fit")
        return ckpt

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Say so when a resumed run keeps the learning-rate schedule of a run of another length (the checkpoint's)."""
        kept, total = getattr(pl_module.lr_schedulers(), "total_steps", None), total_steps(trainer)
        if trainer.ckpt_path is not None and kept and total and kept != total and trainer.is_global_zero:
            print(f"vitlit: resumed with the learning-rate schedule of the checkpoint's run ({kept} steps; this run "
                  f"has {total}); steps after its end keep the final learning rate", file=sys.stderr)  # fmt: skip


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
    # torch.save writes a zip archive (PK..); files from releases before that format are a bare pickle (0x80...).
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


def newest_last_checkpoint(roots: list[Path], folders: list[Path]) -> Path | None:
    """The most recently written ``last.ckpt`` of the runs under ``roots`` or in the checkpoint ``folders``."""
    candidates = [p for root in roots for p in root.glob("*/checkpoints/last.ckpt")]
    candidates += [folder / "last.ckpt" for folder in folders]
    existing = [p for p in candidates if p.is_file()]
    return max(existing, key=lambda p: p.stat().st_mtime) if existing else None


def resolve_checkpoint(ckpt_path: str | None, subcommand: str, root: Path, folders: list[Path]) -> Path | None:
    """The checkpoint a run starts from: ``--ckpt_path`` as a file, with ``last`` and ``auto`` resolved.

    Lightning's own ``last`` only looks in the new run's (empty) checkpoint folder. Here ``last`` means the newest
    ``last.ckpt`` of any earlier run under ``root`` (or in ``folders``) and fails if there is none; ``auto`` (fit
    only) is the switch for job scripts restarted after preemption: resume if there is one, else start fresh;
    ``none`` is no checkpoint (the CLI asks evaluations for it explicitly: they would otherwise use untrained weights).

    Raises:
        ConfigError: For ``auto`` outside ``fit``, ``last`` with no ``last.ckpt`` to find, or an empty path (a script's
            unset variable), which would otherwise train from scratch or evaluate an untrained model without a word.
    """
    if ckpt_path is not None and not str(ckpt_path).strip():
        raise ConfigError(
            "--ckpt_path is empty; give a checkpoint file, last or auto, or leave the flag out to start from scratch."
        )
    if str(ckpt_path).lower() == "none":  # the explicit way to evaluate a model as it is built
        return None
    if ckpt_path in ("last", "auto"):
        if ckpt_path == "auto" and subcommand != "fit":
            raise ConfigError(f"--ckpt_path auto is for fit only; {subcommand} takes last or a checkpoint path.")
        found = newest_last_checkpoint([root], folders)
        if found is None and ckpt_path == "last":
            raise ConfigError(
                f"--ckpt_path last found no last.ckpt under {root}; give a checkpoint path, or check "
                f"--trainer.default_root_dir."
            )
        return found
    return Path(ckpt_path).expanduser().resolve() if ckpt_path else None


def check_optimizer_state(optimizer_factory: Any, states: list[dict[str, Any]], options: str | None = None) -> None:
    """Refuse a checkpoint's optimizer state that the configured optimizer cannot continue from.

    Lightning restores the saved state into whatever optimizer the config builds, and an optimizer of another
    kind then fails at its first step (``KeyError: 'momentum'`` for SGD after AdamW), after the run has started.
    The saved settings are loaded into a probe of the configured optimizer (which fills in settings newer
    PyTorch versions added) and compared with the settings it needs.

    Args:
        optimizer_factory: The model's optimizer factory (``--model.optimizer``), called with parameter groups.
        states: The checkpoint's ``optimizer_states``.
        options: Where the run's options are (``--config <run>/config.yaml``), for the message.
    """
    groups = (states[0].get("param_groups") if states and isinstance(states[0], dict) else None) or []
    if not groups or not isinstance(groups[0], dict):
        return
    try:
        optimizer = optimizer_factory([{"params": [nn.Parameter(torch.zeros(1))]}])
        optimizer.load_state_dict({"state": {}, "param_groups": [{**groups[0], "params": [0]}]})
    except Exception:  # an optimizer that cannot be probed on the CPU: Lightning's own restore decides
        return
    missing = sorted(set(optimizer.defaults) - set(optimizer.param_groups[0]))
    if missing:
        raise ConfigError(
            f"the checkpoint's optimizer state has no {', '.join(missing)}, which {type(optimizer).__name__} "
            f"needs: it was trained with another optimizer; resume with the one it was trained with "
            f"({options or 'its run folder keeps it in config.yaml'})."
        )


def read_for_run(model: Any, ckpt: Path, weights_only: bool | None, resume: bool) -> None:
    """Read ``ckpt`` (not its tensors) and refuse it in one line if it does not fit ``model`` or its optimizer."""
    checkpoint = read_checkpoint(ckpt, weights_only)
    run = run_of_checkpoint(ckpt)
    options = f"--config {run / 'config.yaml'}" if run is not None and (run / "config.yaml").is_file() else None
    model.check_checkpoint(checkpoint.get("hyper_parameters", {}), options)
    if resume:  # evaluations do not restore the optimizer
        check_optimizer_state(model.optimizer_factory, checkpoint.get("optimizer_states") or [], options)
