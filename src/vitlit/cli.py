"""The command line: ``python -m vitlit {fit,validate,test,predict} --config configs/<recipe>.yaml [--key value ...]``.

Everything is LightningCLI: the model is `vitlit.ViTClassifier` or a subclass (``--model``), the data module any
subclass of `vitlit.data.ImageClassificationDataModule` (``--data``), the Trainer and its callbacks come from the
YAML. Under every ``--config`` lie the shared defaults: ``defaults.yaml`` here, then each opt-in part's. Example::

    python -m vitlit fit --config configs/cifar10_vit_tiny.yaml --trainer.max_epochs 5 --data.batch_size 256
"""

from __future__ import annotations

import contextlib
import inspect
import re
import signal
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, NoReturn

from lightning.pytorch import Callback, LightningModule
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit import __version__
from vitlit import config as cfg
from vitlit.data import ImageClassificationDataModule
from vitlit.errors import CheckFailed
from vitlit.pretrained import fill_pretrained_normalization
from vitlit.trainer import Trainer

PROG = "vitlit"
DESCRIPTION = (
    "Train and evaluate timm Vision Transformers with Lightning: `vitlit fit --config configs/<recipe>.yaml`. "
    "Every option is a YAML key and a --flag; `vitlit fit --help` lists them. More subcommands: {tools}, each with "
    "its own --help."
)


def _exit(text: str) -> NoReturn:
    print(f"{PROG}: error: {text}", file=sys.stderr)
    raise SystemExit(2)


class VitLitArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, reporting a bad option in one line instead of the full usage text."""

    argv: ClassVar[list[str]] = []  # the command line being parsed, for the message (set by `main`)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        line = cfg.parser_error(message, ex, self.argv, self.format_help() if "unrecognized" in message else "")
        _exit(f"{line} (`{PROG} <subcommand> --help` lists the options)")


class VitLitCLI(LightningCLI):
    """LightningCLI with the data-to-model links, checks before anything is built, and two hooks for callbacks.

    A callback with a ``resolve_checkpoint(trainer, pl_module, subcommand, ckpt_path, weights_only)`` method chooses
    the checkpoint the run starts from (`vitlit.runs.resume.CheckedResume`: ``--ckpt_path last|auto``, checked);
    without one, ``--ckpt_path`` goes to Lightning as typed. A callback with a
    ``before_run(trainer, pl_module, subcommand, ckpt)`` method is called once the checkpoint is chosen and before
    the run starts (Lightning's own hooks come after its logger has written), and its
    ``on_exception`` and ``teardown`` once the run is over, also when it failed before or inside Lightning (which
    tears callbacks down only after a run that ended normally; an error inside Lightning reaches ``on_exception``
    twice): `vitlit.runs.placement.RunFolders` places the run this way, and `vitlit.runs.interrupts.ResumableStop`
    ends an interrupted run with the command that resumes it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.started: list[Callback] = []
        try:
            super().__init__(*args, **kwargs)
        except BaseException as err:
            for callback in self.started:
                callback.on_exception(self.trainer, self.model, err)
                callback.teardown(self.trainer, self.model, self.subcommand)
            if isinstance(err, SIGTERMException) and err.code is None:  # Lightning's stop would exit with status 0
                err.code = 128 + signal.SIGTERM  # the shell's convention (a callback may have set another)
            raise

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        kwargs.setdefault("allow_abbrev", False)  # `--trainer.max_ep 5` must be an error, not --trainer.max_epochs
        return super().init_parser(**kwargs)

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        self.parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The data decides what it delivers; the model adapts (these --model.* flags disappear). The mean and std
        # are recorded in checkpoints, so that exports and servers normalise new images as the data module did.
        for key, target in (*((k, k) for k in ("num_classes", "class_names", "img_size", "in_chans")),
                            ("mean", "input_mean"), ("std", "input_std")):  # fmt: skip
            parser.link_arguments(f"data.{key}", f"model.init_args.{target}", apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        subcommand = self.config["subcommand"]
        config = self.config[subcommand]
        for check in cfg.hooks("after_parsing"):  # seeds, evaluations without a checkpoint (vitlit.checks)
            check(subcommand, config)
        # Kept from LightningCLI until the classes are built: given a checkpoint, it copies the checkpoint's
        # hyperparameters over the parsed config (flags typed on the command line could vanish without a word).
        self._ckpt_path, config["ckpt_path"] = config.get("ckpt_path"), None

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        config["ckpt_path"] = self._ckpt_path  # as typed, in the saved config
        cfg.absolute_paths(config)  # the saved config must work from any folder (the notebooks', a resume's)
        fill_pretrained_normalization(config["model"]["init_args"], config["data"]["init_args"])

    def _start(self) -> None:
        """Let callbacks resolve ``--ckpt_path`` (``resolve_checkpoint``), then call their ``before_run``."""
        subcommand, trainer, ckpt = self.subcommand, self.trainer, self._ckpt_path
        ckpt = None if ckpt is None or str(ckpt).lower() == "none" else ckpt  # none: evaluate the model as built
        for callback in [cb for cb in trainer.callbacks if callable(getattr(cb, "resolve_checkpoint", None))]:
            weights_only = self.config_init[subcommand].get("weights_only")
            ckpt = callback.resolve_checkpoint(trainer, self.model, subcommand, self._ckpt_path, weights_only)
        self.config_init[subcommand]["ckpt_path"] = None if ckpt is None else str(ckpt)  # what the run loads
        for callback in [cb for cb in trainer.callbacks if callable(getattr(cb, "before_run", None))]:
            self.started.append(callback)
            callback.before_run(trainer, self.model, subcommand, ckpt)

    before_fit = before_validate = before_test = before_predict = _start  # LightningCLI's hooks before each subcommand


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
    argv = VitLitArgumentParser.argv = sys.argv[1:] if args is None else [str(a) for a in args]
    try:
        commands = cfg.tools()
        if argv and argv[0] in commands:
            return _tool(argv[0], commands[argv[0]].load(), argv[1:])
        for check in cfg.hooks("before_parsing"):  # config files jsonargparse would misread (vitlit.checks)
            check(argv)
        with contextlib.ExitStack() as around:
            for hook in cfg.hooks("around_run"):  # e.g. Lightning's notes nobody can act on (vitlit.runs.quiet)
                around.enter_context(hook(argv[0] if argv else ""))
            defaults = {"default_config_files": cfg.default_configs()}
            return VitLitCLI(
                LightningModule,  # --model: a class path; the shared defaults name vitlit.model.ViTClassifier
                ImageClassificationDataModule,
                trainer_class=Trainer,
                subclass_mode_model=True,
                subclass_mode_data=True,
                auto_configure_optimizers=False,  # the model injects its own optimizer and step-interval scheduler
                parser_class=VitLitArgumentParser,
                parser_kwargs={
                    "prog": PROG,
                    "description": DESCRIPTION.format(tools=", ".join(commands)),
                    **dict.fromkeys(("fit", "validate", "test", "predict"), defaults),
                },
                args=None if args is None else argv,
                # Appended to the configured callbacks, and kept out of the saved config (objects, not options).
                trainer_defaults={"callbacks": list(callbacks)} if callbacks else None,
            )
    except CheckFailed as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as err:
        line = cfg.one_line_error(err)
        if line is None:  # not a user's error: its traceback is wanted
            raise
        _exit(line)


def _tool(name: str, run: Any, argv: list[str]) -> Any:
    """Run a `vitlit.config.tools` function with its typed, documented arguments as flags (``vitlit export --help``)."""
    parser = VitLitArgumentParser(prog=f"{PROG} {name}", description=run.__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_function_arguments(run, as_group=False)
    if argv and not argv[0].startswith("-"):  # a leading word is the first argument: `vitlit models 'vit_*'`
        argv = [f"--{next(iter(inspect.signature(run).parameters))}", *argv]
    # Options may be spelled with dashes too (--n-trials for --n_trials), as most command-line tools take them.
    argv = [re.sub(r"^--([\w-]+)", lambda m: "--" + m.group(1).replace("-", "_"), a) for a in argv]
    return run(**parser.parse_args(argv).as_dict())
