"""Optimizer parameter groups (weight decay, layer decay), the default learning-rate schedule, and the run's length.

Both are plain PyTorch so that any optimizer (AdamW, SGD, timm's LAMB, ...) or scheduler class can be swapped in
from YAML. The run's length in optimizer steps, and the fraction of it done, have one definition here (at the end):
the learning-rate schedule, the random-erasing schedule and the snapshots every N% of the run all follow it.
Lightning computes it (``trainer.estimated_stepping_batches``: epochs or ``max_steps``, batches per epoch, gradient
accumulation, devices) and caches the data loaders it needs for it, so reading it again is cheap.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from lightning.pytorch import Trainer
from timm.optim import param_groups_layer_decay, param_groups_weight_decay
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from vitlit.config import PositiveInt, Probability
from vitlit.errors import ConfigError
from vitlit.text import say, shown

# Marks timm's decayed groups so that the optimizer's configured weight decay applies to them (see param_groups).
_CONFIGURED_DECAY = -1.0


def param_groups(
    model: nn.Module, skip: Iterable[str] = (), layer_decay: float | None = None, names: Iterable[str] | None = None
) -> list[dict]:
    """Group parameters for the optimizer: no weight decay where it hurts, and optional layer-wise lr decay.

    Biases, norm weights (every tensor with one dimension) and the names in ``skip`` (timm models list
    ``pos_embed`` and ``cls_token`` in ``model.no_weight_decay()``) get ``weight_decay=0``; shrinking them towards
    zero only hurts. timm's ``param_groups_weight_decay`` sorts them so (the same rule); the decayed groups then
    carry no ``weight_decay`` key, so the value configured on the optimizer (in YAML) applies: timm's helpers bake a
    value in, so they are wrapped rather than used as is.

    With ``layer_decay`` (fine-tuning, as in BEiT/MAE), timm's ``param_groups_layer_decay`` assigns each block its
    depth and the groups get ``lr_scale = layer_decay ** (depth_of_model - depth)``: the head learns at the full
    rate, the patch embedding at the smallest. `ViTClassifier` multiplies each group's learning rate by its
    ``lr_scale`` before the scheduler records it, so every scheduler honours it.

    Args:
        model: The network whose trainable parameters are grouped.
        skip: Parameter names (as in ``named_parameters``) that must not be decayed.
        layer_decay: Per-block learning-rate decay factor in (0, 1]; ``None`` disables layer-wise decay.
        names: Group only these parameters (a stage that `vitlit.transfer.finetune.FreezeSchedule` unfreezes);
            ``None``: all
            trainable ones.

    Returns:
        Parameter groups for any ``torch.optim`` optimizer, each with a ``name`` for the learning-rate curves.
    """
    skip, chosen = set(skip), None if names is None else set(names)
    if layer_decay is not None:
        groups = param_groups_layer_decay(
            model, weight_decay=_CONFIGURED_DECAY, no_weight_decay_list=skip, layer_decay=layer_decay
        )
    else:  # timm gives [no_decay, decay]: decayed first, the order earlier runs' checkpoints keep the state in
        groups = param_groups_weight_decay(model, weight_decay=_CONFIGURED_DECAY, no_weight_decay_list=skip)[::-1]
    if chosen is not None:
        ids = {id(p) for n, p in model.named_parameters() if n in chosen}
        for group in groups:
            group["params"] = [p for p in group["params"] if id(p) in ids]
    groups = [g for g in groups if g["params"]]
    for i, group in enumerate(groups):
        decayed = group.pop("weight_decay") == _CONFIGURED_DECAY
        if not decayed:
            group["weight_decay"] = 0.0
        group.pop("param_names", None)
        kind = "decay" if decayed else "no_decay"  # LearningRateMonitor's curves: lr-AdamW/decay, lr-AdamW/no_decay
        group["name"] = kind if layer_decay is None else f"g{i:02d}_x{group['lr_scale']:.3g}_{kind}"
    return groups


class WarmupCosineLR(LambdaLR):
    """Linear warmup to the optimizer's learning rate, then cosine decay to a floor; stepped every optimizer step.

    With ``decay_fraction`` below 1 the rate holds at its peak and the cosine spans only the last part of the run
    (warmup-stable-decay): the shape for a run whose length is re-estimated as it goes (`vitlit.runs.budget`), since a
    new estimate moves only where the decay starts, not the rate of the steps before it.

    ``total_steps`` may be left unset: the model's ``configure_optimizers`` then fills in (`fit_to_run`) the run's
    number of optimizer steps (``trainer.estimated_stepping_batches``, which accounts for epochs, gradient
    accumulation and ``max_steps``), so the schedule follows ``--trainer.max_epochs`` without a second number to keep
    in sync.

    Args:
        optimizer: The wrapped optimizer; its learning rates are the peak values.
        warmup_steps: The linear warmup from ``lr / warmup_steps`` to ``lr``: a count of optimizer steps (an int; 0
            disables it), or a share of the run's optimizer steps (a float in [0, 1), timm's ``--warmup-epochs`` in
            the run's own measure), resolved to steps when the run's length is known and said in one line, so that a
            shorter run (``--trainer.max_epochs 2``) warms up for its share. A count as long as the run or longer is
            refused in one line when the run's length is known, as its learning rate would never reach the peak.
        total_steps: Optimizer steps of the whole run, warmup included; ``None``: the run's (`fit_to_run`).
        min_lr_ratio: The floor at the end of the cosine, as a fraction of the peak learning rate.
        decay_fraction: The share of the steps after the warmup over which the cosine decays; the rate holds at its
            peak before it. 1.0: the cosine spans the whole run after the warmup.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        warmup_steps: int | float = 500,
        total_steps: PositiveInt | None = None,
        min_lr_ratio: Probability = 0.01,
        decay_fraction: Probability = 1.0,
    ) -> None:
        # A plain int | float, not constrained types: jsonargparse would dump a union of them wrongly (0.1 as 0).
        if isinstance(warmup_steps, bool) or not (
            (isinstance(warmup_steps, int) and warmup_steps >= 0)
            or (isinstance(warmup_steps, float) and 0 <= warmup_steps < 1)
        ):
            raise ConfigError(f"warmup_steps={warmup_steps!r} is neither a count of steps (an int, v>=0) nor a share "
                              f"of the run (a float, 0<=v<1); use e.g. 500 or 0.05.")  # fmt: skip
        self.warmup_share = float(warmup_steps) if isinstance(warmup_steps, float) else None
        self.warmup_steps = 0 if self.warmup_share is not None else int(warmup_steps)  # a share: set with the length
        self.total_steps = None
        # Plain numbers (`vitlit.config.as_builtin`): the checkpoint keeps the scheduler's state.
        self.min_lr_ratio, self.decay_fraction = float(min_lr_ratio), float(decay_fraction)
        super().__init__(optimizer, self.lr_factor)
        if total_steps is not None:
            self.set_total_steps(int(total_steps))

    def set_total_steps(self, total_steps: int) -> str | None:
        """Set the run's length; the first time, refuse a warmup that does not end inside it.

        A warmup given as a share follows a new length until it has ended, and then stays: a later estimate
        (`vitlit.runs.budget`) that moved it would take a rate at its peak back into the warmup.

        Raises:
            ConfigError: The first time, for a warmup as long as the run or longer, which never reaches the peak.

        Returns:
            A one-line note: the steps a warmup given as a share resolved to (the first time, and again where a new
            length moves them: `vitlit.runs.batch_size`), or a later, shorter estimate of the length
            (`vitlit.runs.budget`) that ends inside the warmup; else ``None``.
        """
        first, self.total_steps, before = self.total_steps is None, int(total_steps), self.warmup_steps
        warming = first or self.last_epoch < max(self.warmup_steps, 1)  # no step taken yet, or inside the warmup
        if self.warmup_share is not None and warming:  # the share's steps, always inside the run
            self.warmup_steps = min(round(self.warmup_share * self.total_steps), self.total_steps - 1)
            for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
                group["lr"] = base * self.lr_factor(self.last_epoch)  # the rate of this step, with the warmup known
            share = f"warmup_steps {self.warmup_share:g}"
            said = f"{share}: {self.warmup_steps} of the run's {self.total_steps} optimizer steps"
            return said if first or self.warmup_steps != before else None  # said again where a new length moved it
        if self.warmup_steps < self.total_steps:
            return None
        if first:
            raise ConfigError(f"warmup_steps={self.warmup_steps} is not shorter than this run's {total_steps} "
                              f"optimizer steps: its learning rate would never reach the peak; give fewer warmup "
                              f"steps (--model.scheduler.init_args.warmup_steps) or a longer run.")  # fmt: skip
        return (f"the run's new estimate of {total_steps} optimizer steps ends inside the {self.warmup_steps}-step "
                f"warmup: the learning rate will not reach its peak")  # fmt: skip

    def lr_factor(self, step: int) -> float:
        """Return the multiplier of the peak learning rate at optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.total_steps is None:
            if step == 0:  # LambdaLR evaluates step 0 in its constructor, before the model can fill total_steps in.
                return 1.0
            raise ConfigError(
                "WarmupCosineLR needs total_steps; set it, or let the run's length fill it in (fit_to_run)."
            )
        decay_steps = max(1.0, self.decay_fraction * (self.total_steps - self.warmup_steps))
        progress = min(1.0, max(0.0, (step - self.total_steps + decay_steps) / decay_steps))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


#: The schedule's length until a time budget has sized it, in a run that sets no end (``max_epochs -1``).
UNBOUNDED_STEPS = 10**9
#: What each factory builds, and a class to name where one builds none.
FACTORIES = {"optimizer": ("an optimizer", "torch.optim.AdamW"),
             "scheduler": ("a scheduler", "vitlit.optim.WarmupCosineLR")}  # fmt: skip


def check_factories(optimizer_factory: Any, scheduler_factory: Any) -> None:
    """Build the optimizer and scheduler once on a probe parameter, so a bad value stops the run before it starts.

    torch's optimizers check their arguments (a negative learning rate, betas outside [0, 1)) only when they are
    built, which Lightning does after the run's folder exists and the data is loaded. A ``class_path`` that names a
    function gives what the function returned (jsonargparse calls it with its ``init_args``): it must build an
    optimizer, or a scheduler.
    """
    for key, factory in (("optimizer", optimizer_factory), ("scheduler", scheduler_factory)):
        if not callable(factory):  # e.g. builtins.print named as the class: jsonargparse called it, giving None
            raise ConfigError(f"--model.{key} gave a value of type {type(factory).__name__}, not a factory of "
                              f"{FACTORIES[key][0]}; give a class_path such as {FACTORIES[key][1]}.")  # fmt: skip
    built, made = "optimizer", None  # what is being built: the one that refused, in the message
    try:
        made = optimizer_factory([{"params": [nn.Parameter(torch.zeros(1))], "name": "probe"}])
        if isinstance(made, torch.optim.Optimizer):
            built = "scheduler"  # before the call: a scheduler that refuses its settings is named
            made = scheduler_factory(made)
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError(f"the {built} refused its settings ({err}); fix --model.{built}.init_args.") from None
    except Exception:  # e.g. an optimizer that only accepts GPU parameters: it is checked when it is built
        return
    schedulers = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    if not isinstance(made, torch.optim.Optimizer if built == "optimizer" else schedulers):
        raise ConfigError(f"--model.{built} built a value of type {type(made).__name__}, not {FACTORIES[built][0]}; "
                          f"give a class_path such as {FACTORIES[built][1]}.")  # fmt: skip


def check_factory_classes(model: Mapping[str, Any]) -> None:
    """Refuse an optimizer or scheduler ``class_path`` naming a class that builds no working one, before it is built.

    torch's base classes build an optimizer that cannot step and a schedule with no rate, and a class of another kind
    builds no optimizer: each ended in a traceback once the run's folder existed. A function named there is a factory
    jsonargparse calls with its ``init_args``; what it gives is checked as the model is built (`check_factories`).
    The run's check phase (`vitlit.checks.check_run`) calls this on the parsed config.
    """
    lr_scheduler = torch.optim.lr_scheduler
    kinds = {"optimizer": (torch.optim.Optimizer, (torch.optim.Optimizer,), "torch.optim.Optimizer"),
             "scheduler": (lr_scheduler.LRScheduler, (lr_scheduler.LRScheduler, getattr(lr_scheduler, "_LRScheduler",
                           None)), "torch.optim.lr_scheduler.LRScheduler")}  # fmt: skip
    for key, (base, bare, base_name) in kinds.items():
        spec = model.get(key)
        path = spec.get("class_path") if hasattr(spec, "get") else None
        if not isinstance(path, str):  # the model's own default, or a callable given in Python
            continue
        module, _, name = path.rpartition(".")
        try:
            target = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):  # jsonargparse refused it when it parsed
            continue
        if isinstance(target, type) and (not issubclass(target, base) or target in bare):
            raise ConfigError(f"--model.{key}.class_path {shown(path)} is no {key} class (a subclass of {base_name}, "
                              f"not the base itself); give one such as {FACTORIES[key][1]}.")  # fmt: skip


# The run's length, which the schedule above and the parts that follow the run's progress read.


def total_steps(trainer: Trainer) -> int | None:
    """The run's number of optimizer steps, or ``None`` when neither ``max_epochs`` nor ``max_steps`` bounds it."""
    total = trainer.estimated_stepping_batches
    return None if math.isinf(total) else int(total)


