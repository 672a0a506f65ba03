"""The run's check phase: what `vitlit.cli` checks of a run as a whole before it starts, each in one line.

The model checks its own options (`vitlit.model`), a data module its own (`vitlit.data.base`), a checkpoint is
checked where it is read (`vitlit.checkpoints`), a run's folder by the module that places it (`vitlit.run_dir`);
what needs the run as a whole is here, in the order the CLI asks: the parsed settings (values Lightning would crash
on deep inside a run, silently ignore or silently replace), the Trainer's callbacks, the memory a run will need
(estimated before anything is allocated, against what the device has free), and a finished evaluation's metrics. A run
that cannot fit should stop in one line at its start, not grow until the OOM killer ends it (or CUDA's out-of-memory
error ends it mid-epoch). The estimates are lower bounds: what a run refused here could never have fitted.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import BatchSizeFinder, Checkpoint, LearningRateFinder, LearningRateMonitor

from vitlit.data.pipeline import free_memory
from vitlit.errors import CheckFailed, ConfigError
from vitlit.optim import check_factory_classes
from vitlit.run_dir import FOLDER_LOGGERS, check_writable_folder, written_folders
from vitlit.text import shown


def check_run(subcommand: str, config: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> None:
    """Refuse settings Lightning would crash on deep inside a run, silently ignore or silently replace.

    Args:
        subcommand: ``fit``, ``validate``, ``test`` or ``predict``.
        config: The parsed config of the subcommand (plain values, before any class is built).
        environ: The environment (torchrun's and SLURM's process counts).
    """
    seed, trainer = config.get("seed_everything"), config.get("trainer") or {}
    if not isinstance(seed, bool) and seed is not None and not 0 <= seed <= 2**32 - 1:  # NumPy's range
        raise ConfigError(f"--seed_everything={seed} is outside 0..4294967295; give a seed in that range, e.g. 42.")
    if seed is True:  # a seed drawn at random
        check_drawn_seed(environ)
    if config.get("ckpt_path") is None and subcommand != "fit":
        raise ConfigError(
            f"{subcommand} without --ckpt_path would evaluate untrained weights; give a checkpoint (a run's "
            f"checkpoints/*.ckpt, or last), or --ckpt_path none to {subcommand} the model as it is built."
        )
    # Values Lightning takes and then divides by zero on, or trains nothing with and exits 0. Each rule says what is
    # valid, so that a value no comparison holds for (NaN) is refused too.
    count, limit = (lambda v: v >= 1, "give 1 or more"), (lambda v: v == -1 or v >= 1, "give 1 or more (-1: no limit)")
    part = (lambda v: v > 0 and (v <= 1 or not isinstance(v, float)), "give a count of batches or a fraction in (0, 1]")
    valid = {"accumulate_grad_batches": count, "log_every_n_steps": count, "check_val_every_n_epoch": count,
             "max_steps": limit, "max_epochs": limit, "limit_train_batches": part, "val_check_interval": part,
             "gradient_clip_val": (lambda v: v >= 0, "give a positive norm, or 0 for none")}  # fmt: skip
    # An evaluation's own limit: 0 evaluates nothing and exits 0 (predict: no predictions.csv, an empty folder).
    evaluated = {"validate": "val", "test": "test", "predict": "predict"}.get(subcommand)
    if evaluated is not None:
        valid[f"limit_{evaluated}_batches"] = part
    for name, (ok, fix) in valid.items():
        value = trainer.get(name)
        if isinstance(value, (int, float)) and not ok(value):
            does = subcommand if name == f"limit_{evaluated}_batches" else "train"
            raise ConfigError(f"--trainer.{name}={value} would {does} nothing or crash the run; {fix}.")
    if subcommand == "fit":
        check_validation_schedule(trainer)
    check_flags_callbacks_need(subcommand, trainer)
    if trainer.get("max_time") is not None:
        check_budget(trainer["max_time"])
    if (precision := str(trainer.get("precision"))) in ("16-mixed", "16"):  # fp16 needs a GPU
        check_half_precision(precision, str(trainer.get("accelerator")))
    if subcommand == "fit":  # an evaluation of a run's checkpoint writes beside the run, not in a copied run's root
        runs_root = trainer.get("default_root_dir") or "."
        check_writable_folder(runs_root)
        saved = Path(runs_root).expanduser().absolute() / "config.yaml"
        if trainer.get("logger") is False and saved.exists():
            # Without a logger the config is saved in the root itself, where Lightning refuses to overwrite one.
            raise ConfigError(f"--trainer.logger false saves the run's config.yaml in {shown(saved.parent)}, which "
                              f"holds one from an earlier run; give another --trainer.default_root_dir.")  # fmt: skip
    check_factory_classes((config.get("model") or {}).get("init_args") or {})
    data = (config.get("data") or {}).get("init_args") or {}
    root = data.get("root") if subcommand == "fit" else None
    data_root = Path(root).expanduser().resolve() if isinstance(root, (str, Path)) else None
    for runs in written_folders(trainer) if data_root is not None else ():
        if runs.is_relative_to(data_root):
            # Its lightning_logs/ would become part of the data: a class folder of a flat layout, or files beside it.
            given = trainer.get("default_root_dir") or "."
            raise ConfigError(f"--trainer.default_root_dir {shown(given)} writes its runs into {shown(runs)}, which "
                              f"is inside --data.root {shown(root)}, so the runs would become part of the data; give "
                              f"a folder outside it.")  # fmt: skip


def check_drawn_seed(environ: Mapping[str, str]) -> None:
    """Refuse ``--seed_everything true`` where torchrun or SLURM started several processes: each would draw its own.

    SLURM's tasks count only where Lightning runs them as processes of one job: an interactive allocation
    (``salloc``) runs this one process.
    """
    # Lightning's SLURMEnvironment.detect, read from `environ` (it reads os.environ): a job named bash or
    # interactive is left to another environment.
    srun = "SLURM_NTASKS" in environ and environ.get("SLURM_JOB_NAME") not in ("bash", "interactive")
    names = ("WORLD_SIZE", "SLURM_NTASKS") if srun else ("WORLD_SIZE",)
    started = max(int(environ.get(name, "1") or 1) for name in names)
    if started > 1 and "PL_GLOBAL_SEED" not in environ:
        raise ConfigError(f"--seed_everything=true gives each of the {started} processes its own random seed, so "
                          f"their data shards would overlap; give a number (e.g. --seed_everything 42).")  # fmt: skip


def check_validation_schedule(trainer: Mapping[str, Any]) -> None:
    """Refuse a fit whose last epochs are never validated, or whose validation interval exceeds its epoch.

    The shared ``last`` ModelCheckpoint saves after each validation: with ``check_val_every_n_epoch`` N that does
    not divide ``max_epochs``, the epochs after the last multiple of N are never saved, and the fit exits 0.
    Lightning refuses a ``val_check_interval`` of more batches than an epoch has once the data is read; it is
    refused here where ``limit_train_batches`` (a count) bounds the epoch, as the data's own length is known only
    then.

    Args:
        trainer: The parsed ``trainer`` settings of a fit.
    """
    if trainer.get("fast_dev_run") or trainer.get("overfit_batches"):  # each sets the epochs and batches itself
        return
    every, epochs = trainer.get("check_val_every_n_epoch"), trainer.get("max_epochs")
    # Counts are ints (type, not isinstance: a bool is none); Lightning reads a float as a fraction.
    if type(every) is int and every > 1 and type(epochs) is int and epochs > 0 and epochs % every:
        divisor = next(d for d in range(min(every, epochs), 0, -1) if epochs % d == 0)
        raise ConfigError(
            f"--trainer.check_val_every_n_epoch={every} does not divide --trainer.max_epochs={epochs}, so the last "
            f"{epochs % every} epoch(s) would be neither validated nor saved in last.ckpt; give --trainer.max_epochs "
            f"{math.ceil(epochs / every) * every} (a multiple of {every}) or --trainer.check_val_every_n_epoch "
            f"{divisor} (which divides {epochs})."
        )
    interval, batches = trainer.get("val_check_interval"), trainer.get("limit_train_batches")
    if type(interval) is int and type(batches) is int and interval > batches and every is not None:
        raise ConfigError(
            f"--trainer.val_check_interval={interval} is more than the {batches} training batches of an epoch "
            f"(--trainer.limit_train_batches={batches}); give at most {batches}, a fraction of the epoch such as "
            f"0.5, or --trainer.check_val_every_n_epoch null to count batches across epochs."
        )


def check_flags_callbacks_need(subcommand: str, trainer: Mapping[str, Any]) -> None:
    """Refuse a Trainer flag that the configured callbacks need, which Lightning would refuse once the data is read.

    Args:
        subcommand: ``fit``, ``validate``, ``test`` or ``predict``.
        trainer: The parsed ``trainer`` settings (its callbacks are class paths, not yet built).
    """
    classes = _callback_classes(trainer.get("callbacks"))
    instead = "or give your own callbacks without {} (--trainer.callbacks=[], then --trainer.callbacks+=NAME for each)"
    logger = trainer.get("logger")
    monitors = [c.__name__ for c in classes if issubclass(c, LearningRateMonitor)]
    if subcommand == "fit" and (logger is False or logger == []) and monitors:  # it checks at the fit's start only
        raise ConfigError(
            f"--trainer.logger={str(logger).lower()} leaves {monitors[0]} (a shared callback of "
            f"src/vitlit/defaults.yaml) no logger to write the learning rate to; keep a logger (TensorBoard, the "
            f"default, or --trainer.logger CSVLogger), {instead.format('it')}."
        )
    savers = [c.__name__ for c in classes if issubclass(c, Checkpoint)]
    if trainer.get("enable_checkpointing") is False and savers:  # Lightning's Trainer refuses both together
        raise ConfigError(
            f"--trainer.enable_checkpointing=false conflicts with the run's checkpoint callbacks "
            f"({', '.join(dict.fromkeys(savers))}: the best checkpoint and last.ckpt are shared in "
            f"src/vitlit/defaults.yaml); leave the flag out, {instead.format('them')}."
        )


def _callback_classes(given: Any) -> list[type]:
    """The classes of the configured callbacks: class paths as parsed, or objects (a caller's in Python)."""
    classes = []
    for callback in given if isinstance(given, list) else [given] if given else []:
        if isinstance(callback, Callback):
            classes.append(type(callback))
            continue
        path = callback.get("class_path") if hasattr(callback, "get") else None  # a Namespace, or a dict
        module, _, name = str(path).rpartition(".")
        try:  # the parser imported each class already
            classes.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError, ValueError):
            continue  # not a class path: the parser said so
    return [c for c in classes if isinstance(c, type)]


