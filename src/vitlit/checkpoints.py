"""Checkpoint files read before a run or an export uses them: the file, its kind, its hyperparameters, its weights.

Lightning restores a checkpoint only once the run has started (its folder made, its data loaded), and a foreign,
truncated or mismatched file then fails deep inside it. Here the file is read memory-mapped (the tensors' bytes are
not read) and refused in one line, naming it, before anything else happens. ``torch.save`` writes a zip archive of
stored (uncompressed) records, so a compressed record is refused from the archive's directory without unpacking it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import pickle
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch.callbacks import BaseFinetuning, WeightAveraging
from torch import nn

from vitlit.errors import ConfigError
from vitlit.text import say, shown

# What torch.load raises on a truncated, foreign or tampered-with file.
UNREADABLE = (RuntimeError, EOFError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile, OSError)


def read_checkpoint(path: str | Path, weights_only: bool | None = True, mmap: bool = True) -> dict[str, Any]:
    """A Lightning checkpoint's contents, or a one-line `ConfigError` naming the file and the way out.

    Args:
        path: The ``.ckpt`` file.
        weights_only: ``torch.load``'s ``weights_only``; ``None`` means ``True``. ``False`` runs the file's pickled
            code: only for files whose origin is trusted.
        mmap: Map the tensors instead of reading them (for a check: their bytes are never read). A checkpoint that
            is restored is read whole, so that no tensor keeps the file open (Windows could not replace it).
    """
    file = Path(path).expanduser()
    if file.is_dir():
        # A run folder, a lightning_logs folder or a root of runs: their layouts only, never a walk (`/` holds /proc).
        layouts = ("*.ckpt", "checkpoints/*.ckpt", "*/checkpoints/*.ckpt", "*/*/checkpoints/*.ckpt")
        found = sorted(p for pattern in layouts for p in file.glob(pattern) if p.is_file())
        hint = f", e.g. {found[-1]}" if found else ""
        raise ConfigError(f"--ckpt_path {path} is a folder; give a .ckpt file in it{hint}.")
    if not file.is_file():
        what = "is not a regular file (a device, a pipe)" if file.exists() else "does not exist (or is a broken link)"
        raise ConfigError(f"checkpoint {path} {what}; give the path of a .ckpt file of an earlier run.")
    try:
        head = refuse_compressed(file, "checkpoint")
        zipped = head == b"PK\x03\x04"  # torch.save's format; files of torch < 1.6 are a bare pickle (0x80 ...)
        if not (zipped or head[:1] == b"\x80"):
            what = "empty" if not head else "another kind of file"
            raise ConfigError(f"checkpoint {path} is not a PyTorch checkpoint (it is {what}); give a .ckpt file.")
        checkpoint = torch.load(file, map_location="cpu", weights_only=weights_only is not False, mmap=mmap and zipped)
    except ConfigError:
        raise
    except UNREADABLE as err:
        raise unreadable(path, err, weights_only) from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), Mapping):
        raise ConfigError(f"checkpoint {path} is not a Lightning checkpoint (no state_dict); for plain timm weights "
                          f"use --model.pretrained_file instead.")  # fmt: skip
    # What every reader of it takes for granted: the weights are tensors with data, the hyperparameters a mapping.
    odd = next(
        (
            k
            for k, v in checkpoint["state_dict"].items()  # a module's own extra state may be any object
            if not str(k).endswith("_extra_state") and (not isinstance(v, torch.Tensor) or v.is_meta)
        ),
        None,
    )
    if odd is not None or not isinstance(checkpoint.get("hyper_parameters") or {}, Mapping):
        what = f"its state_dict's {str(odd)[:80]!r} is no tensor of data" if odd is not None else (
            "its hyper_parameters are no mapping")  # fmt: skip
        raise ConfigError(f"checkpoint {path} is not one that Lightning wrote ({what}); give a .ckpt file that vitlit "
                          f"or Lightning saved.")  # fmt: skip
    return checkpoint


def class_names_of(checkpoint: Mapping[str, Any], path: str | Path) -> list[str] | None:
    """The class names a checkpoint (as `read_checkpoint` gives it) was trained on, in index order, or ``None``.

    ``None`` where it does not record them. Checked as a checkpoint's other claims: a list of text, one name per output.
    """
    hp = checkpoint.get("hyper_parameters") or {}
    names, count = hp.get("class_names"), hp.get("num_classes")
    if names is None:
        return None
    # As a fork's data module gave them (a tuple, integers): the model compares them with the checkpoint's as they are.
    named = isinstance(names, list | tuple) and all(isinstance(n, str | int) and not isinstance(n, bool) for n in names)
    if not named or len(names) != count:
        raise ConfigError(f"checkpoint {path} has class_names that are not a list of num_classes={count!r} names; "
                          f"use a checkpoint written by vitlit fit.")  # fmt: skip
    return list(names)


def refuse_compressed(path: Path, what: str) -> bytes:
    """Refuse a zip archive (torch.save's format) with compressed records; return the file's first 4 bytes.

    torch.save stores its records; torch.load would inflate a compressed one whole (a 1.5 MB file can hold 1.6 GB),
    so the archive's directory is read, nothing unpacked. Checkpoints, ``pretrained_file`` and ``teacher_file`` alike.
    """
    with path.open("rb") as f:
        head = f.read(4)
    if head == b"PK\x03\x04":
        with contextlib.suppress(zipfile.BadZipFile), zipfile.ZipFile(path) as archive:  # damaged: the loader says
            if any(record.compress_type != zipfile.ZIP_STORED for record in archive.infolist()):
                raise ConfigError(f"{what} {path} holds compressed records, which torch.save never writes; give a "
                                  f"file torch.save or safetensors wrote.")  # fmt: skip
    return head


def unreadable(path: str | Path, err: BaseException, weights_only: bool | None = True) -> ConfigError:
    """The one-line error for a checkpoint file that ``torch.load`` refused with ``err`` (one of `UNREADABLE`)."""
    if weights_only is not False and isinstance(err, pickle.UnpicklingError) and "weights_only" in str(err):
        return ConfigError(f"checkpoint {path} holds Python objects besides tensors, which weights-only loading "
                           f"refuses; if you trust the file's origin, pass --weights_only false.")  # fmt: skip
    if isinstance(err, OSError) and err.errno in (errno.EACCES, errno.EPERM):  # the file system's refusal
        return ConfigError(f"checkpoint {path} cannot be read ({err.strerror}); check its permissions, or give a file.")
    words = " ".join(str(err).split()).split(". ")[0][:100] or type(err).__name__
    return ConfigError(f"checkpoint {path} cannot be read ({words}); it is truncated or not a PyTorch checkpoint: use "
                       f"an earlier snapshot from the same checkpoints/ folder.")  # fmt: skip


def check_weights(state_dict: Mapping[str, Any], expected: Mapping[str, torch.Tensor], path: str | Path) -> None:
    """Refuse weights whose names or shapes differ from ``expected`` (a model's ``state_dict()``), naming the first.

    Lightning would load them only once the run has started, and a wrong shape or a missing key fails there with a
    page of tensor names; an extra key of another project would fail the same way.
    """
    shapes = {k: tuple(v.shape) for k, v in state_dict.items() if isinstance(v, torch.Tensor)}
    wanted = {k: tuple(v.shape) for k, v in expected.items()}
    missing, extra = sorted(set(wanted) - set(shapes)), sorted(set(shapes) - set(wanted))
    differ = [f"{k} is {shapes[k]}, not {wanted[k]}" for k in wanted if k in shapes and shapes[k] != wanted[k]]
    problem = (f"it lacks {missing[0]}" if missing else f"it has {extra[0]}, which the model has not" if extra
               else differ[0] if differ else None)  # fmt: skip
    if problem is not None:
        raise ConfigError(f"checkpoint {path} does not fit this model ({problem}); give a checkpoint of this model "
                          f"trained with the same options (the run's config.yaml).")  # fmt: skip


def check_restorable(
    checkpoint: Mapping[str, Any], path: str | Path, resume: bool, max_epochs: int | None = None
) -> None:
    """Refuse a checkpoint Lightning cannot restore (a resume: also one without the optimizer's state), in one line.

    Lightning reads ``pytorch-lightning_version`` from every checkpoint it restores and, to resume, the optimizer's
    state and the loops' progress; without them it stops with a KeyError deep in the restore. A resume of a run that
    already trained its ``max_epochs`` trains nothing, and says so in one line.
    """
    if "pytorch-lightning_version" not in checkpoint:
        raise ConfigError(f"checkpoint {path} lacks what Lightning writes into every checkpoint (its version); give "
                          f"a .ckpt file that vitlit or Lightning saved.")  # fmt: skip
    lacking = [key for key in ("optimizer_states", "loops") if key not in checkpoint]
    if resume and lacking:
        raise ConfigError(f"checkpoint {path} holds no {lacking[0]} (saved with weights only), so a fit cannot "
                          f"continue from it; give last.ckpt or a snapshot of its run, or evaluate it with "
                          f"validate or test.")  # fmt: skip
    done = ((checkpoint.get("loops") or {}).get("fit_loop") or {}).get("epoch_progress", {}).get("current", {})
    epochs = done.get("processed", 0)  # an epoch-end checkpoint is saved before its epoch counts as completed
    if resume and max_epochs is not None and max_epochs >= 0 and done.get("completed", 0) > max_epochs:
        # Lightning refuses it too, but with the loops restored and the optimizer not: the last.ckpt saved on the
        # way out would hold a fresh optimizer and schedule in place of the run's.
        raise ConfigError(f"{path} has trained {epochs} epochs, more than --trainer.max_epochs {max_epochs}; give "
                          f"--trainer.max_epochs {epochs + 1} or more to train on, or evaluate it with validate or "
                          f"test.")  # fmt: skip
    if resume and max_epochs is not None and max_epochs >= 0 and epochs >= max_epochs:
        say(f"vitlit: {path} has trained all {epochs} epochs of --trainer.max_epochs {max_epochs}: "
            f"nothing is left to train; give a larger --trainer.max_epochs to train on", error=True)  # fmt: skip


#: Hyperparameters that fix the shape of the weights: a checkpoint only fits a model with the same values.
ARCHITECTURE_KEYS = ("model_name", "num_classes", "img_size", "in_chans", "patch_size")


def check_fits(model: Any, checkpoint: dict[str, Any], options: str | None = None, resume: bool = False) -> None:
    """Raise a one-line `ConfigError` if ``checkpoint`` does not fit ``model`` (a `vitlit.model.ViTClassifier`).

    What `vitlit.model.ViTClassifier.check_checkpoint` asks, here beside the other checks of checkpoints.
    """
    saved = checkpoint.get("hyper_parameters") or {}
    fix = f"use the options it was trained with ({options or 'its run folder keeps them in config.yaml'})."
    for key in ARCHITECTURE_KEYS:
        if key in saved and saved[key] != model.hparams[key]:
            raise ConfigError(
                f"the checkpoint was trained with {key}={saved[key]!r} but this run has "
                f"{key}={model.hparams[key]!r}; {fix}"
            )
    theirs, ours = saved.get("class_names"), model.hparams.get("class_names")
    if theirs and ours and list(theirs) != list(ours):
        i = next(i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b)
        raise ConfigError(
            f"the checkpoint's class {i} is {theirs[i]!r} but this data's class {i} is {ours[i]!r}; {fix}"
        )
    states = checkpoint.get("optimizer_states") or [{}]
    groups = states[0].get("param_groups") if resume and isinstance(states[0], dict) else None
    try:  # the saved settings loaded into a probe of the configured optimizer, which adds what it defaults
        probe = model.optimizer_factory([{"params": [nn.Parameter(torch.zeros(1))]}])
        probe.load_state_dict({"state": {}, "param_groups": [{**groups[0], "params": [0]}]})
    except Exception:  # no state to compare, or an optimizer that cannot be probed on the CPU: Lightning decides
        return
    missing = sorted(set(probe.defaults) - set(probe.param_groups[0]))
    if missing:
        raise ConfigError(
            f"the checkpoint's optimizer state has no {', '.join(missing)}, which {type(probe).__name__} needs: "
            f"it was trained with another optimizer; {fix}"
        )


def run_of_checkpoint(ckpt: Path) -> Path | None:
    """The run folder a checkpoint belongs to (``<run>/checkpoints/<file>.ckpt``), or ``None`` for a loose file."""
    run = ckpt.parent.parent
    saved = (run / "config.yaml").is_file() or (run / "hparams.yaml").is_file()
    return run if ckpt.parent.name == "checkpoints" and saved else None


def start_from(
    ckpt_path: str | None, subcommand: str, trainer: Any, model: Any, config: Any, weights_only: bool | None
) -> tuple[Path | None, Path | None]:
    """``--ckpt_path`` resolved (`resolve_checkpoint`) and its checkpoint checked against this run: (file, its run).

    The file is read memory-mapped and refused in one line before anything is written: not Lightning's, not this
    model's (architecture, classes, weights), not resumable (a fit), or a resume whose optimizer or schedule differs
    from the run's (`check_resumed_settings`). The run is the folder the checkpoint belongs to
    (``None`` for a loose file, or where none is taken).
    """
    root = Path(getattr(trainer.logger, "root_dir", None) or Path(trainer.default_root_dir) / "lightning_logs")
    callbacks = trainer.callbacks if subcommand == "fit" else None  # a fit's resume restores their states
    ckpt = resolve_checkpoint(ckpt_path, subcommand, root.expanduser().absolute(), config, callbacks)
    if ckpt is None:
        return None, None
    checkpoint = read_checkpoint(ckpt, weights_only)
    check_restorable(checkpoint, ckpt, resume=subcommand == "fit", max_epochs=trainer.max_epochs)
    run = run_of_checkpoint(ckpt)
    options = f"--config {run / 'config.yaml'}" if run is not None else None
    if hasattr(model, "check_checkpoint"):  # architecture, classes and (for a resume) the optimizer
        model.check_checkpoint(checkpoint, options, resume=subcommand == "fit")
    check_weights(checkpoint["state_dict"], model.state_dict(), ckpt)
    if run is not None and subcommand == "fit":  # a resume restores the optimizer and schedule as saved
        check_resumed_settings(str(ckpt_path), run, config)
    if callbacks is not None:
        check_weight_callbacks(checkpoint, ckpt, callbacks, options)
    if subcommand != "fit" and trainer.is_global_zero:
        say_other_inputs(checkpoint, model, subcommand, options)
    return ckpt, run


def weight_callbacks_differ(
    checkpoint: Mapping[str, Any], callbacks: Sequence[Any], this_command: bool = False
) -> str | None:
    """How a fit with ``callbacks`` differs from the weight average or freeze schedule ``checkpoint`` was saved with.

    ``this_command`` (``auto``/``last``, which take the run of this command): a weight average the checkpoint's run
    had not, and a freeze schedule of other settings (its state's ``schedule``), are differences too; a resume given
    its checkpoint may start averaging, as Lightning allows, and may change a schedule's later epochs.

    Lightning's weight averaging saves the average as the weights and the training weights beside them
    (``current_model_state``): without the callback a fit trained on from the average. A freeze schedule
    (``BaseFinetuning``, its ``internal_optimizer_metadata``) built the optimizer's groups a stage at a time: a resume
    with other groups ended in torch's ValueError. Other callbacks (a speed meter, a patience) may change on a resume.
    """
    averaged, averaging = "current_model_state" in checkpoint, any(isinstance(cb, WeightAveraging) for cb in callbacks)
    if averaged and not averaging:
        return "a weight average (EMA) there, none here: its weights are the average, which a fit would continue from"
    if this_command and averaging and not averaged:
        return "a weight average (EMA) here, none there"
    states = checkpoint.get("callbacks") if isinstance(checkpoint.get("callbacks"), Mapping) else {}
    frozen = [s for s in states.values() if isinstance(s, Mapping) and "internal_optimizer_metadata" in s]
    freezing = [cb for cb in callbacks if isinstance(cb, BaseFinetuning)]
    if bool(frozen) != bool(freezing):
        where = "there, none here" if frozen else "here, none there"
        return f"a freeze schedule (FreezeSchedule: linear_probe.yaml, unfreeze.yaml) {where}: other optimizer groups"
    theirs, ours = (frozen[0].get("schedule"), freezing[0].state_dict().get("schedule")) if frozen else (None, None)
    if this_command and theirs is not None and ours is not None and theirs != ours:  # a linear probe, an unfreezing
        return f"the freeze schedule: {shown(theirs)} there, {shown(ours)} here"
    return None


def check_weight_callbacks(
    checkpoint: Mapping[str, Any], ckpt: Path, callbacks: Sequence[Any], options: str | None
) -> None:
    """Refuse a resume that drops the weight average or changes the freeze schedule of its checkpoint's run."""
    found = weight_callbacks_differ(checkpoint, callbacks)
    if found is not None:
        raise ConfigError(f"checkpoint {ckpt} cannot continue its run in this fit ({found}); resume with the "
                          f"callbacks it trained with ({options or 'its config.yaml'}), evaluate it, or start a new "
                          f"run.")  # fmt: skip


def say_other_inputs(checkpoint: dict[str, Any], model: Any, subcommand: str, options: str | None) -> None:
    """Say in one line where an evaluation prepares images otherwise than its checkpoint was trained to take them.

    Allowed (a test at another crop is an experiment), but its scores and predictions then differ from those of the
    checkpoint's exports and servers, which prepare images as it recorded.
    """
    saved, ours = checkpoint.get("hyper_parameters") or {}, getattr(model, "hparams", {})
    keys = ("input_mean", "input_std", "input_crop_pct", "input_interpolation")
    other = [f"{key.removeprefix('input_')} {ours.get(key)!r} (trained: {saved[key]!r})" for key in keys
             if saved.get(key) is not None and ours.get(key) is not None and saved[key] != ours[key]]  # fmt: skip
    if other:
        same = f"; {options} prepares them as trained" if options else ""
        say(f"vitlit: this {subcommand} prepares images with {', '.join(other)}: its results differ from the "
            f"checkpoint's exports and servers{same}", error=True)  # fmt: skip


#: ``--ckpt_path``'s words, in any case and with spaces around them: they name no file.
WORDS = ("none", "last", "auto")


def resolve_checkpoint(
    ckpt_path: str | None,
    subcommand: str,
    root: Path,
    config: Mapping[str, Any] | None = None,
    callbacks: Sequence[Any] | None = None,
) -> Path | None:
    """The checkpoint a run starts from: ``--ckpt_path`` as a file, or ``last``/``auto``/``none`` resolved.

    ``last`` is the newest ``last.ckpt`` under ``root`` of a run whose saved model and data are ``config``'s
    (Lightning's own ``last`` looks only in the new run's empty folder); ``auto`` (fit only) is the same, or a fresh
    start where there is none, said in one line: the switch for job scripts restarted after preemption. Another
    experiment's run under the same root is never continued. ``none`` evaluates the model as it is built.
    """
    word = None if ckpt_path is None else checkpoint_word(ckpt_path, subcommand)
    if ckpt_path is None or word == "none":
        return None
    if word is None:
        return Path(ckpt_path).expanduser().absolute()
    return newest_checkpoint(word, root, config, callbacks)


def checkpoint_word(ckpt_path: str, subcommand: str) -> str | None:
    """``--ckpt_path``'s word (``none``, ``last``, ``auto``; in any case, spaces around it), or ``None`` for a file.

    An empty value (a job script's unset variable) and ``auto`` outside fit are refused in one line.
    """
    if not str(ckpt_path).strip():
        raise ConfigError("--ckpt_path is empty; give a checkpoint file, last or auto, or leave the flag out.")
    word = str(ckpt_path).strip().lower()
    if word not in WORDS:
        return None
    if word == "auto" and subcommand != "fit":
        raise ConfigError(f"--ckpt_path auto is for fit only; {subcommand} takes last or a checkpoint path.")
    return word


#: Keys that do not make a run another experiment: the optimizer and the schedule, which a resume restores from the
#: checkpoint (`vitlit.runs.batch_size.BatchSizeSearch` also rewrites the rate in the saved config), and the model's
#: keys that the CLI links from the data (`vitlit.cli.VitLitCLI`), which the data's own keys decide. The batch is one
#: only where the search rewrote it (`differs`).
REWRITTEN = ("model.init_args.optimizer", "model.init_args.scheduler",
             *(f"model.init_args.{key}" for key in ("num_classes", "class_names", "img_size", "in_chans", "input_mean",
                                                    "input_std", "input_crop_pct", "input_interpolation")))  # fmt: skip
#: Keys that change only speed or memory (both data sources give the same batches): a job restarted on a machine of
#: another core count or memory, with its own workers or activation checkpointing, continues its run.
SPEED_ONLY = (*(f"data.init_args.{key}" for key in ("num_workers", "pin_memory", "persistent_workers", "source",
                                                     "predict_dir")),
              "model.init_args.grad_checkpointing", "model.init_args.compile")  # fmt: skip


#: What a resume restores from the checkpoint, whatever the config says: a change there would silently not apply.
RESTORED = ("model.init_args.optimizer", "model.init_args.scheduler", "model.init_args.layer_decay")  # its groups
#: The trainer's settings that make a run another experiment; not its length, which a resume may extend.
EXPERIMENT_TRAINER = ("accumulate_grad_batches", "precision", "gradient_clip_val", "gradient_clip_algorithm")


def _experiment(config: Mapping[str, Any]) -> dict[str, Any]:
    """What tells one experiment from another in a run config: model, data, seed, the trainer's `EXPERIMENT_TRAINER`.

    A seed drawn at random (``seed_everything: true``) tells nothing: left out.
    """
    plain = lambda v: v.as_dict() if hasattr(v, "as_dict") else v  # noqa: E731 (a parsed Namespace, or YAML's dict)
    trainer, seed = plain(config.get("trainer")) or {}, config.get("seed_everything")
    return json.loads(json.dumps({"model": plain(config.get("model")), "data": plain(config.get("data")),
                                  "seed_everything": seed if type(seed) is int else None,
                                  "trainer": {key: trainer.get(key) for key in EXPERIMENT_TRAINER}},
                                 default=str))  # fmt: skip


#: What an evaluation from a checkpoint is given as null (`vitlit.cli.VitLitCLI.parse_arguments`): the checkpoint's
#: weights replace them, so its run's are not compared.
NOT_EVALUATED = ("model.init_args.pretrained", "model.init_args.pretrained_file", "model.init_args.distillation")


def differs(
    saved: Path, config: Mapping[str, Any], only: tuple[str, ...] = (), ignore: tuple[str, ...] = ()
) -> str | None:
    """The first setting of the experiment where the run config ``saved`` is not ``config``; ``None`` if none.

    What ``--ckpt_path last`` and ``auto`` compare before they take a run's checkpoint: another experiment under the
    same root (another data set, model, recipe or seed, `_experiment`) is never continued. ``only`` compares those
    keys alone (their prefixes), `REWRITTEN` left out of them too; ``ignore``'s are not compared.
    """
    try:
        theirs = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return "its config.yaml (unreadable)"
    if not isinstance(theirs, dict):
        return "its config.yaml (no mapping)"
    # BatchSizeSearch's rewrite of the batch and the rate is the run's own; another batch is another experiment. A
    # searched run's batch is restored by the search alone: a command without it would train at the one typed.
    searched = "BatchSizeSearch" in str((theirs.get("trainer") or {}).get("callbacks"))
    searching = "BatchSizeSearch" in str((config.get("trainer") or {}).get("callbacks"))
    batch = ["data.init_args.batch_size"] if searched and searching else []
    skip: tuple[str, ...] = (*REWRITTEN, *SPEED_ONLY, *ignore, *batch)
    if only:
        skip = ("data.init_args.batch_size", "model.init_args.optimizer.init_args.lr") if searched else ()
    ours, theirs = _experiment(config), _experiment(theirs)
    if ours["seed_everything"] is None or theirs["seed_everything"] is None:  # a random seed matches any
        ours["seed_everything"] = theirs["seed_everything"] = None
    return _first_difference(ours, theirs, "", skip, only)


def _first_difference(ours: Any, theirs: Any, key: str, skip: tuple[str, ...], only: tuple[str, ...]) -> str | None:
    if key.startswith(skip) or (only and key and not any(key.startswith(o) or o.startswith(key) for o in only)):
        return None
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for name in sorted(set(ours) | set(theirs)):
            found = _first_difference(ours.get(name), theirs.get(name), f"{key}.{name}" if key else name, skip, only)
            if found:
                return found
        return None
    return None if ours == theirs else f"{key}: {shown(theirs)!r} there, {shown(ours)!r} here"


def check_resumed_settings(ckpt_path: str, run: Path, config: Mapping[str, Any]) -> None:
    """Refuse a fit resumed from ``run`` whose optimizer or schedule differs from the one the run last trained with.

    A resume restores both from the checkpoint (Lightning's), so a changed learning rate or warmup would be silently
    ignored while the resume's saved config recorded it. The run's newest saved config is compared (a resume's
    ``config.resume-K.yaml``); `vitlit.runs.batch_size.BatchSizeSearch`'s rewrite of the rate is the run's own.
    """
    found = _restored_differ(run, config)
    if found is not None:
        raise ConfigError(f"--ckpt_path {ckpt_path} resumes {run}, whose optimizer or schedule differs ({found}); a "
                          f"resume continues the checkpoint's, so the change would not apply: drop it to resume, or "
                          f"start a fresh run with --ckpt_path none.")  # fmt: skip


def _restored_differ(run: Path, config: Mapping[str, Any]) -> str | None:
    """Where the optimizer or the schedule of ``run``'s newest saved config (a resume's, else its first) differs."""
    resumes = [
        int(m.group(1))
        for p in run.glob("config.resume-*.yaml")
        if (m := re.fullmatch(r"config\.resume-(\d+)\.yaml", p.name))
    ]
    saved = run / (f"config.resume-{max(resumes)}.yaml" if resumes else "config.yaml")
    return differs(saved, config, only=RESTORED) if saved.is_file() else None


def newest_checkpoint(
    ckpt_path: str, root: Path, config: Mapping[str, Any] | None, callbacks: Sequence[Any] | None = None
) -> Path | None:
    """``--ckpt_path last`` or ``auto``: the newest ``last.ckpt`` under ``root`` of a run of this config, or ``None``.

    A run of this config has ``config``'s model, data, seed and trainer recipe (`differs`), and the optimizer and
    schedule it last trained with (a resume would refuse others), and for a fit (``callbacks``, the trainer's) the
    weight average and freeze schedule its checkpoint was saved with (`weight_callbacks_differ`); ``auto`` starts
    afresh where there is none, said in one line where other runs are there.

    Raises:
        ConfigError: For ``last`` where no run of this config has a ``last.ckpt``.
    """
    found = sorted((p for p in root.glob("*/checkpoints/last.ckpt") if p.is_file()), key=lambda p: -p.stat().st_mtime)
    # An evaluation's weights are null (the checkpoint has them), and its batch is its own (it trains nothing).
    ignore = (*NOT_EVALUATED, "data.init_args.batch_size") if callbacks is None else ()
    if found and config is not None:  # only this experiment's runs
        other = {p: differs(p.parent.parent / "config.yaml", config, ignore=ignore)
                 or _restored_differ(p.parent.parent, config) for p in found}  # fmt: skip
        for p in [p for p in found if other[p] is None] if callbacks is not None else ():  # a fit continues it
            with contextlib.suppress(ConfigError):  # an unreadable one is refused by name when it is taken
                other[p] = weight_callbacks_differ(read_checkpoint(p), callbacks, this_command=True)
            if other[p] is None:  # the newest run of this fit's kind is taken: the older ones need no reading
                break
        if all(other.values()):  # every run here is another experiment's
            newest = found[0].parent.parent
            if ckpt_path == "last":
                fix = "resume that run, or --ckpt_path auto to start this one" if callbacks is not None else "use it"
                raise ConfigError(f"--ckpt_path last: no run under {root} has this run's config (the newest, "
                                  f"{newest.name}, differs in {other[found[0]]}); give its checkpoint's path to "
                                  f"{fix}.")  # fmt: skip
            say(f"vitlit: --ckpt_path auto: no run under {root} has this run's config (the newest, {newest.name}, "
                f"differs in {other[found[0]]}): a fresh start", error=True)  # fmt: skip
        found = [p for p in found if other[p] is None]
    if not found and ckpt_path == "last":
        raise ConfigError(f"--ckpt_path last found no last.ckpt under {root}; give a checkpoint path, or check "
                          f"--trainer.default_root_dir.")  # fmt: skip
    return found[0] if found else None