def schedule_of(trainer: Trainer) -> Any:
    """The run's (first) learning-rate schedule, or ``None``."""
    return trainer.lr_scheduler_configs[0].scheduler if trainer.lr_scheduler_configs else None


def planned_steps(trainer: Trainer) -> int | None:
    """The run's planned length: its schedule's ``total_steps`` (a time budget re-sizes it), else `total_steps`."""
    return getattr(schedule_of(trainer), "total_steps", None) or total_steps(trainer)


def steps_per_epoch(trainer: Trainer) -> int | None:
    """Optimizer steps in one training epoch as Lightning takes them; ``None`` for an epoch of unknown length.

    An epoch's last, partly accumulated batches make a step too: ``ceil(batches / accumulate_grad_batches)``.
    """
    batches = trainer.num_training_batches
    return None if math.isinf(batches) else max(1, math.ceil(int(batches) / max(1, trainer.accumulate_grad_batches)))


def length_reached(trainer: Trainer, epochs_done: int) -> bool:
    """Whether ``--trainer.max_epochs`` or ``--trainer.max_steps`` ends the fit after ``epochs_done`` whole epochs.

    The steps are those taken so far; -1 means no limit for either.
    """
    by_epochs = trainer.max_epochs not in (None, -1) and epochs_done >= trainer.max_epochs
    return by_epochs or (trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps)