def check_budget(budget: Any) -> None:
    """Refuse a ``--trainer.max_time`` that would train nothing or overflow a clock (Lightning's Timer takes both)."""
    try:  # the parsed duration, as Lightning's Timer reads it (a DD:HH:MM:SS string, or timedelta's keys)
        span = timedelta(**budget) if isinstance(budget, dict) else timedelta(
            **dict(zip(("days", "hours", "minutes", "seconds"), map(int, budget.split(":")), strict=True)))  # fmt: skip
    except OverflowError:
        raise ConfigError(
            f"--trainer.max_time={budget} is longer than a clock counts; leave it out for no limit."
        ) from None
    except (AttributeError, TypeError, ValueError):
        return  # not a duration: Lightning's Timer says which format it takes
    if span.total_seconds() <= 0:
        raise ConfigError(f"--trainer.max_time={budget} would train nothing; give a time budget such as 00:12:00:00.")


def check_half_precision(precision: str, accelerator: str) -> None:
    """Refuse fp16 (``16-mixed``) on the CPU, which Lightning would take and then fail on."""
    gpu = torch.cuda.is_available() or torch.backends.mps.is_available()
    if accelerator == "cpu" or (accelerator == "auto" and not gpu):
        raise ConfigError(f"--trainer.precision {precision} needs a GPU, and this run is on the CPU; CPUs run "
                          f"bf16-mixed or 32-true (--trainer.precision bf16-mixed).")  # fmt: skip


