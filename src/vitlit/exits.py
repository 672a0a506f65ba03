"""How a command ends: every user error as one line with exit status 2, and a stopped fit's last line.

The CLI's boundary with what jsonargparse, Lightning and PyTorch raise (`vitlit.cli` calls it where a command fails).

A `ConfigError` is printed as it is; a jsonargparse report is condensed into one line (it names the key and the
value); a full disk, a file-size limit or a path the system refuses is named with the path; a configured class whose
constructor refused its arguments is named with its error. Anything else is a bug, whose traceback is wanted.

Five places here read what another library offers only as text or frames; each stays, and why:

- `one_line` reads jsonargparse's report: its ``ArgumentError`` carries the message alone (no key, value or cause
  as attributes), and its wording is what names the key and the value. Where the wording changes, the report is
  printed whole, on one line: less tidy, never wrong.
- `one_line_error` takes the last line of an error raised in a DataLoader worker: PyTorch re-raises it in the main
  process as the same type with the worker's traceback as its text (``ExceptionWrapper``), and keeps nothing else.
- `refused_arguments` walks the traceback of a class's constructor to name the class: jsonargparse wraps the
  constructor's error in its own without saying which class it was building.
- `failed_logger` walks the traceback to find the logger whose method raised: Lightning calls the loggers without
  marking which one failed, and a logger's service going away must not read as a bug.
- `epoch_refused` reads the frame that raised a ValueError: Lightning refuses a ``val_check_interval`` of more
  batches than the epoch has with a plain ValueError from its fit loop's ``setup_data`` (which raises no other), once
  the data is read; where ``limit_train_batches`` bounds the epoch, `vitlit.checks` refuses it before the run.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import traceback
from collections.abc import Collection
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit.errors import NO_SPACE, PATH_REFUSED, CheckFailed, ConfigError, TrainingHalted
from vitlit.run_dir import Placed, checkpoint_step, saved_config, trained_since
from vitlit.text import shell_word, stream_gone, tell

#: The signal that stopped this process's fit (``signal_name``, e.g. ``SIGINT``), ``None`` while none has; set by
#: `vitlit.cli.interrupts_stop_the_fit`, read for the stopped fit's last line and the run card.
STOP = SimpleNamespace(signal_name=None)

#: Options renamed for what they are, and what to write instead (scripts/upgrade_config.py rewrites saved configs).
RENAMED = {"on_device": "--data.source memory|workers|auto (on_device true|false|auto before vitlit 0.6)"}


def one_line(report: str) -> str:
    """Jsonargparse's multi-line report (bad key, wrong type, value out of range) as one line naming key and value."""
    # Its module or the class in it is missing (not an attribute of a value: init_args given as a list).
    gone = re.search(r"(?s)class_path '(vitlit\.[\w.]+)'.*(?:module '[\w.]+' has no attribute|No module named)", report)
    if gone:  # a config saved by an older vitlit names a class that moved or went
        return (f"{gone.group(1)} is not in this vitlit; a run's config.yaml saved by an older vitlit is rewritten by "
                f"python scripts/upgrade_config.py <config.yaml>, or correct the class path.")  # fmt: skip
    renamed = next((old for old in RENAMED if f"'{old}' is not accepted" in report), None)
    if renamed:  # an option of an older vitlit, typed or in a saved config
        return (f"--data.{renamed} is now {RENAMED[renamed]}; a run's config.yaml saved by an older vitlit is "
                f"rewritten by python scripts/upgrade_config.py <config.yaml>.")  # fmt: skip
    noise = ("Does not validate against any of the Union", "Subtypes:", "Errors:", "- Expected a <class 'NoneType'>",
             "Given value type:")  # fmt: skip
    lines = (line.strip().removeprefix("- ") for line in report.splitlines())
    long_value = lambda line: line.startswith("Given value:") and len(line) > 100  # noqa: E731 (a whole list)
    return " ".join(line for line in lines if line and not line.startswith(noise) and not long_value(line))


