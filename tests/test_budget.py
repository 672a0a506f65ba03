"""Train to a time budget (configs/addons/budget.yaml): the learning-rate schedule ends annealed with max_time."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch.callbacks.timer
import pytest
from helpers.cli import DIGITS_CONFIG, FEW_TOKENS, NO_WARMUP, ROOT, run_cli
from lightning.pytorch import Callback

from vitlit.cli import main

BUDGET = ROOT / "configs" / "addons" / "budget.yaml"


def _fit(digits: Path, root: Path, *extra: str):
    flags = ["--trainer.max_epochs", "1000", "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir"]
    return run_cli("fit", "--config", DIGITS_CONFIG, "--config", BUDGET, "--data.root", digits, *flags, root, *extra)


class Clock(Callback):
    """Lightning's Timer on a clock that moves ``per_step`` seconds a training step and stands still otherwise.

    A budget of seconds on the wall clock is as many steps as the machine's load allows (9 on a busy machine, where the
    test expected 40); on this clock it is the same steps everywhere. Validation and start-up take no time on it.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, per_step: float) -> None:
        self.now, self.per_step = 1000.0, per_step
        monkeypatch.setattr(lightning.pytorch.callbacks.timer, "time", SimpleNamespace(monotonic=lambda: self.now))

    def on_train_batch_start(self, *args: object) -> None:
        self.now += self.per_step


def _budgeted(digits: Path, root: Path, clock: Clock, budget: str, *extra: str):
    flags = ["fit", "--config", DIGITS_CONFIG, "--config", BUDGET, "--data.root", digits, "--trainer.max_epochs",
             "1000", "--trainer.max_time", budget, "--trainer.default_root_dir", root, *NO_WARMUP, *FEW_TOKENS,
             *extra]  # fmt: skip
    return main(flags, callbacks=[clock])


