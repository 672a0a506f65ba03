"""Reading what the user typed: jsonargparse's reports and vitlit's errors in one line, the shared defaults.

Every user error ends as one line ``vitlit: error: ...`` with exit status 2 (`vitlit.cli.main`): a `ConfigError`
as it is, a jsonargparse report condensed. The checks of hostile input (config files, values out of range, typos,
refused paths, full disks) are the opt-in part `vitlit.checks`, which attaches through the hooks `hooks` finds.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.exceptions import MisconfigurationException

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


def message(err: BaseException) -> str:
    """The one-line text of a user error (one raised in a DataLoader worker arrives wrapped in its traceback)."""
    text = str(err)
    if "Original Traceback" in text:  # torch's ExceptionWrapper: "Caught ... \n Original Traceback ... \n Type: msg"
        text = text.strip().splitlines()[-1].split(": ", 1)[-1]
    return text


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


def load_parts(points: list[EntryPoint]) -> tuple[Any, ...]:
    """What ``points`` name, loaded, in name order; a part deleted from this copy (but still named) is left out."""
    loaded = []
    for point in sorted(points, key=lambda p: p.name):
        try:
            loaded.append(point.load())
        except ModuleNotFoundError as err:  # a part deleted from a fork whose installed metadata still names it
            if not (err.name and point.module.startswith(err.name)):
                raise
    return tuple(loaded)


@functools.cache
def _hook_parts() -> tuple[Any, ...]:
    return load_parts(list(entry_points(group="vitlit.hooks")))


def hooks(name: str) -> list[Callable[..., Any]]:
    """The ``name`` function of each opt-in part's hooks: a module or object a ``vitlit.hooks`` entry point names.

    The CLI calls ``before_parsing(argv)`` before jsonargparse reads anything, ``after_parsing(subcommand, config)``
    before a class is built, ``around_run(subcommand)`` (a context manager) around the run, and
    ``parser_report(report, argv, usage)`` and ``error_line(err)`` for a one-line message; the data modules call
    ``image_problem(path, img_size)`` (the first line or problem that is not ``None`` is used). vitlit's own are
    `vitlit.checks.hooks` and `vitlit.runs.quiet` (pyproject.toml); a part absent from this copy is skipped.
    """
    return [hook for part in _hook_parts() if callable(hook := getattr(part, name, None))]


def parser_error(report: str, ex: BaseException | None, argv: list[str], usage: str = "") -> str:
    """One line for a report of jsonargparse's: the user error behind it, a checks part's line, or the report."""
    cause = user_error(ex)
    if cause is not None:
        return str(cause)
    text = next((line for hook in hooks("parser_report") if (line := hook(report, argv, usage))), one_line(report))
    if "argument subcommand: invalid choice" in text:  # LightningCLI knows its four; the tools are vitlit's
        text = text.replace(")", ", " + ", ".join(repr(name) for name in tools()) + ")", 1)
    return text


def one_line_error(err: BaseException) -> str | None:
    """The one line for an error the user can fix (a `ConfigError`, or what a checks part names), or ``None``."""
    cause = user_error(err)
    if cause is not None:
        return message(cause)
    return next((line for hook in hooks("error_line") if (line := hook(err))), None)