def user_error(err: BaseException | None) -> BaseException | None:
    """The `ConfigError` (or Lightning misconfiguration) that ``err`` is or was raised from (``raise ... from``)."""
    while err is not None:
        if isinstance(err, (ConfigError, MisconfigurationException)):
            return err
        err = err.__cause__
    return None


def one_line_error(err: BaseException) -> str | None:
    """The one line for an error the user can fix, or ``None`` for a bug (whose traceback is wanted)."""
    cause = user_error(err)
    if cause is not None:
        text = str(cause)  # one raised in a DataLoader worker arrives wrapped in its traceback: its last line
        return text.strip().splitlines()[-1].split(": ", 1)[-1] if "Original Traceback" in text else text
    if epoch_refused(err):  # Lightning's words name its arguments: the flags that set them follow
        return (f"{' '.join(str(err).split())} (--trainer.val_check_interval, --trainer.limit_val_batches, "
                f"--trainer.check_val_every_n_epoch)")  # fmt: skip
    full = disk_full(err)
    if full is not None:
        return f"{full[0]}: {str(err).splitlines()[0][:160]}; {full[1]}, and run it again."
    seen: set[int] = set()
    while err is not None and id(err) not in seen:  # an OSError about a path, wherever the path was first used
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in PATH_REFUSED:
            name = str(err.filename or "a path")  # a path too long to show whole: its start and its end
            return f"{name if len(name) <= 300 else f'{name[:140]}...{name[-140:]}'} {PATH_REFUSED[err.errno]}."
        err = err.__cause__ or err.__context__
    return None


def epoch_refused(err: BaseException) -> bool:
    """Whether ``err`` is Lightning's refusal of a ``val_check_interval`` longer than the training epoch.

    A ValueError raised by its fit loop's ``setup_data``, which raises no other, once the data's length is known.
    """
    frames = [frame for frame, _ in traceback.walk_tb(err.__traceback__)]
    if not isinstance(err, ValueError) or not frames:
        return False
    code = frames[-1].f_code
    return code.co_name == "setup_data" and Path(code.co_filename).as_posix().endswith("pytorch/loops/fit_loop.py")


def disk_full(err: BaseException | None) -> tuple[str, str] | None:
    """What ran out and its fix, if ``err`` (or an error it was raised while handling) is a write refused for space.

    A file-size limit (``ulimit -f``) is not fixed by freeing space: each reason comes with its own fix.

    torch's zip writer reports a failed write as ``RuntimeError: ... unexpected pos``; the OSError behind it is only
    its ``__context__``.
    """
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in NO_SPACE:
            return NO_SPACE[err.errno]
        err = err.__cause__ or err.__context__
    return None


def save_failed(err: BaseException, target: Path) -> ConfigError | None:
    """What a failed checkpoint save raises: one line where the disk is full, else ``None`` (``err`` as it is)."""
    full = disk_full(err)
    if full is None:
        return None
    free = shutil.disk_usage(target.parent).free / 2**30
    return ConfigError(f"saving {target} failed: {full[0]} ({free:.2f} GiB free; the previous checkpoints are intact); "
                       f"{full[1]} (--trainer.default_root_dir), then resume.")  # fmt: skip


def refused_arguments(err: BaseException, given: Collection[str] = ()) -> ConfigError | None:
    """The one line for a configured class whose constructor refused its arguments, or ``None`` for a bug.

    jsonargparse reports it wrapped in errors of its own (a value that fits none of the option's types): the class's
    error is the first of the chain that jsonargparse did not raise. One raised in vitlit's own code is a bug, whose
    traceback is wanted, unless it refuses a keyword of ``given`` (the config's ``dict_kwargs``) that vitlit's
    code passed on.
    """
    chain = [err]
    while (err := err.__cause__ or err.__context__) is not None:
        chain.append(err)
    for error in chain:
        frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
        if isinstance(error, ConfigError):
            return error
        if not frames or "jsonargparse" in frames[-1].f_code.co_filename:
            continue
        if "/vitlit/" in Path(frames[-1].f_code.co_filename).as_posix() and not passed_on(error, frames[-1], given):
            return None
        built = [
            type(f.f_locals["self"]).__name__ for f in frames if f.f_code.co_name == "__init__" and "self" in f.f_locals
        ]
        words = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        who = built[0] if built else "a class of the config"
        return ConfigError(f"{who} refused its arguments ({words}); fix them in the config or on the command line.")
    return None


