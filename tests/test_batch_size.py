"""Small GPUs: Lightning's BatchSizeFinder on both data paths, and the memory benchmark in a tiny form."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest
from helpers.cli import DIGITS_CONFIG, ROOT, run_cli


# The DataLoader path goes with the slow tests: its batches come from the same data module, which many tests train.
@pytest.mark.parametrize(
    "on_device", [pytest.param("false", marks=pytest.mark.slow), "true"], ids=["dataloader", "on-device"]
)
def test_the_batch_size_finder_grows_the_batch_on_both_data_paths(
    on_device: str, digits_dir: Path, tmp_path: Path
) -> None:
    cli = run_cli(
        "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.on_device", on_device,
        "--trainer.callbacks+=BatchSizeFinder", "--trainer.callbacks.init_val", "8",
        "--trainer.callbacks.max_trials", "3", "--trainer.callbacks.steps_per_trial", "1",
        "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1", "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    assert cli.datamodule.batch_size == 32  # trials of 8, 16 and 32 images: every one fits on the CPU
    images, _ = next(iter(cli.trainer.train_dataloader))
    assert len(images) == 32


@pytest.mark.slow  # about 13 s: ViT-S/16 steps at 224 px with and without checkpointing
def test_memory_benchmark_prints_both_ratios(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--model", "test_vit", "--img-size", "32", "--batch-size", "4", "--steps", "1", "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", ["memory.py", *args])
    runpy.run_path(str(ROOT / "benchmarks" / "memory.py"), run_name="__main__")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"checkpointing memory ratio=\d+\.\d\d time ratio=\d+\.\d\d", last), last