def check_built_callbacks(callbacks: Sequence[Callback]) -> None:
    """Refuse Lightning's BatchSizeFinder and LearningRateFinder, and two stateful callbacks that share a state key.

    BatchSizeFinder changes the batch but not what depends on it; LearningRateFinder sets a model attribute ``lr``,
    which vitlit's model does not have (its rate is the optimizer's); a checkpoint keeps one state per key, so the
    second of two callbacks with one key would restore the first one's state.
    """
    if any(type(cb) is BatchSizeFinder for cb in callbacks):
        raise ConfigError(
            "BatchSizeFinder changes the batch but not the learning rate, the schedule's length or the "
            "saved config; use --trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch."
        )
    # With update_attr false it only measures, and trains at the configured rate.
    if any(isinstance(cb, LearningRateFinder) and getattr(cb, "_update_attr", True) for cb in callbacks):
        raise ConfigError(
            "LearningRateFinder sets a model attribute lr, and the learning rate of vitlit's model is its "
            "optimizer's; give it with --model.optimizer.init_args.lr, or search it with `vitlit sweep` "
            "(configs/sweeps/digits.yaml)."
        )
    # Two checkpoint callbacks writing files of one name into one folder prune each other's (two Snapshots by
    # fraction, a frequent one that keeps 2 and a rare one that keeps all, wrote snapshot-step{step}).
    # One with save_top_k 0 writes no named file (save_last=True alone).
    writes = [(cb.dirpath, cb.filename) for cb in callbacks if getattr(cb, "save_top_k", 0) != 0]
    same = next((w for w in writes if writes.count(w) > 1), None)
    if same is not None:
        folder, names = same[0] or "the run's checkpoints/", repr(same[1]) if same[1] else "by Lightning's default"
        raise ConfigError(f"two checkpoint callbacks write files named {names} into {folder}, so each deletes the "
                          f"other's; give one of them another filename or dirpath.")  # fmt: skip
    keys = [cb.state_key for cb in callbacks if type(cb).state_dict is not Callback.state_dict]
    twice = next((cb for cb in callbacks if keys.count(cb.state_key) > 1), None)
    if twice is not None:
        raise ConfigError(f"two {type(twice).__name__} callbacks have the same settings ({twice.state_key}), and a "
                          f"checkpoint keeps one state per setting: change the one src/vitlit/defaults.yaml already "
                          f"has (--trainer.callbacks in --print_config) or give yours another monitor, mode or "
                          f"every_n_epochs.")  # fmt: skip


