"""Train to a time budget (configs/addons/budget.yaml): the learning-rate schedule ends annealed with max_time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.cli import DIGITS_CONFIG, ROOT, run_cli

BUDGET = ROOT / "configs" / "addons" / "budget.yaml"


def _fit(digits: Path, root: Path, *extra: str):
    flags = ["--trainer.max_epochs", "1000", "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir"]
    return run_cli("fit", "--config", DIGITS_CONFIG, "--config", BUDGET, "--data.root", digits, *flags, root, *extra)


def test_a_budgeted_run_ends_with_the_budget_at_its_learning_rate_floor(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: with max_epochs 1000 the schedule would still be at its peak when max_time stops the run."""
    fit = _fit(digits_dir, tmp_path, "--trainer.max_time", "00:00:00:10", "--trainer.callbacks.every_n_steps", "5")
    trainer = fit.trainer
    schedule, lr = trainer.lr_scheduler_configs[0].scheduler, trainer.optimizers[0].param_groups[0]["lr"]
    # Annealed (a cosine over 1000 epochs, cut: about 1.0); on a busy machine the budget may end a step or two before
    # the plan, in the last 20% where the rate falls.
    assert lr / schedule.base_lrs[0] < 0.5
    assert 0.5 * trainer.global_step <= schedule.total_steps <= 1.5 * trainer.global_step  # the plan was the run
    assert schedule.decay_fraction == 0.2  # the addon's warmup-stable-decay shape
    err = capsys.readouterr().err
    assert "vitlit: budget 0:00:10: about " in err and "the learning-rate schedule ends with it" in err
    assert re.search(r"vitlit: budget: 0:00:1\d spent of 0:00:10; ended at step", err)
    card = json.loads((Path(trainer.logger.log_dir) / "run_card.json").read_text())["time_budget"]
    assert card["budget_seconds"] == 10 and card["steps"] == trainer.global_step
    assert card["planned_steps"] == schedule.total_steps and card["end_lr_of_peak"] == pytest.approx(
        lr / schedule.base_lrs[0], abs=1e-4
    )


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