@pytest.mark.parametrize("every", ["5", "20"], ids=["estimates-every-5", "budget-shorter-than-every-n-steps"])
def test_a_budgeted_run_ends_with_the_budget_at_its_learning_rate_floor(
    every: str, digits_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: with max_epochs 1000 the schedule would still be at its peak when max_time stops the run.

    Issue 45: a budget of fewer steps than ``every_n_steps`` (10 s at 0.5 s a step: 20) ended at its peak as well.
    """
    clock = Clock(monkeypatch, per_step=0.5 if every == "20" else 0.2)
    fit = _budgeted(digits_dir, tmp_path, clock, "00:00:00:10", "--trainer.callbacks.every_n_steps", every)
    trainer = fit.trainer
    schedule, lr = trainer.lr_scheduler_configs[0].scheduler, trainer.optimizers[0].param_groups[0]["lr"]
    assert lr / schedule.base_lrs[0] < 0.1  # annealed (a cosine over 1000 epochs, cut: about 1.0)
    assert 0.5 * trainer.global_step <= schedule.total_steps <= 1.5 * trainer.global_step  # the plan was the run
    assert schedule.decay_fraction == 0.2  # the addon's warmup-stable-decay shape
    err = capsys.readouterr().err
    assert "vitlit: budget 0:00:10: about " in err and "the learning-rate schedule ends with it" in err
    assert re.search(r"vitlit: budget: 0:00:10 spent of 0:00:10; ended at step", err)
    whole = json.loads((Path(trainer.logger.log_dir) / "run_card.json").read_text())
    card = whole["time_budget"]
    assert card["budget_seconds"] == 10 and card["steps"] == trainer.global_step
    assert card["planned_steps"] == schedule.total_steps and card["end_lr_of_peak"] == pytest.approx(
        lr / schedule.base_lrs[0], abs=1e-4
    )
    # The card's schedule is the one the run took (the runs review's: it kept the 1000 epochs' plan).
    assert whole["resolved"]["planned_steps"] == schedule.total_steps
    assert whole["resolved"]["warmup_steps"] == schedule.warmup_steps
    if every == "5":  # its resume with more budget sizes the schedule again: no line says the old one is kept
        last = Path(trainer.logger.log_dir) / "checkpoints" / "last.ckpt"
        _budgeted(digits_dir, tmp_path, clock, "00:00:00:12", "--trainer.callbacks.every_n_steps", every,
                  "--ckpt_path", last)  # fmt: skip
        err = capsys.readouterr().err
        assert "with 0:00:02 of the budget left" in err and "schedule of the checkpoint's run" not in err, err[-2000:]


def test_a_budget_bounds_a_run_that_sets_no_end_of_its_own(
    digits_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--trainer.max_epochs -1`` with a budget: the time ends the run, and the budget sizes its schedule.

    It was refused: "the learning-rate schedule needs the run's length" (twenty-third session).
    """
    share = ["--model.scheduler.init_args.warmup_steps", "0.1"]  # resolved on the budget's plan, not on no end
    fit = _budgeted(digits_dir, tmp_path, Clock(monkeypatch, per_step=0.2), "00:00:00:10", "--trainer.max_epochs",
                    "-1", *share)  # fmt: skip
    trainer = fit.trainer
    schedule, lr = trainer.lr_scheduler_configs[0].scheduler, trainer.optimizers[0].param_groups[0]["lr"]
    assert trainer.max_epochs == -1 and lr / schedule.base_lrs[0] < 0.1  # annealed as the time ended
    assert 0.5 * trainer.global_step <= schedule.total_steps <= 1.5 * trainer.global_step
    assert 0 < schedule.warmup_steps <= 0.2 * schedule.total_steps  # a share of the plan, not of a billion steps
    err = capsys.readouterr().err
    assert "vitlit: budget 0:00:10: about " in err and "1,000,000,000" not in err and "000000000" not in err
    # The saved config's resolved lines are written before the budget's plan: none, not the stand-in length.
    saved = (Path(trainer.logger.log_dir) / "config.yaml").read_text()
    assert "# resolved planned_steps: null" in saved and "00000" not in saved
    card = json.loads((Path(trainer.logger.log_dir) / "run_card.json").read_text())
    assert card["resolved"]["planned_steps"] == schedule.total_steps  # the plan the run took, at its end


def test_the_budgets_closing_rate_is_each_groups_share_of_its_own_peak_under_layer_decay(
    digits_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Group 0 (the patch embedding, the smallest layer-decay scale) was read against the head's peak: every group
    # ended at 0.01 of its own peak, the card said 0.0013 (helper-11, fourteenth session).
    fit = _budgeted(digits_dir, tmp_path, Clock(monkeypatch, per_step=0.2), "00:00:00:10", "--model.layer_decay", "0.5")
    schedule, groups = fit.trainer.lr_scheduler_configs[0].scheduler, fit.trainer.optimizers[0].param_groups
    shares = [group["lr"] / peak for group, peak in zip(groups, schedule.base_lrs, strict=True)]
    assert len(set(schedule.base_lrs)) > 1 and max(shares) - min(shares) < 1e-9  # one share, peaks of their own
    card = json.loads((Path(fit.trainer.logger.log_dir) / "run_card.json").read_text())["time_budget"]
    assert card["end_lr_of_peak"] == pytest.approx(shares[0], abs=1e-4)


def test_a_budget_addon_without_a_budget_is_one_line(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _fit(digits_dir, tmp_path)
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vitlit: error:")]
    assert lines == ["vitlit: error: TimeBudget (configs/addons/budget.yaml) needs a budget: give --trainer.max_time, "
                     "e.g. 00:01:30:00 (DD:HH:MM:SS)."]  # fmt: skip
    assert not (tmp_path / "lightning_logs").exists()


def test_snapshots_are_spaced_on_the_budgets_plan(
    digits_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45: every 25% of a 1000-epoch plan is never, in a budget of about 48 steps."""
    clock = Clock(monkeypatch, per_step=0.2)
    fit = _budgeted(digits_dir, tmp_path, clock, "00:00:00:10", "--trainer.callbacks+=vitlit.runs.snapshots.Snapshots",
                    "--trainer.callbacks.every_fraction", "0.25", "--trainer.callbacks.keep", "-1")  # fmt: skip
    planned = fit.trainer.lr_scheduler_configs[0].scheduler.total_steps
    steps = sorted(int(p.stem[-7:]) for p in Path(fit.trainer.log_dir, "checkpoints").glob("snapshot-step*.ckpt"))
    assert len(steps) >= 3 and all(abs(s / planned - round(4 * s / planned) / 4) < 0.1 for s in steps), (steps, planned)


def test_the_erasing_ramp_follows_the_length_the_schedule_plans() -> None:
    """Issue 53, 3: a budget re-sizes the schedule; the random-erasing ramp (training_progress) reads that length."""
    from vitlit.optim import training_progress

    schedule = SimpleNamespace(scheduler=SimpleNamespace(total_steps=40))
    trainer = SimpleNamespace(lr_scheduler_configs=[schedule], estimated_stepping_batches=1000, global_step=20)
    assert training_progress(trainer) == 0.5  # the budget's 40 steps, not max_epochs' 1000