def training_progress(trainer: Trainer) -> float:
    """Fraction of the run's planned optimizer steps done (`planned_steps`), in [0, 1]; 0 for a run without a length."""
    total = planned_steps(trainer)
    return 0.0 if total is None else min(1.0, trainer.global_step / max(1, total))


def is_logged_step(trainer: Trainer, before_step: bool = False) -> bool:
    """Whether Lightning writes this optimizer step's logged values (every ``--trainer.log_every_n_steps`` steps).

    ``before_step``: asked before the step (clipping), else after it (``on_train_batch_end``). A value logged on the
    other steps is dropped unread, so a per-step value that costs work is logged at these steps only.
    """
    return (trainer.global_step + before_step) % trainer.log_every_n_steps == 0


def fit_to_run(scheduler: Any, trainer: Trainer) -> None:
    """Give a schedule whose ``total_steps`` is ``None`` the run's length, or refuse a run that sets no end.

    A run that sets no end under a time budget, which sizes the schedule from the run's pace, is not refused.

    Through the schedule's ``set_total_steps`` where it has one, which may say how it resolved a warmup share.
    """
    if getattr(scheduler, "total_steps", 0) is not None:
        return
    total = total_steps(trainer)
    # A time budget (`vitlit.runs.budget.TimeBudget`) sizes the schedule from the run's first steps: until then a
    # run that sets no end holds the peak (or the warmup's start) over a length no run reaches, said nowhere.
    sized = total is None and any(getattr(callback, "sizes_schedule", False) for callback in trainer.callbacks)
    total = UNBOUNDED_STEPS if sized else total
    if total is None:
        raise ConfigError(f"the learning-rate schedule needs the run's length, but max_epochs={trainer.max_epochs} and "
                          f"max_steps={trainer.max_steps} set no end (-1 means no limit); give --trainer.max_epochs or "
                          f"--trainer.max_steps a positive value.")  # fmt: skip
    set_total, note = getattr(scheduler, "set_total_steps", None), None
    # A fast_dev_run (a batch or a few) checks that the code runs, not that it learns: no warmup refused.
    if callable(set_total) and not trainer.fast_dev_run:
        note = set_total(total)
    else:
        scheduler.total_steps = total
    # A resumed run's schedule is replaced by the checkpoint's (the runs part says so if its length differs).
    if note and not sized and trainer.is_global_zero and trainer.ckpt_path is None:
        say(f"vitlit: {note}", error=True)
