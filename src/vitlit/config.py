"""Reading what the user typed: config files checked before jsonargparse sees them, and its reports in one line.

Every user error ends as one line ``vitlit: error: ...`` with exit status 2 (`vitlit.cli.main`); this module turns
jsonargparse's multi-line reports, oversized or malformed YAML and refused paths into that line.
"""

from __future__ import annotations

import difflib
import errno
import inspect
import logging
import os
import re
import traceback
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import yaml
from lightning.fabric.utilities.exceptions import MisconfigurationException

from vitlit.checkpoints import disk_full
from vitlit.errors import ConfigError

# Lines of jsonargparse's nested Union report that repeat what the first error already says.
_NOISE = (
    "Does not validate against any of the Union",
    "Subtypes:",
    "Errors:",
    "- Expected a <class 'NoneType'>",
    "Given value type:",
    "Given value:",
)


_KEY = re.compile(r'Parser key "([^"]+)"')
_RESTRICTION = re.compile(r"Not of type (\w+): (?:(\S+) )?does not conform to restriction (.+)")
_GIVEN = re.compile(r"Given value: (.+)")


def out_of_range(message: str) -> str | None:
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


def one_line(message: str) -> str:
    """Condense jsonargparse's multi-line report (bad key, wrong type) into one line naming key and value."""
    lines = (line.strip().removeprefix("- ") for line in message.splitlines())
    return " ".join(line for line in lines if line and not line.startswith(_NOISE))


def user_error(err: BaseException | None) -> BaseException | None:
    """Return the ConfigError (or Lightning misconfiguration) that is ``err`` or that ``err`` was raised from.

    Only explicit causes (``raise ... from err``) are followed: an unrelated error that happened to be handled
    while another was raised is not the user's.
    """
    while err is not None:
        if isinstance(err, (ConfigError, MisconfigurationException)):
            return err
        err = err.__cause__
    return None


def refused_arguments(err: BaseException) -> ConfigError | None:
    """One line for a configured class whose constructor refused its arguments (an MLflow store it cannot use, ...).

    jsonargparse reports it as a value that fits none of the option's types, with the constructor's own error as
    the context: vitlit's `ConfigError`, or another library's. An error raised in vitlit's own code that is not a
    `ConfigError` is a bug, not the user's: it keeps its traceback.
    """
    inner, depth = err, 0
    while (inner.__cause__ or inner.__context__) is not None and depth < 20:
        inner, depth = inner.__cause__ or inner.__context__, depth + 1
        if isinstance(inner, ConfigError):
            return inner
    frames = traceback.extract_tb(inner.__traceback__)
    if inner is err or user_error(err) is not None or isinstance(inner, OSError):  # a path: `path_refused` says it
        return None
    if not frames or "/vitlit/" in Path(frames[-1].filename).as_posix():
        return None
    named = re.search(r"class_path='([\w.]+)'", str(err))
    who = named.group(1).rsplit(".", 1)[-1] if named else "a class of the config"
    text = ""
    for sentence in " ".join(str(inner).split()).split(". "):  # whole sentences, up to about 300 characters
        if text and len(text) + len(sentence) > 300:
            break
        text = f"{text}. {sentence}" if text else sentence
    return ConfigError(
        f"{who} refused its arguments: {type(inner).__name__}: {text.rstrip('.')} (fix them in the config or on "
        f"the command line)."
    )


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


def check_config_files(argv: list[str]) -> None:
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


#: What the operating system refuses about a path, and what to do: a one-line error wherever the path is first used.
_PATH_ERRORS = {
    errno.ENAMETOOLONG: ("is longer than the file system allows", "give shorter paths"),
    errno.EACCES: ("cannot be read or written by this user (permission denied)", "check its permissions"),
    errno.EPERM: ("cannot be read or written by this user (operation not permitted)", "check its permissions"),
    errno.EROFS: ("is on a read-only file system", "choose a folder on a writable disk"),
}


def path_refused(err: BaseException | None) -> str | None:
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


def message(err: BaseException) -> str:
    """The one-line text of a user error (one raised in a DataLoader worker arrives wrapped in its traceback)."""
    text = str(err)
    if "Original Traceback" in text:  # torch's ExceptionWrapper: "Caught ... \n Original Traceback ... \n Type: msg"
        text = text.strip().splitlines()[-1].split(": ", 1)[-1]
    return text


_FLAG = re.compile(r"--[\w.]+")
_NOT_ACCEPTED = re.compile(r"Option '([\w.]+)' is not accepted")


