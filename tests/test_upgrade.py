"""A run saved by vitlit 0.1 trains after scripts/upgrade_config.py (tests/data/config_v0.1.yaml: 0.1's own output)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import timm
import torch
import yaml
from helpers.cli import DIGITS_CONFIG, ROOT, carries, run_cli

from vitlit.model import ViTClassifier

sys.path.insert(0, str(ROOT / "scripts"))
import upgrade_config

OLD = Path(__file__).with_name("data") / "config_v0.1.yaml"  # 0.1's --print_config: digits + distill, nonfinite skip


@pytest.mark.part("transfer")  # 0.1's config distils
def test_a_0_1_config_upgrades_and_trains(tmp_path: Path, digits_dir: Path) -> None:
    config = tmp_path / "config.yaml"
    shutil.copy(OLD, config)
    upgrade_config.main([str(config)])
    assert (tmp_path / "config.yaml.old").read_text() == OLD.read_text()
    new = yaml.safe_load(config.read_text())
    assert upgrade_config.upgrade(new) == new  # idempotent
    text = config.read_text()
    assert "vitlit.monitor." not in text and "vitlit.runs.monitor.SpeedMonitor" in text and "nonfinite:" not in text
    assert "vitlit.runs.records.RunCard" in text and "DeviceData" not in text  # 0.4's defaults
    teacher = tmp_path / "teacher.pth"  # the saved config names timm's test_vit; its weights from a file (offline)
    torch.save(timm.create_model("test_vit", num_classes=10).state_dict(), teacher)
    cli = run_cli("fit", "--config", config, "--data.root", digits_dir, "--trainer.default_root_dir", tmp_path / "r",
                  "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
                  "--model.distillation.teacher_file", teacher)  # fmt: skip
    assert type(cli.model).__name__ == "DistilledViTClassifier" and cli.trainer.global_step == 2
    guards = [cb for cb in cli.trainer.callbacks if type(cb).__name__ == "NonFiniteGuard" and cb.active]
    assert [g.action for g in guards] == ["skip"]
    assert (Path(cli.trainer.log_dir) / "run_card.json").is_file()  # the runs part's callbacks are back


def test_a_0_2_config_upgrades_and_trains(tmp_path: Path, digits_dir: Path) -> None:
    # 0.2's --print_config of the digits recipe with the DDP config: callbacks the CLI replaced, modules renamed.
    config = tmp_path / "config.yaml"
    shutil.copy(Path(__file__).with_name("data") / "config_v0.2.yaml", config)
    upgrade_config.main([str(config)])
    text = config.read_text()
    for gone in ("RunFolders", "CheckedResume", "Preflight", "ResumableStop", "LogEveryEpoch", "runs.callbacks."):
        assert gone not in text, gone
    assert "vitlit.runs.ddp.StopTogetherOnSigterm" in text and "vitlit.runs.records.PredictionWriter" in text
    flags = ["--trainer.strategy", "auto", "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1"]
    cli = run_cli("fit", "--config", config, "--data.root", digits_dir, "--trainer.default_root_dir", tmp_path, *flags)
    assert cli.trainer.global_step == 2 and (Path(cli.trainer.log_dir) / "run_card.json").is_file()


def test_a_0_3_config_names_the_upgrade_and_trains_after_it(
    tmp_path: Path, digits_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.3 listed vitlit.fast.loader.DeviceData in every run's config; 0.4's data modules pick their source."""
    short = ["--trainer.max_steps", "1", "--trainer.limit_val_batches", "1"]
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, *short,
                  "--trainer.default_root_dir", tmp_path / "a")  # fmt: skip
    rng = "  - class_path: vitlit.runs.checkpoint_io.RNGStateCheckpoint"
    text = (Path(fit.trainer.log_dir) / "config.yaml").read_text()
    assert rng in text
    config = tmp_path / "config.yaml"
    config.write_text(text.replace(rng, f"  - class_path: vitlit.fast.loader.DeviceData\n{rng}"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        run_cli("fit", "--config", config, "--trainer.default_root_dir", tmp_path / "b")
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1, err
    carries(err[0], "vitlit.fast.loader.DeviceData", "scripts/upgrade_config.py")
    upgrade_config.main([str(config)])
    assert "DeviceData" not in config.read_text()
    assert run_cli("fit", "--config", config, "--trainer.default_root_dir", tmp_path / "b").trainer.global_step == 1


def test_a_0_4_null_smoothing_becomes_the_0_1_it_trained_with(tmp_path: Path) -> None:
    """0.4 read ``label_smoothing: null`` as 0.1; 0.5 reads it as none, so the upgrade writes the 0.1 down."""
    config = {"model": {"class_path": "vitlit.model.ViTClassifier", "init_args": {"label_smoothing": None}}}
    assert upgrade_config.upgrade(config)["model"]["init_args"]["label_smoothing"] == 0.1
    custom = {"model": {"class_path": "vitlit.model.ViTClassifier",
                        "init_args": {"label_smoothing": None, "loss": {"class_path": "my.Focal"}}}}  # fmt: skip
    assert upgrade_config.upgrade(custom)["model"]["init_args"]["label_smoothing"] is None  # never smoothed
    assert ViTClassifier("test_vit", img_size=32, patch_size=4, label_smoothing=None).criterion.label_smoothing == 0


def test_a_0_5_config_names_the_renamed_options_and_upgrades(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 54, 3: on_device is source (memory|workers|auto) and vitlit.fast is vitlit.regularize in 0.6."""
    old = {"data": {"class_path": "vitlit.data.DigitsDataModule",
                    "init_args": {"on_device": True, "batch_augment": {
                        "class_path": "vitlit.fast.batch_augment.BatchAugment"}}}}  # fmt: skip
    new = upgrade_config.upgrade(old)["data"]["init_args"]
    assert new["source"] == "memory" and "on_device" not in new
    assert new["batch_augment"]["class_path"] == "vitlit.regularize.batch_augment.BatchAugment"
    assert upgrade_config.upgrade({"data": {"init_args": {"on_device": False}}})["data"]["init_args"] == {
        "source": "workers"
    }
    with pytest.raises(SystemExit) as stop:
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.on_device", "true", "--print_config")
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "--data.on_device is now --data.source" in err[0]


def test_a_config_naming_the_runs_modules_before_their_merge_trains_as_it_is(tmp_path: Path, digits_dir: Path) -> None:
    """Issue 74: run_card, logs and predictions are one module (records), resume is in checkpoint_io; a config saved
    before names the old modules and trains unchanged, and the upgrade writes the new paths."""
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.max_steps", "1",
                  "--trainer.limit_val_batches", "1", "--trainer.default_root_dir", tmp_path / "a")  # fmt: skip
    text = (Path(fit.trainer.log_dir) / "config.yaml").read_text()
    moved = {"records.RunCard": "run_card.RunCard", "records.SkippedImages": "logs.SkippedImages",
             "records.PredictionWriter": "predictions.PredictionWriter",
             "checkpoint_io.RNGStateCheckpoint": "resume.RNGStateCheckpoint"}  # fmt: skip
    for new, old in moved.items():
        assert f"class_path: vitlit.runs.{new}" in text, new
        text = text.replace(f"vitlit.runs.{new}", f"vitlit.runs.{old}")
    config = tmp_path / "config.yaml"
    config.write_text(text)
    again = run_cli("fit", "--config", config, "--trainer.default_root_dir", tmp_path / "b")
    assert again.trainer.global_step == 1 and (Path(again.trainer.log_dir) / "run_card.json").is_file()
    named = {type(cb).__name__ for cb in again.trainer.callbacks}
    assert {"NonFiniteGuard", "PredictionWriter", "RNGStateCheckpoint", "RunCard", "SkippedImages"} <= named, named
    upgrade_config.main([str(config)])
    assert all(f"vitlit.runs.{new}" in config.read_text() for new in moved)
