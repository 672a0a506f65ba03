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
from typing import NoReturn

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit.data import ImageClassificationDataModule
from vitlit.errors import ConfigError
from vitlit.model import ViTClassifier

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

    def _run_subcommand(self, subcommand: str) -> None:
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
            print(f"{PROG}: {self._interruption_report(name)}", file=sys.stderr)
            raise SystemExit(128 + signal.Signals[name].value) from None  # the shell's convention: 130, 143
        except Exception as err:
            if log_dir is not None and not existed and _user_error(err) is not None:
                shutil.rmtree(log_dir, ignore_errors=True)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

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

    def _interruption_report(self, signal_name: str) -> str:
        """Say where the run stopped and the command that resumes it (the checkpoint was saved on the signal)."""
        trainer = self.trainer
        where = f"interrupted by {signal_name} at epoch {trainer.current_epoch}, step {trainer.global_step}"
        folders = {
            Path(cb.dirpath) for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath
        }
        saved = [p for folder in folders for p in folder.glob("*.ckpt")]
        if not saved or trainer.log_dir is None:
            return f"{where}; no checkpoint was written, so there is nothing to resume."
        # last.ckpt where the config keeps one (it was rewritten on the signal), else the newest checkpoint.
        newest = max(saved, key=lambda p: (p.name == "last.ckpt", p.stat().st_mtime))
        config = Path(trainer.log_dir) / "config.yaml"
        return f"{where}; resume with: python -m {PROG} fit --config {config} --ckpt_path {newest}"


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