def parser_error(report: str, ex: BaseException | None, argv: list[str], usage: str = "") -> str:
    """One line for a report of jsonargparse's: the user error behind it, a value out of range, or the report.

    For a class chosen by ``class_path`` (``--model``, ``--data``) jsonargparse names an unknown option without the
    flag it came from; the flag typed in ``argv`` is named instead. An unknown flag gets the nearest known one as a
    suggestion: from ``usage`` (the parser's help text), or from the shipped classes' arguments.
    """
    cause = user_error(ex)
    if cause is not None:
        return str(cause)
    unknown = _NOT_ACCEPTED.search(report)
    flags = [a.split("=", 1)[0] for a in argv if unknown and a.split("=", 1)[0].endswith(f".{unknown.group(1)}")]
    if flags:
        return f"{flags[0]} is not an option here{suggestion(flags[0], class_flags(flags[0].split('.')[0]))}"
    typed = re.search(r"unrecognized arguments: (--[\w.-]+)", report)
    if typed:
        return one_line(report) + suggestion(typed.group(1), _FLAG.findall(usage))
    text = out_of_range(report) or one_line(report)
    if "argument subcommand: invalid choice" in text:  # LightningCLI knows its four; the tools are vitlit's
        text = text.replace(")", ", " + ", ".join(repr(name) for name in tools()) + ")", 1)
    return text


def suggestion(flag: str, known: list[str]) -> str:
    """``"; did you mean --x?"`` for the known flag nearest to a mistyped ``flag``, or ``""`` if none is near.

    Names are compared after the group (``--trainer.``), within it: ``--model.lr`` is not near ``--model.loss``.
    """
    group, name = flag.split(".", 1) if "." in flag else ("", flag)
    by_name = {k.rsplit(".", 1)[-1]: k for k in reversed(known) if k.startswith(f"{group}.")}
    match = difflib.get_close_matches(name.rsplit(".", 1)[-1], list(by_name), n=1, cutoff=0.75)
    return f"; did you mean {by_name[match[0]]}?" if match else ""


def class_flags(group: str) -> list[str]:
    """The flags of ``--model`` (``ViTClassifier``'s, its optimizer's, its schedule's) or ``--data`` (any data's)."""
    import torch  # here, not at the top: `vitlit --version` must not load torch

    import vitlit
    from vitlit.optim import WarmupCosineLR

    names = ["ViTClassifier"] if group == "--model" else [n for n in vitlit.__all__ if n.endswith("DataModule")]
    classes = [cls for name in names for cls in getattr(vitlit, name).__mro__ if "__init__" in vars(cls)]
    flags = [f"{group}.{p}" for cls in classes for p in inspect.signature(cls.__init__).parameters if p != "self"]
    if group == "--model":  # --model.lr means the optimizer's
        for part, cls in (("optimizer", torch.optim.AdamW), ("scheduler", WarmupCosineLR)):
            flags += [f"--model.{part}.init_args.{p}" for p in inspect.signature(cls).parameters]
    return flags


_SEED_RANGE = (0, 2**32 - 1)  # what NumPy's seeding, and so Lightning's seed_everything, accepts


def check_seed(seed: Any) -> None:
    """Refuse a ``seed_everything`` value outside what NumPy accepts (``true``/``false``/``null`` are fine)."""
    if isinstance(seed, bool) or seed is None:
        return
    low, high = _SEED_RANGE
    if not low <= seed <= high:
        raise ConfigError(f"--seed_everything={seed} is outside {low}..{high}; give a seed in that range, e.g. 42.")


def check_seed_shared(seed: Any, environ: Mapping[str, str] = os.environ) -> None:
    """Refuse a seed each process would draw for itself when torchrun or SLURM started several (DDP).

    With ``seed_everything: true`` every process picks a random seed; Lightning's own launcher hands the first one's
    to the processes it starts (``PL_GLOBAL_SEED``), but processes that torchrun or SLURM start together each pick
    their own, and their samplers would then shuffle differently: shards that overlap and leave images out.
    """
    started = max(int(environ.get(name, "1") or 1) for name in ("WORLD_SIZE", "SLURM_NTASKS"))
    if seed is True and started > 1 and "PL_GLOBAL_SEED" not in environ:
        raise ConfigError(
            f"--seed_everything=true gives each of the {started} processes its own random seed, so their data "
            f"shards would overlap; give a number (e.g. --seed_everything 42)."
        )