#: Activations a transformer block keeps per token and channel for its backward pass, at least: the inputs and
#: outputs of its two norms, q/k/v, the attention's output, its projection, and the MLP's two 4x-wide tensors.
SAVED_PER_TOKEN_CHANNEL = 12


def activation_bytes(net: Any, batch_size: int, training: bool, precision: str, checkpointing: bool) -> int | None:
    """A lower bound on the activation memory of one batch of a timm ViT; ``None`` for a model of another shape.

    Training keeps every block's activations for the backward pass (with gradient checkpointing, only each block's
    input, plus one block's while it is recomputed); evaluation holds one block's at a time. Where a block's attention
    is not fused (timm's ``fused_attn`` off), its heads x tokens x tokens matrix is held too: at 4096 px and more
    it is most of the memory.
    """
    try:
        tokens = int(net.patch_embed.num_patches) + int(net.num_prefix_tokens)
        width, depth = int(net.embed_dim), len(net.blocks)
        attention = getattr(net.blocks[0].attn, "num_heads", 0) * tokens**2  # unfused: the matrix, after softmax
        attention *= not getattr(net.blocks[0].attn, "fused_attn", True)
    except (AttributeError, TypeError, IndexError):
        return None
    scalar = 4 if "32" in precision or "64" in precision else 2  # fp32, or fp16/bf16 under autocast
    block = (SAVED_PER_TOKEN_CHANNEL * tokens * width + attention) * scalar
    if not training:
        return batch_size * block
    kept = depth * tokens * width * scalar + block if checkpointing else depth * block
    return batch_size * kept


