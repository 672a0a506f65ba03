"""The command line: ``python -m vitlit {fit,validate,test,predict} --config configs/<recipe>.yaml [--key value ...]``.

Everything is LightningCLI: the model is `vitlit.ViTClassifier`, the data module any subclass of
`vitlit.data.ImageClassificationDataModule` (``--data CIFARDataModule`` or ``--data ImageFolderDataModule``), and
the Trainer with its callbacks comes from the YAML. Example::

    python -m vitlit fit --config configs/cifar10_vit_tiny.yaml --trainer.max_epochs 5 --data.batch_size 256
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit.checkpoint_io import UNREADABLE, AtomicCheckpointIO, unreadable_checkpoint
from vitlit.data import ImageClassificationDataModule
from vitlit.errors import ConfigError, TrainingHalted
from vitlit.model import ViTClassifier
from vitlit.progress import ProgressBar

PROG = "vitlit"
# Lines of jsonargparse's nested Union report that repeat what the first error already says.
_NOISE = (
    "Does not validate against any of the Union",
    "Subtypes:",
    "Errors:",
    "- Expected a <class 'NoneType'>",
    "Given value type:",
    "Given value:",
)


def _one_line(message: str) -> str:
    """Condense jsonargparse's multi-line report (bad key, wrong type) into one line naming key and value."""
    lines = (line.strip().removeprefix("- ") for line in message.splitlines())
    return " ".join(line for line in lines if line and not line.startswith(_NOISE))


def _user_error(err: BaseException | None) -> BaseException | None:
    """Return the ConfigError (or Lightning misconfiguration) behind ``err``, however deeply it was wrapped."""
    while err is not None:
        if isinstance(err, (ConfigError, MisconfigurationException)):
            return err
        err = err.__cause__ or err.__context__
    return None


def _exit(message: str) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class VitLitArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, reporting a bad option in one line instead of the full usage text."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        cause = _user_error(ex)
        _exit(f"{cause if cause is not None else _one_line(message)} (`{PROG} <subcommand> --help` lists the options)")


