"""The command line: ``python -m vitlit {fit,validate,test,predict} --config configs/<recipe>.yaml [--key value ...]``.

Everything is LightningCLI: the model is `vitlit.ViTClassifier`, the data module any subclass of
`vitlit.data.ImageClassificationDataModule` (``--data CIFARDataModule`` or ``--data ImageFolderDataModule``), and
the Trainer with its callbacks comes from the YAML. Example::

    python -m vitlit fit --config configs/cifar10_vit_tiny.yaml --trainer.max_epochs 5 --data.batch_size 256
"""

from __future__ import annotations

import errno
import importlib
import logging
import re
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jsonargparse import Namespace
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit import __version__
from vitlit.checkpoint_io import AtomicCheckpointIO, disk_full, read_checkpoint
from vitlit.data import ImageClassificationDataModule
from vitlit.errors import CheckFailed, ConfigError, TrainingHalted
from vitlit.finetune import FreezeSchedule
from vitlit.interrupts import FirstInterruptAsSigterm
from vitlit.model import ViTClassifier
from vitlit.preflight import check_seed, check_seed_shared, check_trainer, check_writable_folder
from vitlit.pretrained import fill_pretrained_normalization
from vitlit.progress import ProgressBar
from vitlit.runs import (
    Placement,
    checkpoint_folders,
    logger_root,
    place_run,
    relocated_logger,
    resolve_checkpoint,
    resume_hint,
    run_of_checkpoint,
)
from vitlit.trainer import Trainer

PROG = "vitlit"
#: The trainer settings every recipe shares (callbacks, checkpointing, logging), applied before the --config files.
DEFAULTS = Path(__file__).with_name("defaults.yaml")
DESCRIPTION = (
    "Train and evaluate timm Vision Transformers with Lightning: `vitlit fit --config configs/<recipe>.yaml`. "
    "Every option is a YAML key and a --flag; `vitlit fit --help` lists them. Beside the subcommands below: "
    "`vitlit export` (ONNX, int8, torch.export), `vitlit serve` (HTTP) and `vitlit env` (this machine), each with its "
    "own --help."
)
#: Commands that work from a checkpoint alone, outside LightningCLI: name -> "module:function".
TOOLS = {
    "export": "vitlit.export:export",
    "serve": "vitlit.serve:serve",
    "env": "vitlit.env:env",
    "sweep": "vitlit.sweep:sweep",
}
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


_KEY = re.compile(r'Parser key "([^"]+)"')
_RESTRICTION = re.compile(r"Not of type (\w+): (?:(\S+) )?does not conform to restriction (.+)")
_GIVEN = re.compile(r"Given value: (.+)")


def _out_of_range(message: str) -> str | None:
    """One sentence for a value outside a constrained type's range (`vitlit.types`), or ``None`` for other errors.

    jsonargparse says ``Parser key "batch_size": Not of type PositiveInt: 0 does not conform to restriction v>0``,
    and inside ``Optional``/``Union`` types leaves the value to a ``Given value:`` line further down.
    """
    key, found = _KEY.search(message), _RESTRICTION.search(message)
    if key is None or found is None:
        return None
    type_name, value, restriction = found.groups()
    if value is None:
        given = _GIVEN.search(message)
        value = given.group(1).strip() if given else "?"
    return f"{key.group(1)}={value} is not a {type_name}; give a value with {restriction.strip()}"


def _one_line(message: str) -> str:
    """Condense jsonargparse's multi-line report (bad key, wrong type) into one line naming key and value."""
    lines = (line.strip().removeprefix("- ") for line in message.splitlines())
    return " ".join(line for line in lines if line and not line.startswith(_NOISE))


def _user_error(err: BaseException | None) -> BaseException | None:
    """Return the ConfigError (or Lightning misconfiguration) that is ``err`` or that ``err`` was raised from.

    Only explicit causes (``raise ... from err``) are followed: an unrelated error that happened to be handled
    while another was raised is not the user's.
    """
    while err is not None:
        if isinstance(err, (ConfigError, MisconfigurationException)):
            return err
        err = err.__cause__
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
        text = str(cause) if cause is not None else _out_of_range(message) or _one_line(message)
        _exit(f"{text} (`{PROG} <subcommand> --help` lists the options)")


