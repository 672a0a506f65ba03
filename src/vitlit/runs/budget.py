"""Train to a time budget: the learning-rate schedule ends with ``--trainer.max_time``, annealed.

Lightning's ``Timer`` stops a run at ``max_time`` wherever a schedule sized by ``max_epochs`` happens to be, often at
a high learning rate, before the annealing that gives most of the final accuracy (Li et al., "Budgeted Training",
ICLR 2020: a schedule that decays to its floor over the budget beats a truncated one at every budget).
``configs/addons/budget.yaml`` adds `TimeBudget`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import Timer

from vitlit.config import Fraction, PositiveInt
from vitlit.errors import ConfigError
from vitlit.optim import schedule_of, steps_per_epoch, total_steps
from vitlit.runs.records import RunCard
from vitlit.text import say


class TimeBudget(Callback):
    """Size the learning-rate schedule (its ``total_steps``) to the time budget, and keep re-sizing it as the run goes.

    The pace is measured from the run's own steps, after the first one (start-up, compilation and the data source's
    first decode are not extrapolated) and including what every epoch costs besides its steps (validation,
    checkpoints). The schedule's length is set to the steps the rest of the budget holds at that pace once 1, 2, 4,
    8, ... steps are timed (a budget of a few steps still ends annealed), then every ``every_n_steps`` optimizer
    steps, so the learning rate reaches its floor as the budget ends. The addon gives
    `vitlit.optim.WarmupCosineLR` ``decay_fraction: 0.2``: at its peak until the last 20%, so that a new estimate
    moves where the decay starts, not the rate of the steps before it (a warmup given as a share follows the
    estimates until it has ended). The plan and how the budget was spent are
    said at the start and the end, and kept in the run card (``time_budget``). ``max_epochs``
    (or ``max_steps``) only bounds the run from above. A resumed run spends what is left of the budget (Lightning's
    Timer keeps the time spent in the checkpoint).

    Args:
        every_n_steps: Optimizer steps between two estimates.
        reserve: Share of the budget kept for what follows the last step (the last validation and checkpoint).
    """

    #: It sizes the schedule as the run goes: a resume's other length is not "kept" (`RNGStateCheckpoint` reads it).
    sizes_schedule = True

    def __init__(self, every_n_steps: PositiveInt = 20, reserve: Fraction = 0.03) -> None:
        self.every_n_steps, self.reserve = int(every_n_steps), float(reserve)
        self._timer: Timer | None = None
        self._start: tuple[float, int] | None = None  # (time spent, step) where the pace is measured from
        self._said, self._seen = False, 0

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
        if self._timer is None or self._timer.time_remaining() is None:
            raise ConfigError("TimeBudget (configs/addons/budget.yaml) needs a budget: give --trainer.max_time, "
                              "e.g. 00:01:30:00 (DD:HH:MM:SS).")  # fmt: skip
        if not hasattr(schedule_of(trainer), "total_steps"):
            raise ConfigError("TimeBudget sizes a schedule with total_steps (vitlit.optim.WarmupCosineLR); the "
                              "configured scheduler has none.")  # fmt: skip
        self._start, self._said, self._seen = None, False, trainer.global_step
        if trainer.ckpt_path is not None:
            _say(trainer, f"resumed with {_clock(self._timer.time_remaining())} of the budget left "
                          f"({_clock(self._timer.time_elapsed())} spent)")  # fmt: skip

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        step, timer = trainer.global_step, self._timer
        if timer is None or step == self._seen:  # not an optimizer step (accumulation), or seen
            return
        self._seen, spent = step, timer.time_elapsed()
        if self._start is None:
            self._start = (spent, step)
            return
        since, steps = spent - self._start[0], step - self._start[1]
        if since <= 0 or (step % self.every_n_steps and steps & (steps - 1)):  # 1, 2, 4, 8, ... steps, then every n
            return
        left = timer.time_remaining() - self.reserve * (spent + timer.time_remaining())
        planned = step + int(max(0.0, left) * steps / since)
        bound = total_steps(trainer)
        planned = int(trainer.strategy.broadcast(min(planned, bound) if bound else planned))  # one plan on all GPUs
        schedule, planned = schedule_of(trainer), max(planned, step + 1)
        note = None
        if callable(getattr(schedule, "set_total_steps", None)):
            note = schedule.set_total_steps(planned)  # WarmupCosineLR: a note if it ends inside the warmup
        else:
            schedule.total_steps = planned
        if not self._said:
            per_epoch = steps_per_epoch(trainer)
            epochs = f" ({planned / per_epoch:.1f} epochs)" if per_epoch else ""
            _say(trainer, f"budget {_clock(spent + timer.time_remaining())}: about {planned:,} optimizer "
                          f"steps{epochs}; the learning-rate schedule ends with it")  # fmt: skip
            if note:
                _say(trainer, note)
            self._said = True

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._timer is None:
            return
        schedule, lr = schedule_of(trainer), trainer.optimizers[0].param_groups[0]["lr"]
        peak = getattr(schedule, "base_lrs", [lr])[0]  # the first group's own peak (layer decay gives each its own)
        spent, budget = self._timer.time_elapsed(), self._timer.time_elapsed() + (self._timer.time_remaining() or 0)
        _say(trainer, f"budget: {_clock(spent)} spent of {_clock(budget)}; ended at step {trainer.global_step:,} of "
                      f"{schedule.total_steps:,} planned, the learning rate at {lr / peak:.3f} of its peak (floor "
                      f"{getattr(schedule, 'min_lr_ratio', 0):g})")  # fmt: skip
        card = next((c.card for c in trainer.callbacks if isinstance(c, RunCard) and c.card), None)
        if card is not None:  # RunCard writes it when the fit ends, after this hook
            # The schedule the run took is this one, sized here after the card first recorded the configured one.
            card.setdefault("resolved", {}).update(planned_steps=schedule.total_steps,
                                                   warmup_steps=getattr(schedule, "warmup_steps", None))  # fmt: skip
            card["time_budget"] = {"budget_seconds": round(budget, 1), "spent_seconds": round(spent, 1),
                                   "planned_steps": schedule.total_steps, "steps": trainer.global_step,
                                   "end_lr_of_peak": round(lr / peak, 4)}  # fmt: skip


def _clock(seconds: float | None) -> str:
    return str(timedelta(seconds=round(seconds or 0)))


def _say(trainer: Trainer, text: str) -> None:
    if trainer.is_global_zero:
        say(f"vitlit: {text}", error=True)
