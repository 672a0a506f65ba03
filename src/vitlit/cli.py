"""The command line: ``python -m vitlit {fit,validate,test,predict} --config configs/<recipe>.yaml [--key value ...]``.

Everything is LightningCLI: the model is `vitlit.ViTClassifier`, the data module any subclass of
`vitlit.data.ImageClassificationDataModule` (``--data CIFARDataModule`` or ``--data ImageFolderDataModule``), and
the Trainer with its callbacks comes from the YAML. Example::

    python -m vitlit fit --config configs/cifar10_vit_tiny.yaml --trainer.max_epochs 5 --data.batch_size 256
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit import __version__
from vitlit.checkpoint_io import AtomicCheckpointIO, checkpoint_step, read_checkpoint
from vitlit.data import ImageClassificationDataModule
from vitlit.errors import ConfigError, TrainingHalted
from vitlit.model import ViTClassifier
from vitlit.preflight import check_seed, check_trainer, check_writable_folder
from vitlit.progress import ProgressBar
from vitlit.runs import (
    allocate_version,
    logger_root,
    newer_checkpoint,
    newest_last_checkpoint,
    own_files,
    place_logger,
    resume_config_name,
    run_of_checkpoint,
)
from vitlit.trainer import Trainer

PROG = "vitlit"
DESCRIPTION = (
    "Train and evaluate timm Vision Transformers with Lightning: `vitlit fit --config configs/<recipe>.yaml`. "
    "Every option is a YAML key and a --flag; `vitlit fit --help` lists them."
)
# Lines of jsonargparse's nested Union report that repeat what the first error already says.
_NOISE = (
    "Does not validate against any of the Union",
    "Subtypes:",
    "Errors:",
    "- Expected a <class 'NoneType'>",
    "Given value type:",
    "Given value:",
)


class _QuietInterruptions(logging.Filter):
    """Drop Lightning's own notes on a SIGTERM, or on the Ctrl-C that vitlit routes to one.

    vitlit prints one line with the resume command instead of ``Received SIGTERM: 15`` and ``An SIGTERMException
    was raised with message: , ...``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "Received SIGTERM" not in message and not message.startswith("An SIGTERMException was raised")


for _name in ("lightning.pytorch.trainer.connectors.signal_connector", "lightning.pytorch.utilities.rank_zero"):
    logging.getLogger(_name).addFilter(_QuietInterruptions())


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


def _message(err: BaseException) -> str:
    """The one-line text of a user error (one raised in a DataLoader worker arrives wrapped in its traceback)."""
    text = str(err)
    if "Original Traceback" in text:  # torch's ExceptionWrapper: "Caught ... \n Original Traceback ... \n Type: msg"
        text = text.strip().splitlines()[-1].split(": ", 1)[-1]
    return text


class VitLitArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, reporting a bad option in one line instead of the full usage text."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        cause = _user_error(ex)
        _exit(f"{cause if cause is not None else _one_line(message)} (`{PROG} <subcommand> --help` lists the options)")


@dataclass
class _Placement:
    """The folder a run writes into, and how to leave it as it was if the run stops on a user error."""

    run_dir: Path
    created: bool  # the folder was made for this run (else: an existing run continues)
    before: set[Path] = field(default_factory=set)  # its top-level files before this run started
    config_name: str | None = None

    def undo(self, started: float, epochs_done: int) -> None:
        """Remove what this process added, unless it trained something worth keeping.

        A new run that stops in its first epoch goes entirely, also the ``last.ckpt`` that Lightning saves on the
        way out, so ``--ckpt_path last`` never prefers a half-trained run. A run that finished an epoch, or that
        continued an older run and saved a checkpoint, is kept: it can be resumed once the problem is fixed.
        """
        if self.created and epochs_done == 0:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        elif not self.created and not [p for p in self.run_dir.rglob("*.ckpt") if p.stat().st_mtime >= started]:
            for path in own_files(self.run_dir, self.before, self.config_name):
                path.unlink(missing_ok=True)


