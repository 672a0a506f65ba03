"""The first hour of a new user: entry points, help, short runs that learn and log, quiet output."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers.cli import CPU, DIGITS_CONFIG, TINY_CONFIG, TINY_MODEL, run_cli, tiny_cifar_fit

import vitlit
from vitlit import ImageFolderDataModule
from vitlit.optim import WarmupCosineLR
from vitlit.runs.folders import read_scalars


def _digits_fit(digits: Path, root: Path) -> list[str]:
    return [
        "fit", "--config", str(TINY_CONFIG), *CPU, *TINY_MODEL, "--data", "ImageFolderDataModule",
        "--data.root", str(digits), "--data.num_workers", "0", "--trainer.fast_dev_run", "1",
        "--trainer.default_root_dir", str(root),
    ]  # fmt: skip


@pytest.mark.slow  # two fresh processes with a fit each: 21 s
def test_both_entry_points_exit_0_after_a_run(tmp_path: Path, digits_dir: Path) -> None:
    script = Path(sys.executable).parent / ("vitlit.exe" if os.name == "nt" else "vitlit")
    procs = [  # both at once: each new process spends most of its time importing
        subprocess.Popen([*command, *_digits_fit(digits_dir, tmp_path / name)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        for name, command in (("script", [str(script)]), ("module", [sys.executable, "-m", "vitlit"]))
    ]  # fmt: skip
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert "VitLitCLI object" not in out + err


def test_version_help_and_no_abbreviations(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli("--version")
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("vitlit 0.")
    with pytest.raises(SystemExit):
        run_cli("--help")
    listing = " ".join(capsys.readouterr().out.split())
    assert "never run on your" not in listing and "writes into <run>/test/version_K" in listing
    assert "More subcommands: env, export, serve, sweep" in listing  # the tools, beside LightningCLI's four
    with pytest.raises(SystemExit):
        run_cli("frobnicate")
    assert "'predict', 'env', 'export', 'serve', 'sweep')" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_cli("fit", "--help")
    ckpt_help = " ".join(capsys.readouterr().out.split("--ckpt_path CKPT_PATH")[-1].split())
    assert "``auto`` (resume from ``last`` if there is one" in ckpt_help and "three" not in ckpt_help
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", TINY_CONFIG, "--trainer.max_ep", "5", "--print_config")
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --trainer.max_ep" in capsys.readouterr().err


def test_a_warmup_longer_than_the_run_is_shortened_and_said(
    tmp_path: Path, cifar_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = tiny_cifar_fit(cifar_dir, tmp_path, "--trainer.max_epochs", "2")  # 16 steps; the recipe warms up 500
    assert "vitlit: warmup_steps=500 is more than 10% of this run's 16 optimizer steps; warming up for 1 steps" in (
        capsys.readouterr().err
    )
    schedule = cli.trainer.lr_scheduler_configs[0].scheduler
    assert schedule.warmup_steps == 1 and schedule.lr_factor(1) > 0.98  # the peak is reached, then the cosine
    scheduler = WarmupCosineLR(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), warmup_steps=20)
    assert scheduler.set_total_steps(1000) is None and scheduler.warmup_steps == 20  # 2%: left alone
    assert scheduler.get_last_lr() == [pytest.approx(1 / 20)]


def test_short_epochs_still_log_every_epoch(tmp_path: Path, cifar_dir: Path) -> None:
    cli = tiny_cifar_fit(cifar_dir, tmp_path, "--trainer.max_epochs", "3")  # 8 steps per epoch, log interval 50
    assert cli.trainer.log_every_n_steps == 8
    curves = read_scalars(cli.trainer.log_dir)
    assert [step for step, _ in curves["train/loss"]] == [7, 15, 23]
    assert "perf/images_per_sec" in curves and "lr-AdamW/decay" in curves


def test_workers_are_capped_at_the_cores(digits_dir: Path) -> None:
    data = ImageFolderDataModule(digits_dir, num_workers=64)
    assert data.workers == len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def test_calling_main_from_python_warns_nothing_about_sys_argv(tmp_path: Path, cifar_dir: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_cifar_fit(cifar_dir, tmp_path, "--trainer.fast_dev_run", "1")
    assert not [w for w in caught if "args parameter" in str(w.message)]


def test_version_answers_without_loading_torch() -> None:
    code = "import runpy, sys; sys.argv = ['vitlit', '--version']; runpy.run_module('vitlit', run_name='__main__')\n"
    code += "assert 'torch' not in sys.modules and 'lightning' not in sys.modules, 'loaded for --version'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"vitlit {vitlit.__version__}"


def test_a_run_starts_without_notes_nobody_can_act_on(
    tmp_path: Path, digits_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What a terminal would show: Lightning's log records, and warnings (which pytest would otherwise record).
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.fast_dev_run", "1",
                "--trainer.default_root_dir", tmp_path)  # fmt: skip
    assert "GPU available" in caplog.text  # Lightning's notes do reach the capture
    assert "litlogger" not in caplog.text
    assert not [w for w in caught if "LeafSpec" in str(w.message)]