def dict_kwargs_keys(config: Any) -> set[str]:
    """Every key of a ``dict_kwargs`` in ``config`` (a model's, a data module's, a callback's, at any depth)."""
    if isinstance(config, list):
        return {key for item in config for key in dict_kwargs_keys(item)}
    if not isinstance(config, dict):
        return set()
    kwargs = config.get("dict_kwargs")
    given = set(kwargs) if isinstance(kwargs, dict) else set()
    return given.union(*(dict_kwargs_keys(value) for value in config.values()))


def passed_on(error: BaseException, frame: Any, given: Collection[str]) -> bool:
    """Whether ``error`` refuses a keyword the config gave (``given``) that a vitlit class passed on in ``**kwargs``.

    ``--data.dict_kwargs.foo 5`` reaches the base class through a format's ``__init__``, so Python raises in vitlit's
    frame; the word came from the config. A keyword vitlit's code added to those ``kwargs`` is a bug.
    """
    unknown = re.search(r"got an unexpected keyword argument '(\w+)'", str(error))
    word = unknown[1] if unknown is not None and isinstance(error, TypeError) else None
    return word is not None and word in given and word in (frame.f_locals.get("kwargs") or {})


def failed_logger(err: BaseException | None) -> Logger | None:
    """The logger whose own method raised ``err`` or an error it was chained to (its service went away), if any."""
    while err is not None:
        for frame, _ in traceback.walk_tb(err.__traceback__):
            if isinstance(frame.f_locals.get("self"), Logger):
                return frame.f_locals["self"]
        err = err.__cause__ or err.__context__
    return None


def stopped_line(
    err: BaseException, trainer: Any, run_dir: Path | None, resumed: str | Path | None = None, step: int = -1
) -> tuple[str, int] | None:
    """The last line and exit status of a fit stopped by a signal, a guard or a logger's service; ``None`` otherwise.

    The line names what stopped it and the command that resumes from ``last.ckpt`` (or that there is none); a fit
    resuming from ``resumed`` (saved at ``step``) and stopped before it restored that step (its data's setup) is to be
    run again as typed.
    """
    logger = failed_logger(err) if isinstance(err, Exception) else None  # not an interrupt met inside a logger
    if isinstance(err, TrainingHalted):
        line, status = f"vitlit: error: {err}", 1
    elif logger is not None:  # before `interrupted`, which Lightning sets for any exception
        reason = " ".join(str(err).split())[:160] or type(err).__name__
        line, status = f"vitlit: error: {type(logger).__name__} failed during the run ({reason})", 1
    elif trainer is not None and (isinstance(err, SIGTERMException) or trainer.interrupted):
        name = STOP.signal_name or ("SIGTERM" if isinstance(err, SIGTERMException) else "SIGINT")
        status = 128 + signal.Signals[name].value  # the shell's convention
        if resumed is not None and trainer.global_step < step:  # the resume had not restored its step
            return (f"vitlit: interrupted by {name} before the resume from step {step} of {shell_word(resumed)} "
                    f"began; run the same command again to resume"), status  # fmt: skip
        line = f"vitlit: interrupted by {name} at epoch {trainer.current_epoch}, step {trainer.global_step}"
    else:
        return None
    last = run_dir / "checkpoints" / "last.ckpt" if run_dir is not None else None
    if last is not None and last.is_file():
        config, ckpt = shell_word(saved_config(trainer, run_dir)), shell_word(last)  # a path's spaces
        line += f"; resume with: python -m vitlit fit --config {config} --ckpt_path {ckpt}"
    else:
        line += "; no checkpoint was written, so there is nothing to resume"
    return line, status