class VitLitCLI(LightningCLI):
    """LightningCLI with the data-to-model links that keep class count and image size in one place."""

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        # No abbreviations: `--trainer.max_ep 5` must be an error, not silently --trainer.max_epochs.
        kwargs.setdefault("allow_abbrev", False)
        return super().init_parser(**kwargs)

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        self.parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The data decides what it delivers; the model adapts (its --model.num_classes/img_size flags disappear).
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.img_size", "model.img_size", apply_on="instantiate")
        parser.link_arguments("data.class_names", "model.class_names", apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        # Values Lightning would crash on, ignore or silently replace: refused before anything is built.
        config = self.config[self.config["subcommand"]]
        check_seed(config.get("seed_everything"))
        check_trainer(config["trainer"])
        check_writable_folder(config["trainer"].get("default_root_dir") or ".")

    def _parse_ckpt_path(self) -> None:
        # Lightning would copy the checkpoint's model hyperparameters over the parsed config here, silently replacing
        # flags typed on the command line (and reading the whole file once more). vitlit runs with the config and
        # the flags as given, for every form of --ckpt_path, and checks the checkpoint against them before the run
        # starts (_check_checkpoint): architecture and classes must match, training knobs may change.
        return

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
        ckpt = self._resolve_ckpt_path(subcommand)
        if ckpt is not None:
            self._check_checkpoint(ckpt)  # before anything is written: a refused checkpoint changes nothing
        placed = self._place_run(subcommand, ckpt)
        started = time.time()
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
            if placed is not None and _user_error(err) is not None:
                placed.undo(started, self.trainer.current_epoch)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def _resolve_ckpt_path(self, subcommand: str) -> Path | None:
        """Turn ``--ckpt_path last|auto`` into a file and return the checkpoint to start from, if any.

        Lightning's own ``last`` only looks in the new run's (empty) checkpoint folder. Here ``last`` means the newest
        ``last.ckpt`` of any earlier run under the logger's root and fails if there is none; ``auto`` (fit only) is the
        switch for job scripts that are restarted after preemption: resume if there is one, else start fresh.
        """
        config = self.config_init[subcommand]
        ckpt_path = config.get("ckpt_path")
        if ckpt_path in ("last", "auto"):
            if ckpt_path == "auto" and subcommand != "fit":
                raise ConfigError(f"--ckpt_path auto is for fit only; {subcommand} takes last or a checkpoint path.")
            root = logger_root(self.trainer.logger) or Path(self.trainer.default_root_dir).expanduser().resolve()
            # Runs without a logger save to <default_root_dir>/checkpoints; a config may name its own folders too.
            folders = [Path(self.trainer.default_root_dir) / "checkpoints", *self._checkpoint_folders()]
            found = newest_last_checkpoint([root], folders)
            if found is None and ckpt_path == "last":
                raise ConfigError(
                    f"--ckpt_path last found no last.ckpt under {root}; give a checkpoint path, or check "
                    f"--trainer.default_root_dir."
                )
            config["ckpt_path"] = None if found is None else str(found)
        return Path(config["ckpt_path"]).expanduser().resolve() if config.get("ckpt_path") else None

    def _check_checkpoint(self, ckpt: Path) -> None:
        """Refuse a checkpoint that cannot be read or does not fit the configured model, in one line."""
        checkpoint = read_checkpoint(ckpt, self.config_init[self.subcommand].get("weights_only"))
        check = getattr(self.model, "check_checkpoint", None)
        if callable(check):
            run = run_of_checkpoint(ckpt)
            known = run is not None and (run / "config.yaml").is_file()
            check(checkpoint.get("hyper_parameters", {}), f"--config {run / 'config.yaml'}" if known else None)

    def _place_run(self, subcommand: str, ckpt: Path | None) -> _Placement | None:
        """Choose the run folder and create it (atomically), before Lightning writes anything.

        - ``fit`` from a run's checkpoint continues that run, wherever it is and whatever the current directory: one
          TensorBoard curve, one checkpoints folder, its config saved as ``config.resume-K.yaml`` next to the
          original. If the run holds a checkpoint of a later step (resuming from the best, say), the resume goes to
          a new folder beside it instead, so nothing newer is overwritten.
        - ``validate``/``test``/``predict`` of a run's checkpoint write into ``<run>/<subcommand>/version_K`` (metrics,
          ``predictions.csv``), next to the run and without touching its training files.
        - Anything else is a new ``version_N`` under the logger's root. Loggers other than TensorBoard's and the CSV
          logger keep their own folders (``None`` is returned).
        """
        logger = self.trainer.logger
        if logger_root(logger) is None:
            return None
        save_dir, name = Path(logger.save_dir), logger.name
        run = run_of_checkpoint(ckpt) if ckpt is not None else None
        if run is not None and subcommand == "fit":
            newer = newer_checkpoint(ckpt, run)
            if newer is None:
                config_name = resume_config_name(run)
                for callback in self.trainer.callbacks:
                    if isinstance(callback, SaveConfigCallback):
                        callback.config_filename = config_name  # never overwrite the run's original config.yaml
                place_logger(logger, run.parent.parent, run.parent.name, run.name)
                return _Placement(run, created=False, before=set(run.iterdir()), config_name=config_name)
            save_dir, name = run.parent.parent, run.parent.name
            print(
                f"{PROG}: {ckpt.name} is from step {checkpoint_step(ckpt)}, but {newer[0]} is from step {newer[1]}; "
                f"continuing in a new run beside {run.name} so that nothing newer is overwritten",
                file=sys.stderr,
            )
        elif run is not None:
            save_dir, name = run, subcommand
        version = allocate_version(save_dir / name)
        place_logger(logger, save_dir, name, version)
        return _Placement(save_dir / name / f"version_{version}", created=True)

    def _checkpoint_folders(self) -> set[Path]:
        """The folders the ModelCheckpoints write to: set in the config, or resolved by Lightning once fit started."""
        return {
            Path(cb.dirpath)
            for cb in self.trainer.checkpoint_callbacks
            if isinstance(cb, ModelCheckpoint) and cb.dirpath
        }

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


def _check_config_files(argv: list[str]) -> None:
    """Refuse a ``--config`` file that is empty, not YAML, or not a mapping of options.

    jsonargparse reports those only as ``Unexpected config:``; a missing file it names itself.
    """
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"]
    values += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    for value in values:
        path = Path(value).expanduser()
        if not path.is_file():
            continue
        try:
            content = yaml.safe_load(path.read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            where = getattr(err, "problem_mark", None)
            at = f" at line {where.line + 1}" if where is not None else ""
            raise ConfigError(f"config file {value} is not valid YAML{at}; fix it or start from configs/.") from None
        if content is None:
            raise ConfigError(f"config file {value} is empty; give a YAML file of options such as configs/*.yaml.")
        if not isinstance(content, dict):
            raise ConfigError(
                f"config file {value} holds a {type(content).__name__}, not options (key: value lines such as "
                f"'trainer:'); start from a file in configs/."
            )


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
        _check_config_files(sys.argv[1:] if args is None else [str(a) for a in args])
        with warnings.catch_warnings():
            # Lightning warns when `args` is given while sys.argv holds other words (a notebook's kernel arguments,
            # pytest's): main(args) is exactly the way to run the CLI from Python.
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
            # Short epochs: ViTClassifier.on_train_start lowers log_every_n_steps to the epoch's length instead.
            warnings.filterwarnings("ignore", message=r"The number of training batches \(\d+\) is smaller than")
            # The model summary's size estimate assumes fp32 under mixed precision and says so on every run.
            warnings.filterwarnings("ignore", message=r"Precision .* is not supported by the model summary")
            return _cli(args)
    except Exception as err:
        cause = _user_error(err)
        if cause is None:
            raise
        _exit(_message(cause))


def entry_point() -> None:
    """The ``vitlit`` console script: `main`, with exit status 0 on success (it returns the CLI object)."""
    main()


def _cli(args: Sequence[str] | None) -> VitLitCLI:
    return VitLitCLI(
        ViTClassifier,
        ImageClassificationDataModule,
        trainer_class=Trainer,
        subclass_mode_data=True,
        # The model injects its own optimizer and step-interval scheduler; an automatic --optimizer would
        # silently replace them.
        auto_configure_optimizers=False,
        parser_class=VitLitArgumentParser,
        parser_kwargs={"prog": PROG, "description": DESCRIPTION},
        args=None if args is None else list(args),
    )