class VitLitCLI(LightningCLI):
    """LightningCLI wired for vitlit, through Lightning's public hooks only.

    - parser: the data-to-model links (class count, names, image size, channels), no abbreviations, ``--version``;
    - after parsing: the Trainer-setting checks of `vitlit.preflight`;
    - before the classes are built: normalisation statistics from the pretrained weights where none are given;
    - the Trainer: atomic checkpoint writes and vitlit's progress bar;
    - before each subcommand: ``--ckpt_path last|auto``, the checkpoint check and the run folder (`vitlit.runs`);
    - around the whole run: SIGTERM/Ctrl-C, a halted run and user errors end in one line and an exit status.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.placement: Placement | None = None
        self.interrupts = FirstInterruptAsSigterm(PROG)
        self._started = time.time()
        try:
            super().__init__(*args, **kwargs)
        except SystemExit as err:  # SIGTERM (SIGTERMException) or a second Ctrl-C (Lightning exits after cleanup)
            trainer = getattr(self, "trainer", None)
            if trainer is None or not trainer.interrupted:
                raise
            name = self.interrupts.signal_name or ("SIGTERM" if isinstance(err, SIGTERMException) else "SIGINT")
            where = f"interrupted by {name} at epoch {trainer.current_epoch}, step {trainer.global_step}"
            if trainer.is_global_zero:  # one line, not one per DDP process
                print(f"{PROG}: {where}; {self._resume_hint()}", file=sys.stderr)
            raise SystemExit(128 + signal.Signals[name].value) from None  # the shell's convention: 130, 143
        except TrainingHalted as err:
            if self.trainer.is_global_zero:
                print(f"{PROG}: error: {err}; {self._resume_hint()}", file=sys.stderr)
            raise SystemExit(1) from None
        except Exception as err:
            if self.placement is not None and _user_error(err) is not None:
                self.placement.undo(self._started, self.trainer.current_epoch)
            raise
        finally:
            self.interrupts.restore()
            if self.placement is not None:
                self.placement.release()

    # -- parser ----------------------------------------------------------------------------------------------------

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
        # The data decides what it delivers; the model adapts (these --model.* flags disappear).
        for key in ("num_classes", "class_names", "img_size", "in_chans"):
            parser.link_arguments(f"data.{key}", f"model.{key}", apply_on="instantiate")
        # Recorded in checkpoints, so that exports and servers normalise new images as the data module did.
        parser.link_arguments("data.mean", "model.input_mean", apply_on="instantiate")
        parser.link_arguments("data.std", "model.input_std", apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        config = self.config[self.config["subcommand"]]
        # Values Lightning would crash on, ignore or silently replace: refused before anything is built.
        check_seed(config.get("seed_everything"))
        if self.config["subcommand"] == "fit":
            check_seed_shared(config.get("seed_everything"))
        check_trainer(config["trainer"])
        check_writable_folder(config["trainer"].get("default_root_dir") or ".")
        # Kept from Lightning until the classes are built: given a checkpoint path, LightningCLI copies the
        # checkpoint's hyperparameters over the parsed config, so flags typed on the command line could vanish
        # without a word (and it reads the whole file once more). vitlit runs with the config and flags as given
        # and checks the checkpoint against them before the run starts (before_<subcommand>).
        self._ckpt_path = config.get("ckpt_path")
        if self._ckpt_path is None and self.config["subcommand"] != "fit":
            subcommand = self.config["subcommand"]
            raise ConfigError(
                f"{subcommand} without --ckpt_path would evaluate untrained weights; give a checkpoint (a run's "
                f"checkpoints/*.ckpt, or last), or --ckpt_path none to {subcommand} the model as it is built."
            )
        if self._ckpt_path is not None:
            config["ckpt_path"] = None

    # -- building the classes --------------------------------------------------------------------------------------

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        if self._ckpt_path is not None:
            config["ckpt_path"] = self._ckpt_path
        fill_pretrained_normalization(config["model"], config["data"]["init_args"])

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

    # -- before each subcommand ------------------------------------------------------------------------------------

    def before_fit(self) -> None:
        for callback in self.trainer.callbacks:
            if isinstance(callback, FreezeSchedule):  # needs the model and the Trainer, so checked here
                callback.check(self.trainer, self.model)
        self._prepare_run("fit")
        self.interrupts.install()

    def before_validate(self) -> None:
        self._prepare_run("validate")

    def before_test(self) -> None:
        self._prepare_run("test")

    def before_predict(self) -> None:
        self._prepare_run("predict")

    def _prepare_run(self, subcommand: str) -> None:
        """Resolve and check the checkpoint (nothing is written before), then choose and create the run folder."""
        config, trainer = self.config_init[subcommand], self.trainer
        root = logger_root(trainer.logger) or Path(trainer.default_root_dir).expanduser().resolve()
        # Runs without a logger save to <default_root_dir>/checkpoints; a config may name its own folders too.
        folders = [Path(trainer.default_root_dir) / "checkpoints", *checkpoint_folders(trainer)]
        ckpt = resolve_checkpoint(config.get("ckpt_path"), subcommand, root, folders)
        config["ckpt_path"] = None if ckpt is None else str(ckpt)
        if ckpt is not None:
            self._check_checkpoint(ckpt)
        if logger_root(trainer.logger) is None:  # other loggers keep their own folders
            return
        if not trainer.is_global_zero:
            # Under DDP only the main process chooses and creates the folder: Lightning sends its trainer.log_dir
            # and checkpoint folder to the others, and nothing else of theirs writes (their loggers are inert).
            return
        # An evaluation of a run's checkpoint goes into that run's folder, unless --trainer.default_root_dir names
        # another place than the run was trained with: then it goes there, like any run.
        root = self.config[subcommand]["trainer"].get("default_root_dir")
        beside_run = subcommand == "fit" or ckpt is None or not _another_root(root, ckpt)
        save_dir, name = Path(trainer.logger.save_dir), trainer.logger.name
        self.placement = place_run(save_dir, name, subcommand, ckpt if beside_run else None)
        if self.placement.note:
            print(f"{PROG}: {self.placement.note}", file=sys.stderr)
        if self.placement.config_name:
            for callback in trainer.callbacks:
                if isinstance(callback, SaveConfigCallback):
                    callback.config_filename = self.placement.config_name  # never overwrite the run's config.yaml
        self._use_logger(self.placement.save_dir, self.placement.name, self.placement.version)

    def _check_checkpoint(self, ckpt: Path) -> None:
        """Refuse a checkpoint that cannot be read or does not fit the configured model, in one line."""
        checkpoint = read_checkpoint(ckpt, self.config_init[self.subcommand].get("weights_only"))
        run = run_of_checkpoint(ckpt)
        options = f"--config {run / 'config.yaml'}" if run is not None and (run / "config.yaml").is_file() else None
        check = getattr(self.model, "check_checkpoint", None)
        if callable(check):
            check(checkpoint.get("hyper_parameters", {}), options)
        check_optimizer = getattr(self.model, "check_optimizer_state", None)
        if self.subcommand == "fit" and callable(check_optimizer):  # evaluations do not restore the optimizer
            check_optimizer(checkpoint.get("optimizer_states") or [], options)

    def _use_logger(self, save_dir: Path, name: str, version: int | str) -> None:
        """Give the Trainer a logger like the configured one that writes into ``save_dir/name/version``."""
        spec = self.config[self.subcommand]["trainer"].get("logger")
        init_args = dict(spec.get("init_args") or {}) if isinstance(spec, Namespace) else {}
        self.trainer.logger = relocated_logger(self.trainer.logger, init_args, save_dir, name, version)

    def _resume_hint(self) -> str:
        name = self.placement.config_name if self.placement is not None and self.placement.config_name else None
        return resume_hint(self.trainer, name or "config.yaml", PROG)


def _another_root(root: str | None, ckpt: Path) -> bool:
    """Whether ``root`` (``--trainer.default_root_dir``) names another folder than the run of ``ckpt`` was trained in.

    Set neither by a flag nor a config, or set to what the run's own config says (its ``config.yaml`` passed back,
    wherever the run folder was moved since), it is the run's; otherwise it was asked for.
    """
    run = run_of_checkpoint(ckpt)
    if root is None or run is None:
        return False
    if Path(root).expanduser().resolve() == run.parent.parent.resolve():
        return False
    try:
        saved = (yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) or {}).get("trainer") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        saved = {}
    return str(root) != str(saved.get("default_root_dir"))


#: Bounds on a YAML document vitlit reads: a recipe is a few KB and a few hundred values. Anchors and aliases let a
#: few hundred bytes stand for billions of values (9 levels of 10 aliases), which the parser would expand for minutes.
MAX_YAML_BYTES = 1_000_000
MAX_YAML_VALUES = 100_000


def load_yaml(text: str, where: str) -> Any:
    """Parse a YAML document after checking its size with every alias expanded; vitlit's one way to read YAML.

    Raises:
        ConfigError: For a document over `MAX_YAML_BYTES` or over `MAX_YAML_VALUES` values once expanded, or not
            valid YAML.
    """
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{where} holds {len(text):,} characters, more than a config needs ({MAX_YAML_BYTES:,}).")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)  # nodes only: an alias is the same node object again
        if _expanded_size(root, {}) > MAX_YAML_VALUES:
            raise ConfigError(
                f"{where} expands to more than {MAX_YAML_VALUES:,} values through its anchors and aliases (&, *); "
                f"write the values out, or use fewer aliases."
            )
        return yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{where} is nested deeper than Python's parser goes; a config needs a few levels.") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where} is not valid YAML{at}; fix it or start from configs/.") from None


def _expanded_size(node: yaml.Node | None, sizes: dict[int, int]) -> int:
    """Values in ``node`` with every alias expanded, counted once per distinct node (linear in the document)."""
    if node is None:
        return 0
    if id(node) not in sizes:
        sizes[id(node)] = 1  # a node that (through an alias) contains itself is refused by the parser later
        children = node.value if isinstance(node.value, list) else []
        flat = [n for child in children for n in (child if isinstance(child, tuple) else (child,))]
        sizes[id(node)] = 1 + sum(_expanded_size(child, sizes) for child in flat)
    return sizes[id(node)]


def _check_config_files(argv: list[str]) -> None:
    """Refuse a ``--config`` file (or YAML given inline) that is empty, oversized, not YAML, or not a mapping.

    jsonargparse reports those only as ``Unexpected config:`` or ``Parser key "config"``, would wait for a pipe's
    writer forever, and would expand an alias bomb for minutes.
    """
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"]
    values += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    for value in values:
        path = Path(value).expanduser()
        if "\n" in value or value.lstrip().startswith("{"):  # YAML given inline, checked below
            continue
        if not path.exists():
            raise ConfigError(f"config file {value} does not exist; give a YAML file such as configs/digits.yaml.")
        if not path.is_file():  # a folder, or a pipe that would wait for a writer forever
            raise ConfigError(
                f"config file {value} is not a regular file; give a YAML file such as configs/digits.yaml."
            )
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"config file {value} cannot be read ({type(err).__name__}); give a YAML file.") from None
        content = load_yaml(text, f"config file {value}")
        if content is None:
            raise ConfigError(f"config file {value} is empty; give a YAML file of options such as configs/*.yaml.")
        if not isinstance(content, dict):
            raise ConfigError(
                f"config file {value} holds a {type(content).__name__}, not options (key: value lines such as "
                f"'trainer:'); start from a file in configs/."
            )
    for arg in argv:  # YAML typed inline, as a flag's value or a whole --config
        if "&" in arg and "*" in arg:
            load_yaml(arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg, "a command-line value")


def main(args: Sequence[str] | None = None, callbacks: Sequence[Callback] = ()) -> VitLitCLI:
    """Run the vitlit command line; the single entry of ``python -m vitlit``, ``vitlit``, the tests and notebooks.

    Args:
        args: Command-line arguments without the program name; ``None`` reads ``sys.argv``.
        callbacks: Lightning callbacks to add to the run's own, for callers in Python that hold objects no config
            can name (`vitlit.sweep` adds Optuna's pruning callback, which carries its trial).

    Returns:
        The CLI object, whose ``trainer``, ``model`` and ``datamodule`` hold the finished run.

    Raises:
        SystemExit: With status 2 and a one-line message on a user error (bad option, value, path or checkpoint).
    """
    argv = sys.argv[1:] if args is None else [str(a) for a in args]
    try:
        if argv and argv[0] in TOOLS:
            return _tool(argv[0], argv[1:])
        _check_config_files(argv)
        with warnings.catch_warnings():
            # Lightning warns when `args` is given while sys.argv holds other words (a notebook's kernel arguments,
            # pytest's): main(args) is exactly the way to run the CLI from Python.
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
            # Short epochs: ViTClassifier.on_train_start lowers log_every_n_steps to the epoch's length instead.
            warnings.filterwarnings("ignore", message=r"The number of training batches \(\d+\) is smaller than")
            # The model summary's size estimate assumes fp32 under mixed precision and says so on every run.
            warnings.filterwarnings("ignore", message=r"Precision .* is not supported by the model summary")
            return _cli(args, callbacks)
    except CheckFailed as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as err:
        cause = _user_error(err)
        if cause is not None:
            _exit(_message(cause))
        full = disk_full(err)
        if full is not None:
            _exit(f"{full}: {_message(err).splitlines()[0]}; free some space (or another folder) and run it again.")
        refused = _path_refused(err)
        if refused is not None:  # from any path a flag names, wherever it is first used
            _exit(refused)
        raise


#: What the operating system refuses about a path, and what to do: a one-line error wherever the path is first used.
_PATH_ERRORS = {
    errno.ENAMETOOLONG: ("is longer than the file system allows", "give shorter paths"),
    errno.EACCES: ("cannot be read or written by this user (permission denied)", "check its permissions"),
    errno.EPERM: ("cannot be read or written by this user (operation not permitted)", "check its permissions"),
    errno.EROFS: ("is on a read-only file system", "choose a folder on a writable disk"),
}


def _path_refused(err: BaseException | None) -> str | None:
    """A line for an OSError about a path that is ``err`` or that ``err`` was raised from or while handling."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in _PATH_ERRORS:
            what, fix = _PATH_ERRORS[err.errno]
            path = str(err.filename or "a path")
            return f"{path if len(path) <= 80 else path[:77] + '...'} {what}; {fix}."
        err = err.__cause__ or err.__context__
    return None


def _tool(name: str, argv: list[str]) -> Any:
    """Run one of the `TOOLS` with its typed, documented arguments (``vitlit export --help``)."""
    module, function = TOOLS[name].split(":")
    run = getattr(importlib.import_module(module), function)
    parser = VitLitArgumentParser(prog=f"{PROG} {name}", description=run.__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_function_arguments(run, as_group=False)
    # Options may be spelled with dashes too (--n-trials for --n_trials), as most command-line tools take them.
    argv = [re.sub(r"^--([\w-]+)", lambda m: "--" + m.group(1).replace("-", "_"), a) for a in argv]
    parsed = parser.parse_args(argv)
    return run(**parsed.as_dict())


def entry_point() -> None:
    """The ``vitlit`` console script: `main`, with exit status 0 on success (it returns the CLI object)."""
    main()


def _cli(args: Sequence[str] | None, callbacks: Sequence[Callback] = ()) -> VitLitCLI:
    return VitLitCLI(
        ViTClassifier,
        ImageClassificationDataModule,
        trainer_class=Trainer,
        subclass_mode_data=True,
        # The model injects its own optimizer and step-interval scheduler; an automatic --optimizer would
        # silently replace them.
        auto_configure_optimizers=False,
        parser_class=VitLitArgumentParser,
        parser_kwargs={
            "prog": PROG,
            "description": DESCRIPTION,
            # vitlit's shared trainer settings, under every --config a run is given (see defaults.yaml).
            **{sub: {"default_config_files": [str(DEFAULTS)]} for sub in ("fit", "validate", "test", "predict")},
        },
        args=None if args is None else list(args),
        # Appended to the configured callbacks, and kept out of the saved config (they are objects, not options).
        trainer_defaults={"callbacks": list(callbacks)} if callbacks else None,
    )