class VitLitCLI(LightningCLI):
    """LightningCLI with the data-to-model links that keep class count and image size in one place."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The data decides what it delivers; the model adapts (its --model.num_classes/img_size flags disappear).
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.img_size", "model.img_size", apply_on="instantiate")

    def _parse_ckpt_path(self) -> None:
        # Lightning reads the checkpoint's hyperparameters into the config before anything is built; a file it cannot
        # read is reported like any other bad value.
        try:
            super()._parse_ckpt_path()
        except UNREADABLE as err:
            raise unreadable_checkpoint(self.config[self.config.subcommand].get("ckpt_path"), err) from None

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        # Read before the Trainer exists: it appends its default callbacks to this same list.
        configured = self.config_init[self.subcommand]["trainer"].get("callbacks") or []
        own_bar = any(isinstance(cb, LightningProgressBar) for cb in configured)
        trainer = super().instantiate_trainer(**kwargs)
        # Atomic checkpoint writes, unless the config names a CheckpointIO of its own (then that one is respected).
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        # vitlit's bar in place of the one Lightning adds when the config names none (see vitlit.progress).
        bar = trainer.progress_bar_callback
        if bar is not None and not own_bar:
            trainer.callbacks[trainer.callbacks.index(bar)] = ProgressBar()
        return trainer

    def _run_subcommand(self, subcommand: str) -> None:
        self._resolve_ckpt_path(subcommand)
        # Lightning creates the logger's version_N directory before the data and checkpoint are checked. If the
        # run then stops on a user error, that directory holds nothing but an empty event file (and the config):
        # remove it, so a failed start leaves no trace. A directory that existed before is never touched.
        log_dir = Path(self.trainer.log_dir) if self.trainer.log_dir else None
        existed = log_dir is not None and log_dir.exists()
        self._stop_signal: str | None = None
        previous = self._install_sigint_handler() if subcommand == "fit" else None
        try:
            super()._run_subcommand(subcommand)
        except SystemExit as err:  # SIGTERM (SIGTERMException) or a second Ctrl-C (Lightning exits after cleanup)
            if not self.trainer.interrupted:
                raise
            name = self._stop_signal or ("SIGTERM" if isinstance(err, SIGTERMException) else "SIGINT")
            where = f"interrupted by {name} at epoch {self.trainer.current_epoch}, step {self.trainer.global_step}"
            print(f"{PROG}: {where}; {self._resume_hint()}", file=sys.stderr)
            raise SystemExit(128 + signal.Signals[name].value) from None  # the shell's convention: 130, 143
        except TrainingHalted as err:
            print(f"{PROG}: error: {err}; {self._resume_hint()}", file=sys.stderr)
            raise SystemExit(1) from None
        except Exception as err:
            fresh = log_dir is not None and not existed and not any(log_dir.rglob("*.ckpt"))
            if fresh and _user_error(err) is not None:
                shutil.rmtree(log_dir, ignore_errors=True)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def _resolve_ckpt_path(self, subcommand: str) -> None:
        """Turn ``--ckpt_path last|auto`` into a file, and make ``fit`` from a run's checkpoint continue that run.

        Lightning's own ``last`` only looks in the new run's (empty) checkpoint folder. Here ``last`` means the newest
        ``last.ckpt`` of any earlier run under the logger's root and fails if there is none; ``auto`` (fit only) is the
        switch for job scripts that are restarted after preemption: resume if there is one, else start fresh. A fit
        resumed from ``<root>/version_N/checkpoints/`` logs into ``version_N`` again (one TensorBoard curve, one
        checkpoints folder); its resolved config goes next to the original as ``config.resume-K.yaml``.
        """
        config = self.config_init[subcommand]
        ckpt_path = config.get("ckpt_path")
        if ckpt_path in ("last", "auto"):
            if ckpt_path == "auto" and subcommand != "fit":
                raise ConfigError(f"--ckpt_path auto is for fit only; {subcommand} takes last or a checkpoint path.")
            found = self._newest_last_checkpoint()
            if found is None and ckpt_path == "last":
                raise ConfigError(
                    f"--ckpt_path last found no last.ckpt under {self._runs_root()}; give a checkpoint path, or check "
                    f"--trainer.default_root_dir."
                )
            config["ckpt_path"] = None if found is None else str(found)
        if subcommand == "fit" and config.get("ckpt_path"):
            self._continue_run(Path(config["ckpt_path"]).expanduser().resolve())

    def _runs_root(self) -> Path:
        """The folder whose ``version_*`` subfolders are the runs (``<default_root_dir>/lightning_logs``)."""
        logger = self.trainer.logger
        root = getattr(logger, "root_dir", None) if logger is not None else None
        return Path(root or self.trainer.default_root_dir).expanduser().resolve()

    def _newest_last_checkpoint(self) -> Path | None:
        candidates = list(self._runs_root().glob("*/checkpoints/last.ckpt"))
        candidates.append(Path(self.trainer.default_root_dir) / "checkpoints" / "last.ckpt")  # runs without a logger
        candidates += [folder / "last.ckpt" for folder in self._checkpoint_folders()]  # folders set in a config
        existing = [p for p in candidates if p.is_file()]
        return max(existing, key=lambda p: p.stat().st_mtime) if existing else None

    def _checkpoint_folders(self) -> set[Path]:
        """The folders the ModelCheckpoints write to: set in the config, or resolved by Lightning once fit started."""
        return {
            Path(cb.dirpath)
            for cb in self.trainer.checkpoint_callbacks
            if isinstance(cb, ModelCheckpoint) and cb.dirpath
        }

    def _continue_run(self, ckpt_path: Path) -> None:
        run_dir = ckpt_path.parent.parent
        logger = self.trainer.logger
        if run_dir.parent != self._runs_root() or not hasattr(logger, "_version"):
            return  # a checkpoint from elsewhere (or a logger without versions): a new run continues from it
        # TensorBoardLogger and CSVLogger take the version folder's name as their version.
        logger._version = run_dir.name
        k = 1
        while (run_dir / f"config.resume-{k}.yaml").exists():
            k += 1
        name = f"config.resume-{k}.yaml"
        for cb in self.trainer.callbacks:
            if isinstance(cb, SaveConfigCallback):
                cb.config_filename = name  # never overwrite the run's original config.yaml

    def _install_sigint_handler(self) -> signal.Handlers | None:
        """Make the first Ctrl-C stop like SIGTERM: at the next safe point of the loop, with a checkpoint.

        Python raises KeyboardInterrupt wherever the main thread happens to be, and where that is inside a finaliser
        or a C callback it is swallowed and training goes on. Lightning's SIGTERM handling instead sets a flag the
        loops check between steps; the first Ctrl-C is routed there. A second Ctrl-C interrupts at once. POSIX only
        (on Windows a SIGTERM to oneself terminates the process), main thread only (signal handlers live there), and
        for ``fit`` only: the other subcommands have no checkpoint to save.
        """
        if os.name != "posix" or threading.current_thread() is not threading.main_thread():
            return None

        def on_sigint(signum: int, frame: object) -> None:
            if self._stop_signal is not None:
                raise KeyboardInterrupt
            self._stop_signal = "SIGINT"
            print(
                f"{PROG}: stopping after this step and saving a checkpoint; Ctrl-C again to stop at once",
                file=sys.stderr,
            )
            os.kill(os.getpid(), signal.SIGTERM)

        return signal.signal(signal.SIGINT, on_sigint)

    def _resume_hint(self) -> str:
        """The command that resumes the stopped run (its checkpoint was saved on the way out), or why there is none."""
        trainer = self.trainer
        saved = [p for folder in self._checkpoint_folders() for p in folder.glob("*.ckpt")]
        if not saved or trainer.log_dir is None:
            return "no checkpoint was written, so there is nothing to resume."
        # last.ckpt where the config keeps one (it was rewritten on the way out), else the newest checkpoint.
        newest = max(saved, key=lambda p: (p.name == "last.ckpt", p.stat().st_mtime))
        saved_config = [cb.config_filename for cb in trainer.callbacks if isinstance(cb, SaveConfigCallback)]
        config = Path(trainer.log_dir) / (saved_config[0] if saved_config else "config.yaml")
        return f"resume with: python -m {PROG} fit --config {config} --ckpt_path {newest}"


def main(args: Sequence[str] | None = None) -> VitLitCLI:
    """Run the vitlit command line; the single entry of ``python -m vitlit``, ``vitlit``, the tests and notebooks.

    Args:
        args: Command-line arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        The CLI object, whose ``trainer``, ``model`` and ``datamodule`` hold the finished run.

    Raises:
        SystemExit: With status 2 and a one-line message on a user error (bad option, value, path or checkpoint).
    """
    try:
        return VitLitCLI(
            ViTClassifier,
            ImageClassificationDataModule,
            subclass_mode_data=True,
            # The model injects its own optimizer and step-interval scheduler; an automatic --optimizer would
            # silently replace them.
            auto_configure_optimizers=False,
            parser_class=VitLitArgumentParser,
            parser_kwargs={"prog": PROG},
            args=None if args is None else list(args),
        )
    except Exception as err:
        cause = _user_error(err)
        if cause is None:
            raise
        _exit(str(cause))
