"""Exact resume: a run killed with SIGKILL and resumed from last.ckpt ends exactly where an uninterrupted one does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import CPU, ROOT, TINY_MODEL, run_cli

TINY_CONFIG = ROOT / "configs" / "cifar10_vit_tiny.yaml"
KILLER = """
trainer:
  callbacks+:
    - class_path: helpers.kill.KillAtEpoch
      init_args:
        epoch: 1
"""
# The recipe's randomness stays on (shuffling, crop, flip, AutoAugment, erasing, Mixup/CutMix, drop path); real
# image files, because the killed run is a fresh process (the CIFAR test files need this session's checksums).
FLAGS = """
    --trainer.max_epochs 2 --trainer.deterministic true --trainer.enable_progress_bar false
    --trainer.limit_train_batches 6 --trainer.limit_val_batches 3
    --data ImageFolderDataModule --data.num_workers 0 --data.batch_size 16 --data.persistent_workers false
""".split()


@pytest.mark.slow
def test_killed_and_resumed_run_equals_uninterrupted_run(tmp_path: Path, digits_dir: Path) -> None:
    killer = tmp_path / "kill.yaml"
    killer.write_text(KILLER)
    common = ["--config", TINY_CONFIG, "--config", killer, *CPU, *TINY_MODEL, *FLAGS, "--data.root", digits_dir]

    whole = run_cli("fit", *common, "--trainer.default_root_dir", tmp_path / "whole")

    tests_dir = str(ROOT / "tests")  # makes helpers.kill importable in the subprocess
    env = {
        **os.environ,
        "VITLIT_TEST_KILL": "1",
        "PYTHONPATH": os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "vitlit",
        "fit",
        *map(str, common),
        "--trainer.default_root_dir",
        str(tmp_path / "killed"),
    ]
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    run_dir = tmp_path / "killed" / "lightning_logs" / "version_0"
    last = run_dir / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["epoch"] == 0  # killed before epoch 1 trained

    resumed = run_cli("fit", "--config", run_dir / "config.yaml", "--ckpt_path", last)
    assert resumed.trainer.global_step == whole.trainer.global_step == 12
    resumed_state = resumed.model.state_dict()
    for key, value in whole.model.state_dict().items():
        torch.testing.assert_close(resumed_state[key], value, rtol=0, atol=0, msg=key)
    for name in ("val/loss", "val/acc"):
        assert float(resumed.trainer.callback_metrics[name]) == float(whole.trainer.callback_metrics[name])
