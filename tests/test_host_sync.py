"""No host read of a device value between logging steps: on a GPU each one would stall the queue of kernels."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.cli import TINY_MODEL, tiny_cifar_fit
from helpers.probes import HostReads
from lightning.pytorch.callbacks import RichProgressBar

from vitlit.runs import progress
from vitlit.runs.progress import EpochLines, ProgressBar


@pytest.fixture(autouse=True)
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a terminal, where the bar (not `EpochLines`) shows progress."""
    monkeypatch.setattr(progress, "on_terminal", lambda: True)


def test_training_steps_read_nothing_back_between_logging_steps(tmp_path: Path, cifar_dir: Path) -> None:
    # The tiny recipe as shipped (bf16-mixed standing in for 16-mixed, clipping, fused AdamW, NonFiniteGuard,
    # SpeedMonitor, the progress bar), steps 2 to 9 of a run that logs every 50 steps.
    cli = tiny_cifar_fit(
        cifar_dir, tmp_path, "--trainer.precision", "bf16-mixed", "--trainer.max_steps", "12",
        "--data.val_size", "8", "--data.source", "memory", "--data.augment", "none",
        "--trainer.callbacks+=helpers.probes.HostReads", *TINY_MODEL,
    )  # fmt: skip
    assert isinstance(cli.trainer.progress_bar_callback, ProgressBar)
    probe = next(cb for cb in cli.trainer.callbacks if isinstance(cb, HostReads))
    assert cli.trainer.global_step == 12
    assert probe.reads == []


def test_the_bar_shows_the_loss_read_at_logging_steps(tmp_path: Path, cifar_dir: Path) -> None:
    cli = tiny_cifar_fit(cifar_dir, tmp_path, "--trainer.max_steps", "5", "--trainer.log_every_n_steps", "2")
    bar = cli.trainer.progress_bar_callback
    assert type(bar) is ProgressBar and isinstance(bar, RichProgressBar)
    shown = bar.get_metrics(cli.trainer, cli.model)
    assert "v_num" not in shown and "train/loss" not in cli.trainer.progress_bar_metrics
    assert bar._read_at_step == 4  # the last logging step of the run


@pytest.mark.slow  # a fit (or a fresh process): the default suite stays within its time
def test_epoch_lines_read_nothing_back_between_epochs(
    tmp_path: Path, cifar_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: False)  # a log file, CI, a notebook
    cli = tiny_cifar_fit(
        cifar_dir, tmp_path, "--trainer.max_steps", "12", "--data.val_size", "8", "--data.source", "memory",
        "--data.augment", "none", "--trainer.callbacks+=helpers.probes.HostReads", *TINY_MODEL,
    )  # fmt: skip
    assert isinstance(cli.trainer.progress_bar_callback, EpochLines)
    assert next(cb for cb in cli.trainer.callbacks if isinstance(cb, HostReads)).reads == []
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]


def test_the_bar_follows_enable_progress_bar(tmp_path: Path, cifar_dir: Path) -> None:
    cli = tiny_cifar_fit(cifar_dir, tmp_path, "--trainer.fast_dev_run", "1", "--trainer.enable_progress_bar", "false")
    assert cli.trainer.progress_bar_callback is None
