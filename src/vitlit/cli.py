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
import math
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import BatchSizeFinder
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit import __version__
from vitlit import config as cfg
from vitlit.data import ImageClassificationDataModule
from vitlit.errors import CheckFailed, ConfigError, TrainingHalted
from vitlit.memory import check_activations
from vitlit.run_dir import Placed, place_run, resolve_checkpoint, run_of_checkpoint, saved_config, unlock
from vitlit.runtime import STOP, interrupts_stop_the_fit, quiet
from vitlit.streams import stream_gone, tell
from vitlit.text import say

PROG = "vitlit"
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


def _exit(text: object, status: int = 2) -> NoReturn:
    """End with one error line: the escapes of names in it made visible, the credentials of URLs left out."""
    say(f"{PROG}: error: {text}", error=True)
    raise SystemExit(status)


def resolve_config(config: Any) -> None:
    """Write into a run's parsed config what its nulls and relative paths stand for, in place (idempotent).

    Paths become absolute (the saved config must work from any folder: the notebooks', a resume's), and with
    pretrained weights the data's missing mean/std/interpolation/crop_pct become the weights' own. The run, its saved
    ``config.yaml`` and ``--print_config`` all show this one resolution.
    """
    cfg.absolute_paths(config)
    model = config["model"]["init_args"]
    if model.get("pretrained") or model.get("pretrained_file"):  # the inputs the weights were trained with
        from vitlit.pretrained import fill_pretrained_inputs

        fill_pretrained_inputs(model, config["data"]["init_args"])


class VitLitArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, reporting a bad option in one line (the key and the value) instead of the usage.

    A run's config is dumped (``--print_config``, the saved ``config.yaml``) as `resolve_config` resolves it.
    """

    def dump(self, cfg: Any, *args: Any, **kwargs: Any) -> str:
        if all(hasattr(cfg.get(key), "init_args") for key in ("model", "data")) and cfg.get("trainer"):
            cfg = cfg.clone()
            resolve_config(cfg)
        return super().dump(cfg, *args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        from vitlit.messages import one_line, user_error

        cause = user_error(ex)
        text = str(cause) if cause is not None else one_line(message)
        if "invalid choice" in text:  # LightningCLI knows its four subcommands; the tools are vitlit's
            text = text.replace(")", ", " + ", ".join(repr(name) for name in TOOLS) + ")", 1)
        _exit(f"{text} (`{PROG} <subcommand> --help` lists the options)")


class VitLitCLI(LightningCLI):
    """LightningCLI with the data-to-model links, checks before anything is built, and the run's folder."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.run: Placed | None = None  # the run's folder, once placed
        try:
            super().__init__(*args, **kwargs)
        except (SIGTERMException, TrainingHalted, KeyboardInterrupt, SystemExit) as err:
            self._stopped(err)
            raise
        except Exception as err:
            # A user error found once the folder was made (an image that cannot be read, met at the data's setup):
            # the folder this run made goes again, as long as it holds no checkpoint, so a refused run leaves none.
            from vitlit.messages import failed_logger, one_line_error

            users = bool(one_line_error(err))
            if not users and failed_logger(err) is not None:
                self._stopped(err)  # a logger's service went away mid-run: one line, with the resume command
            placed = self.run
            if placed and placed.made and users and not any(placed.run_dir.rglob("*.ckpt")):
                shutil.rmtree(placed.run_dir, ignore_errors=True)
                for folder in placed.made[1:]:  # lightning_logs/ and the root, where this run made them
                    with contextlib.suppress(OSError):  # not empty: another run wrote there meanwhile
                        folder.rmdir()
            raise
        finally:
            if self.run is not None and self.run.lock is not None:
                unlock(self.run.run_dir, self.run.lock)

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        kwargs.setdefault("allow_abbrev", False)  # `--trainer.max_ep 5` must be an error, not --trainer.max_epochs
        return super().init_parser(**kwargs)

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict, subparser_kwargs: dict) -> None:
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        self.parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
        # After the subcommands took their names from it: the usage line lists the tools' subcommands too.
        self.parser.usage = f"{PROG} [--version] {{{','.join(['fit', 'validate', 'test', 'predict', *TOOLS])}}} ..."

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The data decides what it delivers; the model adapts (these --model.* flags disappear). The input_* are
        # recorded in checkpoints, so that exports and servers prepare new images as the data module did.
        for key, target in (*((k, k) for k in ("num_classes", "class_names", "img_size", "in_chans")),
                            *((k, f"input_{k}") for k in ("mean", "std", "crop_pct", "interpolation"))):  # fmt: skip
            parser.link_arguments(f"data.{key}", f"model.init_args.{target}", apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        config = self.config[self.config["subcommand"]]
        cfg.check_run(self.config["subcommand"], config)
        # Kept from LightningCLI until the classes are built: given a checkpoint, it copies the checkpoint's
        # hyperparameters over the parsed config (flags typed on the command line could vanish without a word).
        self._ckpt_path, config["ckpt_path"] = config.get("ckpt_path"), None

    def instantiate_classes(self) -> None:
        """Build the configured classes; one whose constructor refuses its arguments is a user error, in one line."""
        try:
            super().instantiate_classes()
        except Exception as err:
            from vitlit.messages import one_line_error, refused_arguments

            refused = None if one_line_error(err) else refused_arguments(err)  # a path refused: main says it
            if refused is None:
                raise
            raise refused from None

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Lightning's Trainer, once no two stateful callbacks share a state key (a checkpoint keeps one state each)."""
        given = (self.config_init[self.subcommand] if self.subcommand else self.config_init)["trainer"]["callbacks"]
        callbacks = given if isinstance(given, list) else [given] if given else []
        if any(type(cb) is BatchSizeFinder for cb in callbacks):  # a batch without its learning rate or config
            raise ConfigError(
                "BatchSizeFinder changes the batch but not the learning rate, the schedule's length or "
                "the saved config; use --trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch."
            )
        keys = [cb.state_key for cb in callbacks if type(cb).state_dict is not Callback.state_dict]
        twice = next((cb for cb in callbacks if keys.count(cb.state_key) > 1), None)
        if twice is not None:
            raise ConfigError(f"two {type(twice).__name__} callbacks have the same settings ({twice.state_key}), and "
                              f"a checkpoint keeps one state per setting: change the one src/vitlit/defaults.yaml "
                              f"already has (--trainer.callbacks in --print_config) or give yours another monitor, "
                              f"mode or every_n_epochs.")  # fmt: skip
        return super().instantiate_trainer(**kwargs)

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        config["ckpt_path"] = self._ckpt_path  # as typed, in the saved config
        resolve_config(config)

    def _start(self) -> None:
        """Resolve and check ``--ckpt_path``, then place the run: all before Lightning writes anything."""
        subcommand, trainer, model = self.subcommand, self.trainer, self.model
        logger = trainer.logger
        root = Path(getattr(logger, "root_dir", None) or Path(trainer.default_root_dir) / "lightning_logs")
        ckpt = resolve_checkpoint(self._ckpt_path, subcommand, root.expanduser().absolute(), self.config[subcommand])
        if ckpt is not None:
            from vitlit.checkpoints import check_restorable, check_weights, read_checkpoint  # runs from a checkpoint

            checkpoint = read_checkpoint(ckpt, self.config_init[subcommand].get("weights_only"))
            check_restorable(checkpoint, ckpt, resume=subcommand == "fit", max_epochs=self.trainer.max_epochs)
            run = run_of_checkpoint(ckpt)
            options = f"--config {run / 'config.yaml'}" if run is not None else None
            if hasattr(model, "check_checkpoint"):  # architecture, classes and (for a resume) the optimizer
                model.check_checkpoint(checkpoint, options, resume=subcommand == "fit")
            check_weights(checkpoint["state_dict"], model.state_dict(), ckpt)
        self.config_init[subcommand]["ckpt_path"] = None if ckpt is None else str(ckpt)  # what the run loads
        check_activations(model, self.datamodule, trainer, subcommand)
        if any(type(logger).__name__ not in ("TensorBoardLogger", "CSVLogger") for logger in trainer.loggers):
            from vitlit.services import reach_loggers  # MLflow, W&B: runs that log to a service only

            reach_loggers(trainer)
        self.run = place_run(trainer, subcommand, ckpt)

    before_fit = before_validate = before_test = before_predict = _start  # LightningCLI's hooks before each subcommand

    def _metrics_are_numbers(self) -> None:
        """A validate or test whose loss or accuracy is NaN or infinite fails (status 1) rather than exiting 0."""
        metrics = self.trainer.callback_metrics.items()
        bad = [f"{k} {float(v)}" for k, v in metrics if v.numel() == 1 and not math.isfinite(float(v))]
        if bad:
            raise CheckFailed(
                f"{self.subcommand} gave {', '.join(bad)}: the model's outputs are not finite numbers; evaluate an "
                f"earlier checkpoint of the run (its checkpoints/ folder) or one trained with --trainer.precision 32"
            )

    after_validate = after_test = _metrics_are_numbers  # LightningCLI's hooks after each subcommand

    def _stopped(self, err: BaseException) -> None:
        """End a fit stopped by a signal or a guard in one line with the command that resumes it, and its status."""
        trainer = getattr(self, "trainer", None)
        from vitlit.messages import failed_logger  # the end of a run only

        logger = failed_logger(err) if isinstance(err, Exception) else None  # not an interrupt met inside a logger
        if isinstance(err, TrainingHalted):
            line, status = f"{PROG}: error: {err}", 1
        elif logger is not None:  # before `interrupted`, which Lightning sets for any exception
            reason = " ".join(str(err).split())[:160] or type(err).__name__
            line, status = f"{PROG}: error: {type(logger).__name__} failed during the run ({reason})", 1
        elif trainer is not None and (isinstance(err, SIGTERMException) or trainer.interrupted):
            name = STOP.signal_name or ("SIGTERM" if isinstance(err, SIGTERMException) else "SIGINT")
            line = f"{PROG}: interrupted by {name} at epoch {trainer.current_epoch}, step {trainer.global_step}"
            status = 128 + signal.Signals[name].value  # the shell's convention
        else:
            return
        last = self.run.run_dir / "checkpoints" / "last.ckpt" if self.run is not None else None
        if last is not None and last.is_file():
            config = saved_config(trainer, self.run.run_dir)
            line += f"; resume with: python -m {PROG} fit --config {config} --ckpt_path {last}"
        elif trainer is None or trainer.is_global_zero:
            line += "; no checkpoint was written, so there is nothing to resume"
        if trainer is None or trainer.is_global_zero:  # one line, not one per DDP process
            tell(line)
        raise SystemExit(status) from None


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
    try:
        if argv and argv[0] in TOOLS:
            from vitlit.run_tool import run_tool  # loaded for a tool's run only

            with quiet():
                return run_tool(argv[0], TOOLS[argv[0]], argv[1:], VitLitArgumentParser)
        cfg.check_config_files(argv)
        with quiet(), interrupts_stop_the_fit() if argv[:1] == ["fit"] else contextlib.nullcontext():
            defaults = {"default_config_files": [str(cfg.DEFAULTS)]}
            return VitLitCLI(
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
                    **dict.fromkeys(("fit", "validate", "test", "predict"), defaults),
                },
                args=None if args is None else argv,
                trainer_class=Trainer,
                # Appended to the configured callbacks, and kept out of the saved config (objects, not options).
                trainer_defaults={"callbacks": list(callbacks)} if callbacks else None,
            )
    except CheckFailed as err:
        _exit(err, status=1)
    except KeyboardInterrupt:  # Ctrl-C before a fit listens for it (data setup, a folder scan), or outside a fit
        tell(f"{PROG}: interrupted by SIGINT; nothing was saved")
        raise SystemExit(130) from None
    except BrokenPipeError:  # the output's reader went away (`vitlit models | head`): nothing left to tell it
        stream_gone()
        raise SystemExit(141) from None  # 128 + SIGPIPE, as a shell reports a writer it cut off
    except Exception as err:
        from vitlit.messages import one_line_error

        line = one_line_error(err)
        if line is None:  # not a user's error: its traceback is wanted
            raise
        _exit(line)
