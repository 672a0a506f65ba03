"""Gradient accumulation: an epoch's optimizer steps counted as Lightning takes them, by every part that counts them.

With 18 batches an epoch and ``accumulate_grad_batches`` 4, Lightning steps 5 times (the last 2 batches make a step
too); three parts counted 4 (helper-11, fourteenth session): a resume's mid-epoch note, FreezeSchedule's check of an
unfreeze epoch against ``max_steps``, and the time budget's plan line.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.cli import DIGITS_CONFIG, refused, run_cli

from vitlit.optim import steps_per_epoch


def test_an_epochs_last_partly_accumulated_batches_make_a_step() -> None:
    epoch = SimpleNamespace(num_training_batches=18, accumulate_grad_batches=4)
    assert steps_per_epoch(epoch) == 5
    assert steps_per_epoch(SimpleNamespace(num_training_batches=16, accumulate_grad_batches=4)) == 4
    assert steps_per_epoch(SimpleNamespace(num_training_batches=float("inf"), accumulate_grad_batches=4)) is None


def test_a_resume_at_an_epochs_end_under_accumulation_is_not_called_mid_epoch(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 10 batches, accumulating 4: 3 steps an epoch (2 counted before: "1 of 2 steps" into epoch 1, not bit-identical).
    short = ["--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.limit_train_batches", "10",
             "--trainer.accumulate_grad_batches", "4", "--trainer.limit_val_batches", "1",
             "--trainer.default_root_dir", tmp_path]  # fmt: skip
    first = run_cli("fit", *short, "--trainer.max_epochs", "1")
    assert first.trainer.global_step == 3
    last = Path(first.trainer.log_dir) / "checkpoints" / "last.ckpt"
    resumed = run_cli("fit", *short, "--trainer.max_epochs", "2", "--ckpt_path", last)
    assert resumed.trainer.global_step == 6
    assert "resuming in the middle of epoch" not in capsys.readouterr().err


@pytest.mark.part("transfer")
def test_an_unfreeze_epoch_that_max_steps_never_reaches_is_refused_under_accumulation(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 18 batches of 64 digits, accumulating 4: 5 steps an epoch, so max_steps 10 ends in epoch 1 and never unfreezes
    # at epoch 2 (counted as 4 steps an epoch, the run seemed to end in epoch 2: it trained the head alone, unsaid).
    freeze = ["--trainer.callbacks+=vitlit.transfer.finetune.FreezeSchedule",
              "--trainer.callbacks.unfreeze_at_epochs=[2]", "--trainer.callbacks.blocks_per_stage", "2"]  # fmt: skip
    steps = ["--trainer.max_steps", "10", "--trainer.accumulate_grad_batches", "4"]
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, *steps, *freeze,
                   "--trainer.default_root_dir", tmp_path)  # fmt: skip
    assert "FreezeSchedule unfreezes at epoch 2, but --trainer.max_steps=10 ends the run in epoch 1 (5 steps" in line