def default_configs() -> list[str]:
    """The shared settings under every ``--config``: the core's ``defaults.yaml``, then each opt-in part's."""
    here = Path(__file__).parent
    return [str(here / "defaults.yaml"), *sorted(str(p) for p in here.glob("*/defaults.yaml"))]


def tools() -> dict[str, EntryPoint]:
    """Subcommands beside LightningCLI's, by name: the ``vitlit.commands`` entry points (see pyproject.toml)."""
    return {point.name: point for point in entry_points(group="vitlit.commands")}


#: Arguments that name a file or folder, in any data module or model; ``teacher`` where it is a path, not a name.
PATH_ARGUMENTS = ("root", "data_dir", "predict_dir", "pretrained_file", "teacher")


def absolute_paths(config: Any) -> None:
    """Make the relative paths of a parsed run config absolute, in place: `PATH_ARGUMENTS` and the Trainer's root.

    A run saves its config for resuming, testing and the notebooks, which run from other folders: ``data/digits``
    there would be another folder, or none, and evaluations would not find their way beside the run.
    """
    for init_args in (config["model"]["init_args"], config["data"]["init_args"]):
        for key in PATH_ARGUMENTS:
            value = init_args.get(key) if hasattr(init_args, "get") else None
            if not isinstance(value, (str, Path)) or "://" in str(value) or Path(value).expanduser().is_absolute():
                continue
            if key != "teacher" or Path(value).exists():  # a teacher may be a timm model's name
                init_args[key] = os.path.abspath(value)  # not resolve(): a symbolic link the user named stays
    root = config["trainer"].get("default_root_dir")
    if isinstance(root, str) and "://" not in root:
        config["trainer"]["default_root_dir"] = os.path.abspath(os.path.expanduser(root))


def quiet_warnings(subcommand: str) -> list[str]:
    """Messages of Lightning's warnings that a user cannot act on, for ``warnings.filterwarnings`` during a run."""
    return [
        # main(args) from Python (a notebook's kernel, pytest) is exactly what Lightning's warning is about.
        "LightningCLI's args parameter is intended",
        # Short epochs: ViTClassifier.on_train_start lowers log_every_n_steps to the epoch's length instead.
        r"The number of training batches \(\d+\) is smaller than",
        # The model summary's size estimate assumes fp32 under mixed precision and says so on every run.
        r"Precision .* is not supported by the model summary",
        # Lightning's own use of a torch API that torch deprecated.
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        # An evaluation saves no checkpoints: the checkpoint callbacks' saved state is of no use to it.
        *(["The dirpath has changed from"] if subcommand != "fit" else []),
    ]


class QuietNotes(logging.Filter):
    """Drop Lightning's log notes that a vitlit user cannot act on, while the CLI runs (`install`, `restore`).

    Every run would start with Lightning's advertisements for its cloud services; a SIGTERM would add ``Received
    SIGTERM: 15`` and ``An SIGTERMException was raised with message: ...`` (the runs part prints one line with the
    resume command instead). Lightning's logging is left as it was outside the CLI.
    """

    LOGGERS = ("lightning.pytorch.trainer.connectors.signal_connector", "lightning.pytorch.utilities.rank_zero")
    NOTES = ("💡 Tip:", "An SIGTERMException was raised", "Received SIGTERM")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(note in record.getMessage() for note in self.NOTES)

    def install(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)

    def restore(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)


def check_ckpt_path_given(subcommand: str, ckpt_path: str | None) -> None:
    """Refuse an evaluation without ``--ckpt_path``: it would evaluate untrained weights without a word."""
    if ckpt_path is None and subcommand != "fit":
        raise ConfigError(
            f"{subcommand} without --ckpt_path would evaluate untrained weights; give a checkpoint (a run's "
            f"checkpoints/*.ckpt, or last), or --ckpt_path none to {subcommand} the model as it is built."
        )


def one_line_error(err: BaseException) -> str | None:
    """The one line for an error the user can fix (a bad option, value or path, a full disk), or ``None``."""
    cause = user_error(err)
    if cause is not None:
        return message(cause)
    full = disk_full(err)
    if full is not None:
        return f"{full}: {message(err).splitlines()[0]}; free some space (or another folder) and run it again."
    refused = refused_arguments(err)  # a configured class's constructor (a logger's, say) refused its arguments
    return path_refused(err) or (str(refused) if refused is not None else None)  # a path: wherever first used