def discard(placed: Any) -> None:
    """Remove what a refused run made: its run folder, and ``lightning_logs/`` and the root where it made them.

    For a user error found once the folder was made (an image that cannot be read, met at the data's setup), so a
    refused run leaves nothing; a folder that holds a checkpoint, or another run's files meanwhile, is kept. A refused
    resume removes the files it added beside the run's config (its ``config.resume-K.yaml``, a logger's new event
    file), unless it saved a checkpoint: then its config and curves say how that was trained. The run's sub-folders
    (checkpoints, an evaluation's output) are left as they are.
    """
    if placed is None:
        return
    if not placed.made:  # a resume
        if trained_since(placed):  # it trained and saved: what it wrote stays
            return
        for path in set(placed.run_dir.iterdir()) - placed.existed if placed.existed else ():
            if path.is_file() and not path.is_symlink():
                with contextlib.suppress(OSError):
                    path.unlink()
        return
    if any(placed.run_dir.rglob("*.ckpt")):
        return
    shutil.rmtree(placed.run_dir, ignore_errors=True)
    for folder in placed.made[1:]:
        with contextlib.suppress(OSError):  # not empty: another run wrote there meanwhile
            folder.rmdir()


def parser_error(message: str, ex: Exception | None, tools: dict[str, str]) -> str:
    """The one line of a command line jsonargparse refused (`one_line`), or of the error a value's class raised."""
    cause = user_error(ex)
    text = str(cause) if cause is not None else one_line(message)
    if "invalid choice" in text:  # LightningCLI knows its four subcommands; the tools are vitlit's
        text = text.replace(")", ", " + ", ".join(repr(name) for name in tools) + ")", 1)
    if before := re.search(r"is not accepted before subcommand '(\w+)'", text):  # `vitlit --config x.yaml fit`
        return f"{text}; put the options after the subcommand: vitlit {before[1]} --config <file> ..."
    return f"{text} (`vitlit <subcommand> --help` lists the options)"


def stop(err: BaseException, trainer: Any, run: Placed | None, resumed: str | Path | None = None) -> None:
    """End a fit stopped by a signal, a guard or a logger's service: its last line (`stopped_line`) and status.

    A resume stopped before it restored its checkpoint's step (its data's setup) made nothing worth keeping: what it
    made goes, as a refused run's does (`discard`).
    """
    step = checkpoint_step(resumed) if resumed is not None else -1
    if getattr(trainer, "global_step", 0) < step:
        discard(run)
    stopped = stopped_line(err, trainer, run.run_dir if run is not None else None, resumed, step)
    if stopped is None:
        return
    if trainer is None or trainer.is_global_zero:  # one line, not one per DDP process
        tell(stopped[0])
    raise SystemExit(stopped[1]) from None


def ended(err: BaseException) -> int | None:
    """Say the one line of a command that raised ``err``; return its exit status, ``None`` for a bug (a traceback).

    A check vitlit's own result failed is status 1, a user's error 2; Ctrl-C before a fit listens for it (data
    setup, a folder scan) 130; a reader of the output gone away (``vitlit models | head``) 141, said to nobody.
    """
    status, line = 2, None
    if isinstance(err, CheckFailed):
        status, line = 1, f"vitlit: error: {err}"
    elif isinstance(err, KeyboardInterrupt):
        status, line = 130, "vitlit: interrupted by SIGINT; nothing was saved"
    elif isinstance(err, BrokenPipeError):
        stream_gone()
        return 141  # 128 + SIGPIPE, as a shell reports a writer it cut off
    elif (words := one_line_error(err)) is None:
        return None
    tell(line or f"vitlit: error: {words}")
    return status


def refused_run(err: Exception, run: Any, stopped: Any) -> None:
    """After an error that ended a command: a refused run's folder removed, or a lost logger's fit stopped in a line.

    A run refused for a user's error leaves no folder (`discard`); a fit whose logger's service went away ends with
    one line and the command that resumes it (``stopped``).
    """
    if one_line_error(err):
        discard(run)
    elif failed_logger(err) is not None:
        stopped(err)
