"""The command line: ``python -m vitlit {fit,validate,test,predict} --config configs/<recipe>.yaml [--key value ...]``.

Everything is LightningCLI: the model is `vitlit.model.ViTClassifier` or a subclass (``--model``), the data module any
subclass of `vitlit.data.ImageClassificationDataModule` (``--data``), the Trainer and its callbacks come from the YAML.
Under every ``--config`` lies ``src/vitlit/defaults.yaml``, the one list of what a default run does. The CLI adds
what no callback can do: checks before anything is built, the run's folder (`vitlit.run_dir`), the checkpoint checked
before the run starts, and a stopped fit's last line with the command that resumes it. Example::

    python -m vitlit fit --config configs/cifar10_vit_tiny.yaml --trainer.max_epochs 5 --data.batch_size 256
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, NoReturn

from jsonargparse import ArgumentParser
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit import __version__
from vitlit import config as cfg
from vitlit.checks import check_activations, check_built_callbacks, check_metrics, check_run, reach_loggers
from vitlit.data import ImageClassificationDataModule
from vitlit.errors import ConfigError, TrainingHalted
from vitlit.exits import (
    STOP,
    dict_kwargs_keys,
    ended,
    one_line_error,
    parser_error,
    refused_arguments,
    refused_run,
    stop,
)
from vitlit.model import WEIGHTS_FROM_CHECKPOINT
from vitlit.run_dir import Placed, place_run, unlock
from vitlit.text import clean, learn_secrets, redacted, say, tell

PROG = "vitlit"
#: LightningCLI's subcommands, those the Trainer runs.
SUBCOMMANDS = ("fit", "validate", "test", "predict")
#: Subcommands beside LightningCLI's four: name -> the function whose typed, documented arguments are its flags. A
#: fork adds its own here; those whose module a fork deleted (``tools/``) are not offered (a file check, no import).
TOOLS = {
    "env": "vitlit.tools.env:env",
    "export": "vitlit.tools.export:export",
    "models": "vitlit.tools.models:models",
    "prepare": "vitlit.data.prepare:prepare",
    "serve": "vitlit.tools.serve:serve",
    "sweep": "vitlit.tools.sweep:sweep",
}
TOOLS = {name: to for name, to in TOOLS.items()
         if Path(__file__).parent.joinpath(*to.split(":")[0].split(".")[1:]).with_suffix(".py").is_file()}  # fmt: skip
#: Whether a config is being dumped: the outermost dump is what is printed or saved, and only it is masked.
_DUMPING: ContextVar[bool] = ContextVar("_DUMPING", default=False)
#: Lightning's log lines a vitlit user cannot act on (advertisements, what the resume line says better, the seed that
#: the run card keeps), and the loggers they come from.
QUIET = ("💡 Tip:", " was raised with message: ", "Received SIGTERM", "attempting graceful shutdown", "Seed set to",
         "Finished batch size finder", "`weights_only` was not set", "/.scale_batch_size_")  # fmt: skip
QUIET_LOGGERS = [
    f"lightning.{name}"
    for name in (
        "pytorch.utilities.rank_zero",
        "pytorch.trainer.call",
        "pytorch.trainer.connectors.signal_connector",
        "fabric.utilities.seed",
        "pytorch.tuner.batch_size_scaling",
        "pytorch.trainer.connectors.checkpoint_connector",
    )
]


def _exit(text: object, status: int = 2) -> NoReturn:
    """End with one error line: the escapes of names in it made visible, the credentials of URLs left out."""
    say(f"{PROG}: error: {text}", error=True)
    raise SystemExit(status)


def main(args: Sequence[str] | None = None, callbacks: Sequence[Callback] = ()) -> VitLitCLI:
    """Run the vitlit command line; the single entry of ``python -m vitlit``, ``vitlit``, the tests and notebooks.

    Args:
        args: Command-line arguments without the program name; ``None`` reads ``sys.argv``.
        callbacks: Lightning callbacks to add to the run's own, for callers in Python that hold objects no config
            can name (`vitlit.tools.sweep` adds Optuna's pruning callback, which carries its trial).

    Returns:
        The CLI object, whose ``trainer``, ``model`` and ``datamodule`` hold the finished run.

    Raises:
        SystemExit: With status 2 and a one-line message on a user error (bad option, value, path or checkpoint).
    """
    argv = sys.argv[1:] if args is None else [str(a) for a in args]
    learn_secrets(argv)  # a credential in a URL flag is masked wherever a library quotes it
    try:
        if argv and argv[0] in TOOLS:
            with quiet():
                return run_tool(argv[0], TOOLS[argv[0]], argv[1:], VitLitArgumentParser)
        cfg.check_config_files(argv)
        with quiet(), interrupts_stop_the_fit() if argv[:1] == ["fit"] else contextlib.nullcontext():
            # No abbreviations: `--trainer.max_ep 5` must be an error, not --trainer.max_epochs.
            defaults = {"default_config_files": [str(cfg.DEFAULTS)], "allow_abbrev": False}
            # Only the subcommand typed gets its parser (each takes a tenth of a second); `--help` lists them all.
            commands = argv[:1] if argv[:1] in (["fit"], ["validate"], ["test"], ["predict"]) else SUBCOMMANDS
            return VitLitCLI(
                commands,
                LightningModule,  # --model: a class path; the shared defaults name vitlit.model.ViTClassifier
                ImageClassificationDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                auto_configure_optimizers=False,  # the model injects its own optimizer and step-interval scheduler
                parser_class=VitLitArgumentParser,
                parser_kwargs={
                    "prog": PROG,
                    "description": f"Train and evaluate timm Vision Transformers with Lightning. More subcommands: "
                    f"{', '.join(TOOLS)}, each with its own --help.",
                    "allow_abbrev": False,
                    **dict.fromkeys(commands, defaults),
                },
                args=None if args is None else argv,
                trainer_class=Trainer,
                # Appended to the configured callbacks, and kept out of the saved config (objects, not options).
                trainer_defaults={"callbacks": list(callbacks)} if callbacks else None,
            )
    except (Exception, KeyboardInterrupt) as err:  # one line and its exit status; a bug's traceback is wanted
        status = ended(err)
        if status is None:
            raise
        raise SystemExit(status) from None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Leave out Lightning's notes and warnings a user cannot act on, while the CLI runs (`QUIET`); clean the rest.

    Cleaning (`vitlit.text.clean`) shows escapes and redacts credentials, in vitlit's own ``rank_zero_info`` lines
    too. Every entry is listed, with its reason, in docs/training.md: "What the command line leaves out of the log".
    """

    def note(record: logging.LogRecord) -> bool:  # a callable is a filter too
        record.msg, record.args = clean(record.getMessage()), None
        return not any(text in record.msg for text in QUIET)

    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    for logger in loggers:
        logger.addFilter(note)
    with warnings.catch_warnings():
        for message in ("LightningCLI's args parameter is intended",  # main(args) from Python: a notebook, pytest
                        r"Precision .* is not supported by the model summary", "The dirpath has changed from",
                        r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # Lightning's own, of torch's API
                        # A resume writes into its own run's folder; a mid-epoch one is said in vitlit's words
                        # (`vitlit.runs.checkpoint_io.RNGStateCheckpoint`: not bit-identical, end-of-epoch ones are).
                        r"Checkpoint directory .* exists and is not empty", r".*resuming from a checkpoint that ended",
                        r"(?s).*was deprecated in v4",  # jsonargparse's, of what Lightning calls
                        # LitData's streams are sharded per worker by LitData itself, which Lightning cannot know.
                        r"Your `IterableDataset` has `__len__` defined"):  # fmt: skip
            warnings.filterwarnings("ignore", message=message)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeFilter(note)


@contextlib.contextmanager
def interrupts_stop_the_fit() -> Iterator[None]:
    """While a fit runs, the first Ctrl-C (or SIGHUP, or Ctrl-Break, where they exist) stops it at the next step.

    Python raises KeyboardInterrupt wherever the main thread happens to be (inside an optimizer step, or swallowed in a
    finaliser); Lightning's SIGTERM handling stops between steps and saves ``last.ckpt`` on the way out, so the signal
    becomes a SIGTERM raised in this process (``raise_signal``: Windows' ``os.kill`` would end it at once). Before
    Lightning listens (data setup), and at a second Ctrl-C, it stops at once. Main thread only.
    """
    STOP.signal_name = None

    def stop_at_next_step(signum: int, frame: Any) -> None:
        listening = signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)  # Lightning's handler is in
        if STOP.signal_name is not None and signal.Signals(signum).name == "SIGHUP":
            return  # a hangup does not insist: a closed terminal is met by the kernel's signal and the bar's writes
        if STOP.signal_name is not None or not listening:
            raise KeyboardInterrupt
        STOP.signal_name = signal.Signals(signum).name
        tell("vitlit: stopping at the next step; Ctrl-C again to stop at once")
        signal.raise_signal(signal.SIGTERM)

    # Ctrl-C, and SIGHUP (POSIX) or Ctrl-Break (Windows) where they exist; a signal handler is the main thread's.
    names = ("SIGINT", "SIGHUP", "SIGBREAK") if threading.current_thread() is threading.main_thread() else ()
    handled = [getattr(signal, name) for name in names if hasattr(signal, name)]
    previous = {s: signal.signal(s, stop_at_next_step) for s in handled}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_tool(name: str, target: str, argv: list[str], parser_class: type[ArgumentParser]) -> Any:
    """Parse ``argv`` as the flags of the function ``target`` names (``vitlit export --help``) and call it.

    Args:
        name: The subcommand as typed after ``vitlit`` (for its usage line).
        target: ``module:function``, the subcommand's entry in `vitlit.cli.TOOLS`.
        argv: The arguments after the subcommand.
        parser_class: The CLI's parser, so that a tool's errors read as the CLI's.
    """
    module, function = target.split(":")
    try:
        run = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as err:
        if not module.startswith(str(err.name)):  # a package the tool needs, not the tool itself
            raise
        raise ConfigError(f"the {name} subcommand's module {module} is not in this copy of vitlit; restore it or "
                          f"drop {name} from vitlit.cli.TOOLS.") from None  # fmt: skip
    parser = parser_class(prog=f"vitlit {name}", description=(run.__doc__ or name).split("\n\n")[0],
                                  allow_abbrev=False)  # fmt: skip
    parser.add_function_arguments(run, as_group=False)
    if argv and not argv[0].startswith("-"):  # a leading word is the first argument: `vitlit models 'vit_*'`
        argv = [f"--{next(iter(inspect.signature(run).parameters))}", *argv]
    # Options may be spelled with dashes too (--n-trials for --n_trials), as most command-line tools take them.
    argv = [re.sub(r"^--([\w-]+)", lambda m: "--" + m.group(1).replace("-", "_"), a) for a in argv]
    cfg.check_finite_flags(argv)
    return run(**vars(parser.instantiate_classes(parser.parse_args(argv))))  # classes (vitlit prepare --data)


class VitLitArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, reporting a bad option in one line (the key and the value) instead of the usage.

    A run's config is dumped (``--print_config``, the saved ``config.yaml``) as `resolve_config` resolves it, with
    the credentials of its URLs masked (`vitlit.text.redacted`): a run folder is shared and pasted. A resume of a run
    that read a URL with credentials gives that flag again (better: the credentials in the environment).
    """

    def dump(self, cfg: Any, *args: Any, **kwargs: Any) -> str:
        if _DUMPING.get():  # jsonargparse dumps each class's arguments and loads them back: nothing masked there
            return super().dump(cfg, *args, **kwargs)
        if all(hasattr(cfg.get(key), "init_args") for key in ("model", "data")) and cfg.get("trainer"):
            cfg = cfg.clone()
            resolve_config(cfg)
        dumping = _DUMPING.set(True)
        try:
            return redacted(super().dump(cfg, *args, **kwargs))
        finally:
            _DUMPING.reset(dumping)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        _exit(parser_error(message, ex, TOOLS))


class VitLitCLI(LightningCLI):
    """LightningCLI with the data-to-model links, checks before anything is built, and the run's folder."""

    def __init__(self, commands: Sequence[str], *args: Any, **kwargs: Any) -> None:
        self.commands = commands  # the subcommands whose parsers are built
        self.run: Placed | None = None  # the run's folder, once placed
        self._checkpoint_classes: list[str] | None = None  # a predict of predict_dir's classes (`classes`)
        # The checkpoint a fit starts from: a file once parsed (its weights replace the pretrained ones), and
        # ``auto``/``last`` once resolved (`_check_and_place_run`), for the line of a stop.
        self._resumed: str | Path | None = None
        try:
            super().__init__(*args, **kwargs)
        except (SIGTERMException, TrainingHalted, KeyboardInterrupt, SystemExit) as err:
            self._stopped(err)
            raise
        except Exception as err:
            refused_run(err, self.run, self._stopped)  # a refused run leaves no folder; a lost logger stops the fit
            raise
        finally:
            if self.run is not None and self.run.lock is not None:
                unlock(self.run.run_dir, self.run.lock)

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """Lightning's subcommands (each with the arguments it leaves out), those of `commands` only."""
        return {name: skip for name, skip in LightningCLI.subcommands().items() if name in self.commands}

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict, subparser_kwargs: dict) -> None:
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        self.parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
        # After the subcommands took their names from it: the usage line lists the tools' subcommands too.
        self.parser.usage = f"{PROG} [--version] {{{','.join([*SUBCOMMANDS, *TOOLS])}}} ..."

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The data decides what it delivers; the model adapts (these --model.* flags disappear). The input_* are
        # recorded in checkpoints, so that exports and servers prepare new images as the data module did.
        # Reading data.class_names lists the data (a folder's files are found and admitted): the first look at it.
        for key, target in (*((k, k) for k in ("img_size", "in_chans")),
                            *((k, f"input_{k}") for k in ("mean", "std", "crop_pct", "interpolation"))):  # fmt: skip
            parser.link_arguments(f"data.{key}", f"model.init_args.{target}", apply_on="instantiate")
        parser.link_arguments("data", "model.init_args.class_names", self.classes, apply_on="instantiate")
        parser.link_arguments("data", "model.init_args.num_classes", self.class_count, apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, check the run's settings as a whole (`check_run`), and resolve its nulls and relative paths."""
        super().parse_arguments(parser, args)
        config = self.config[self.config["subcommand"]]
        cfg.check_finite(config.as_dict(), "--")  # YAML's .inf typed: a number once the parser has typed it
        check_run(self.config["subcommand"], config)
        resolve_config(config)
        model = config["model"]["init_args"]
        if self.config["subcommand"] != "fit" and config.get("ckpt_path"):
            # An evaluation's weights are the checkpoint's: pretrained ones and a distilled student's teacher would be
            # read (a file, the hub) for nothing, and a run copied to a machine without them was refused.
            if "pretrained" in model:
                model["pretrained"], model["pretrained_file"] = False, None
            if "distillation" in model:
                model["distillation"] = None
        ckpt = config.get("ckpt_path")
        if ckpt is not None:
            from vitlit.checkpoints import checkpoint_word, class_names_of, read_checkpoint  # runs from a checkpoint

            # The word or the file checked before the data are listed (memory-mapped: no weights are read).
            if checkpoint_word(ckpt, self.config["subcommand"]) is None:
                if "://" not in str(ckpt):  # saved absolute: run from another folder, the config resumes this run
                    ckpt = os.path.abspath(os.path.expanduser(ckpt))
                checkpoint = read_checkpoint(ckpt, config.get("weights_only"))
                self._resumed = ckpt if self.config["subcommand"] == "fit" else None
                if self.config["subcommand"] == "predict" and config["data"]["init_args"].get("predict_dir"):
                    self._checkpoint_classes = class_names_of(checkpoint, ckpt)
        # Held back until the run starts (`_check_and_place_run`): given a checkpoint, LightningCLI would copy the
        # checkpoint's hyperparameters over the parsed config (flags typed on the command line could vanish silently).
        self._ckpt_path, config["ckpt_path"] = ckpt, None

    def classes(self, data: ImageClassificationDataModule) -> list[str]:
        """The class names the model gets: the data's, or a checkpoint's where it predicts a folder of new images.

        Such a predict needs neither the training images nor their listing: a run copied to another machine, without
        its data, classifies new images with the classes it was trained on.
        """
        return data.class_names if self._checkpoint_classes is None else self._checkpoint_classes

    def class_count(self, data: ImageClassificationDataModule) -> int:
        """The model's ``num_classes``: as many as `classes` names."""
        return len(self.classes(data))

    def instantiate_classes(self) -> None:
        """Build the configured classes; one whose constructor refuses its arguments is a user error, in one line."""
        resumed = WEIGHTS_FROM_CHECKPOINT.set(self._resumed is not None)
        try:
            super().instantiate_classes()
        except Exception as err:
            # A path refused is said by `ended`; else the keywords the config gives beyond a signature may be refused.
            refused = None if one_line_error(err) else refused_arguments(err, dict_kwargs_keys(self.config.as_dict()))
            if refused is None:
                raise
            raise refused from None
        finally:
            WEIGHTS_FROM_CHECKPOINT.reset(resumed)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Lightning's Trainer, once no two stateful callbacks share a state key (a checkpoint keeps one state each)."""
        given = (self.config_init[self.subcommand] if self.subcommand else self.config_init)["trainer"]["callbacks"]
        check_built_callbacks(given if isinstance(given, list) else [given] if given else [])
        return super().instantiate_trainer(**kwargs)

    def _check_and_place_run(self) -> None:
        """Check ``--ckpt_path``, the memory and the loggers' services, then place the run: before Lightning writes."""
        subcommand, trainer, model = self.subcommand, self.trainer, self.model
        config, ckpt, run = self.config[subcommand], None, None
        config["ckpt_path"] = self._ckpt_path  # a word as typed, a file absolute, in the saved config
        if config["trainer"].get("default_root_dir") is None:  # the saved config names the root the run took: a
            config["trainer"]["default_root_dir"] = os.getcwd()  # resume from another folder finds it (auto, last)
        if self._ckpt_path is not None:
            from vitlit.checkpoints import start_from  # runs from a checkpoint only

            weights_only = self.config_init[subcommand].get("weights_only")
            ckpt, run = start_from(self._ckpt_path, subcommand, trainer, model, config, weights_only)
        self.config_init[subcommand]["ckpt_path"] = None if ckpt is None else str(ckpt)  # what the run loads
        self._resumed = ckpt if subcommand == "fit" else None
        check_activations(model, self.datamodule, trainer, subcommand)
        reach_loggers(trainer)
        self.run = place_run(trainer, subcommand, ckpt, run)

    # LightningCLI's hooks before each subcommand.
    before_fit = before_validate = before_test = before_predict = _check_and_place_run

    def _metrics_are_numbers(self) -> None:
        check_metrics(self.subcommand, self.trainer.callback_metrics)

    after_validate = after_test = _metrics_are_numbers  # LightningCLI's hooks after each subcommand

    def _stopped(self, err: BaseException) -> None:
        """End a fit stopped by a signal or a guard in one line with the command that resumes it, and its status."""
        stop(err, getattr(self, "trainer", None), self.run, getattr(self, "_resumed", None))  # none before built


def resolve_config(config: Any) -> None:
    """Write into a run's parsed config what its nulls and relative paths stand for, in place (idempotent).

    Paths become absolute (the saved config must work from any folder: the notebooks', a resume's), and with
    pretrained weights the data's missing mean/std/interpolation/crop_pct become the weights' own. The run, its saved
    ``config.yaml`` and ``--print_config`` all show this one resolution; the saved config also names the root the run
    took where none was given (`_check_and_place_run`), which a printed recipe leaves to the folder it runs in.
    """
    cfg.absolute_paths(config)
    model = config["model"]["init_args"]
    if model.get("pretrained") or model.get("pretrained_file"):  # the inputs the weights were trained with
        from vitlit.pretrained import fill_pretrained_inputs

        fill_pretrained_inputs(model, config["data"]["init_args"])