def check_activations(model: Any, data: Any, trainer: Any, subcommand: str) -> None:
    """Refuse a run whose activations alone cannot fit in the device's free memory, naming the flags that fix it."""
    net, batch_size = getattr(model, "net", None), getattr(data, "batch_size", None)
    if net is None or not isinstance(batch_size, int):
        return
    checkpointing = bool(getattr(model, "hparams", {}).get("grad_checkpointing"))
    need = activation_bytes(net, batch_size, subcommand == "fit", str(trainer.precision), checkpointing)
    device = trainer.strategy.root_device
    free = free_memory(device)
    if need is None or free is None or need <= free:
        return
    fixes = "--data.img_size or --data.batch_size" + ("" if checkpointing or subcommand != "fit" else
                                                      ", or --model.grad_checkpointing true")  # fmt: skip
    raise ConfigError(
        f"{subcommand} at --data.img_size {getattr(data, 'img_size', '?')} with batches of {batch_size} needs at "
        f"least {need / 2**30:,.1f} GB for the model's activations, more than the {free / 2**30:,.1f} GB free on "
        f"{device}; lower {fixes}."
    )


#: Bounds on each request to a tracking server (the services' own settings, unless the user set them): a server that
#: does not answer costs seconds, not MLflow's minutes of retries or W&B's 90 s (124 s measured) to start a run.
SERVICE_TIMEOUTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "15", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
                    "WANDB_INIT_TIMEOUT": "20"}  # fmt: skip


def reach_loggers(trainer: Trainer) -> None:
    """Reach each logger's service (an MLflow server, W&B) before the run's folder exists; refuse one that fails.

    A logger connects at its first use, inside the run: an unreachable server would cost minutes of retries and end
    in chained tracebacks with the run started. Folder loggers (TensorBoard, CSV) are placed by `place_run`.
    """
    for logger in trainer.loggers if trainer.is_global_zero else []:
        if isinstance(logger, FOLDER_LOGGERS):
            continue
        for key, value in SERVICE_TIMEOUTS.items():  # before the service is reached
            os.environ.setdefault(key, value)
        where = next((str(v) for k in ("_tracking_uri", "tracking_uri") if (v := getattr(logger, k, None))), "")
        try:
            logger.experiment  # noqa: B018 (its connection: the experiment is made or found on the server)
        except Exception as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[-1][:160]
            raise ConfigError(
                f"{type(logger).__name__} cannot reach its service{f' at {where}' if where else ''} ({reason}); "
                f"start it, check --trainer.logger's settings, or log with TensorBoard (the default)."
            ) from None


def check_metrics(subcommand: str, metrics: Mapping[str, torch.Tensor]) -> None:
    """A validate or test whose loss or accuracy is NaN or infinite fails (status 1) rather than exiting 0."""
    bad = [f"{k} {float(v)}" for k, v in metrics.items() if v.numel() == 1 and not math.isfinite(float(v))]
    if bad:
        raise CheckFailed(f"{subcommand} gave {', '.join(bad)}: the model's outputs are not finite numbers; evaluate "
                          f"an earlier checkpoint of the run (its checkpoints/ folder) or one trained with "
                          f"--trainer.precision 32")  # fmt: skip
