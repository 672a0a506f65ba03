"""One line for what jsonargparse, a configured class or the system reports in many: range, typos, paths, disks."""

from __future__ import annotations

import difflib
import errno
import inspect
import re
import traceback
from pathlib import Path

from vitlit.checkpoints import disk_full
from vitlit.config import message, one_line, user_error
from vitlit.errors import ConfigError

_KEY = re.compile(r'Parser key "([^"]+)"')
_RESTRICTION = re.compile(r"Not of type (\w+): (?:(\S+) )?does not conform to restriction (.+)")
_GIVEN = re.compile(r"Given value: (.+)")
_FLAG = re.compile(r"--[\w.]+")
_NOT_ACCEPTED = re.compile(r"Option '([\w.]+)' is not accepted")


def out_of_range(report: str) -> str | None:
    """One sentence for a value outside a constrained type's range (`vitlit.types`), or ``None`` for other reports.

    jsonargparse says ``Parser key "batch_size": Not of type PositiveInt: 0 does not conform to restriction v>0``,
    and inside ``Optional``/``Union`` types leaves the value to a ``Given value:`` line further down.
    """
    key, found = _KEY.search(report), _RESTRICTION.search(report)
    if key is None or found is None:
        return None
    type_name, value, restriction = found.groups()
    if value is None:
        given = _GIVEN.search(report)
        value = given.group(1).strip() if given else "?"
    return f"{key.group(1)}={value} is not a {type_name}; give a value with {restriction.strip()}"


def unknown_flag(report: str, argv: list[str], usage: str) -> str | None:
    """One line for an unknown option, naming the flag as typed and the nearest known one; ``None`` otherwise.

    For a class chosen by ``class_path`` (``--model``, ``--data``) jsonargparse names an unknown option without the
    flag it came from; the flag typed in ``argv`` is named instead. The nearest known flag comes from ``usage`` (the
    parser's help text) or from the shipped classes' arguments.
    """
    unknown = _NOT_ACCEPTED.search(report)
    flags = [a.split("=", 1)[0] for a in argv if unknown and a.split("=", 1)[0].endswith(f".{unknown.group(1)}")]
    if flags:
        return f"{flags[0]} is not an option here{suggestion(flags[0], class_flags(flags[0].split('.')[0]))}"
    typed = re.search(r"unrecognized arguments: (--[\w.-]+)", report)
    return one_line(report) + suggestion(typed.group(1), _FLAG.findall(usage)) if typed else None


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


def system_refused(err: BaseException) -> str | None:
    """The line for a full disk, a path the system refuses or a constructor that refused its arguments, or ``None``."""
    full = disk_full(err)
    if full is not None:
        return f"{full}: {message(err).splitlines()[0]}; free some space (or another folder) and run it again."
    refused = refused_arguments(err)
    return path_refused(err) or (str(refused) if refused is not None else None)  # a path: wherever first used
