"""End-to-end runs through ``vitlit.cli.main``: every subcommand, both data modules, every recipe, real learning."""

from __future__ import annotations

import csv
import importlib
import re
from pathlib import Path

import pytest
import timm
import torch
import yaml
from helpers.cli import ALL_CONFIGS, CPU, DIGITS_CONFIG, TINY_CONFIG, TINY_MODEL, cifar_args, run_cli
from helpers.counting import calls_to

from vitlit.config import DEFAULTS
from vitlit.runs.curves import read_scalars


def _metrics(cli, *names: str) -> dict[str, float]:
    return {name: float(cli.trainer.callback_metrics[name]) for name in names}


def test_fit_then_validate_test_predict_on_cifar_files(tmp_path: Path, cifar_dir: Path) -> None:
    common = [
        "--config",
        TINY_CONFIG,
        *CPU,
        *TINY_MODEL,
        *cifar_args(cifar_dir),
        "--trainer.default_root_dir",
        tmp_path,
    ]
    fit = run_cli("fit", *common, "--trainer.max_epochs", "2")

    run_dir = tmp_path / "lightning_logs" / "version_0"
    assert Path(fit.trainer.log_dir) == run_dir
    assert (run_dir / "config.yaml").is_file() and (run_dir / "hparams.yaml").is_file()
    assert list(run_dir.glob("events.out.tfevents.*")), "no TensorBoard event file"
    last = run_dir / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["epoch"] == 1  # rewritten every epoch
    best = Path(fit.trainer.checkpoint_callback.best_model_path)
    assert best.parent == run_dir / "checkpoints"  # no sub-folder from the '/' in val/acc
    assert re.fullmatch(r"epoch\d{3}-val_acc\d\.\d{4}\.ckpt", best.name)
    # The data decided the model's classes and image size (argument links).
    assert fit.model.hparams.num_classes == 10 and fit.model.hparams.img_size == 32
    assert fit.datamodule.class_names[0] == "airplane"
    assert len(fit.datamodule.train_set) + len(fit.datamodule.val_set) == 80 and len(fit.datamodule.val_set) == 16

    # Reloading the last checkpoint reproduces the validation metrics of the end of training exactly.
    after_fit = _metrics(fit, "val/loss", "val/acc", "val/acc_top5")
    validate = run_cli("validate", *common, "--ckpt_path", last)
    assert _metrics(validate, "val/loss", "val/acc", "val/acc_top5") == pytest.approx(after_fit, abs=1e-6)

    test = run_cli("test", *common, "--ckpt_path", last)
    scores = _metrics(test, "test/acc", "test/acc_top5")
    assert 0.0 <= scores["test/acc"] <= scores["test/acc_top5"] <= 1.0

    predict = run_cli("predict", *common, "--ckpt_path", last)
    probs = torch.cat(predict.trainer.predict_loop.predictions)
    assert probs.shape == (24, 10)
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(24))
    with (Path(predict.trainer.log_dir) / "predictions.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 24 and rows[0]["predicted"] in fit.datamodule.class_names
    assert float(rows[5]["p_airplane"]) == pytest.approx(float(probs[5, 0]), abs=1e-6)


@pytest.mark.slow  # three runs; the default tests fit image folders in test_device_data, test_forking, test_predict
def test_image_folder_end_to_end(tmp_path: Path, digits_dir: Path) -> None:
    common = [
        "--config",
        TINY_CONFIG,
        *CPU,
        *TINY_MODEL,
        "--trainer.default_root_dir",
        tmp_path,
        "--data",
        "ImageFolderDataModule",
        "--data.root",
        digits_dir,
        "--data.img_size",
        "32",
        "--data.num_workers",
        "0",
        "--data.batch_size",
        "64",
    ]
    fit = run_cli(
        "fit",
        *common,
        "--trainer.max_epochs",
        "1",
        "--trainer.limit_train_batches",
        "3",
        "--trainer.limit_val_batches",
        "2",
    )
    assert fit.datamodule.class_names == [str(d) for d in range(10)]
    assert fit.model.hparams.num_classes == 10
    n_train = sum(1 for _ in (digits_dir / "train").rglob("*.png"))
    assert len(fit.datamodule.val_set) == round(0.1 * n_train)  # carved from train/ since there is no val/

    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    test = run_cli("test", *common, "--ckpt_path", last)
    assert "test/acc" in test.trainer.callback_metrics
    predict = run_cli("predict", *common, "--ckpt_path", last)
    n_test = sum(1 for _ in (digits_dir / "test").rglob("*.png"))
    probs = torch.cat(predict.trainer.predict_loop.predictions)
    assert probs.shape == (n_test, 10)
    with (Path(predict.trainer.log_dir) / "predictions.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == n_test
    row = rows[7]  # the image file, its predicted class name and the probability of that class
    assert Path(row["source"]).parent.parent == digits_dir / "test"
    assert row["predicted"] == str(int(probs[7].argmax()))
    assert float(row["confidence"]) == pytest.approx(float(probs[7].max()), abs=1e-6)


@pytest.mark.parametrize("config", ALL_CONFIGS, ids=[c.stem for c in ALL_CONFIGS])
def test_print_config_is_complete_and_reparses_to_the_same_config(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", config, "--trainer.max_epochs", "5", "--data.batch_size", "256", "--print_config")
    assert exit_info.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "max_epochs: 5" in printed and "batch_size: 256" in printed
    # The shared settings (src/vitlit/defaults.yaml) are part of it, every callback it names, the recipe's after them.
    shared = yaml.safe_load(DEFAULTS.read_text())["trainer"]["callbacks"]
    names = [c if isinstance(c, str) else c["class_path"] for c in shared]
    assert all(name in printed for name in names) and "filename: last" in printed and "action: stop" in printed
    saved = tmp_path / "my.yaml"
    saved.write_text(printed)
    with pytest.raises(SystemExit):
        run_cli("fit", "--config", saved, "--print_config")
    assert capsys.readouterr().out == printed  # every value survives the round trip (0.1 stays 0.1)


def test_a_subcommand_builds_its_own_parser_only_and_help_lists_them_all(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each subcommand's parser took a tenth of a second to build: a command builds the one it runs."""
    from lightning.pytorch.cli import LightningCLI

    for argv, parsers in ((["fit", "--config", DIGITS_CONFIG, "--print_config"], 2), (["--help"], 5)):
        with calls_to(monkeypatch, LightningCLI, "init_parser") as built, pytest.raises(SystemExit) as stop:
            run_cli(*argv)
        assert stop.value.code in (0, None) and len(built) == parsers  # the main parser and the subcommands'
    out = capsys.readouterr().out
    assert all(name in out for name in ("fit", "validate", "test", "predict")), out[-2000:]


def test_print_config_shows_what_the_digits_run_does(
    tmp_path: Path, digits_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 44: no value decided in code: the warmup, the data class and the smoothing printed are the run's."""
    args = ["fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.max_steps", "12",
            "--model.scheduler.init_args.warmup_steps", "5", "--trainer.limit_val_batches", "1",
            "--trainer.default_root_dir", tmp_path]  # fmt: skip
    with pytest.raises(SystemExit):
        run_cli(*args, "--print_config")
    printed = yaml.safe_load(capsys.readouterr().out)
    fit = run_cli(*args)
    module, _, name = printed["data"]["class_path"].rpartition(".")
    assert type(fit.datamodule) is getattr(importlib.import_module(module), name)  # the class named is the class run
    assert name == "DigitsDataModule" and fit.datamodule.root == digits_dir
    schedule = fit.model.lr_schedulers()
    assert schedule.warmup_steps == printed["model"]["init_args"]["scheduler"]["init_args"]["warmup_steps"] == 5
    assert fit.model.criterion.label_smoothing == printed["model"]["init_args"]["label_smoothing"] == 0.1
    saved = yaml.safe_load((Path(fit.trainer.log_dir) / "config.yaml").read_text())
    assert saved["data"]["class_path"] == printed["data"]["class_path"]  # saved as run, no class swapped in


def test_print_config_shows_the_pretrained_inputs_and_absolute_paths_the_run_saves(
    tmp_path: Path, digits_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 53, 3: --print_config runs the resolution the run runs: the weights' mean/std/interpolation/crop_pct
    (test_vit's pretrained config: 0.5, bicubic, 0.95) and absolute paths, as the saved config.yaml holds them."""
    weights = tmp_path / "w.pth"
    torch.save(timm.create_model("test_vit", img_size=32, patch_size=8).state_dict(), weights)
    monkeypatch.chdir(digits_dir.parent)
    args = [
        "fit",
        "--config",
        DIGITS_CONFIG,
        "--data.root",
        digits_dir.name,
        "--model.pretrained_file",
        weights,
        "--trainer.max_steps",
        "2",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.default_root_dir",
        tmp_path,
    ]
    with pytest.raises(SystemExit):
        run_cli(*args, "--print_config")
    printed = yaml.safe_load(capsys.readouterr().out)["data"]["init_args"]
    assert (printed["mean"], printed["std"]) == ([0.5] * 3, [0.5] * 3)
    assert (printed["interpolation"], printed["crop_pct"], printed["root"]) == ("bicubic", 0.95, str(digits_dir))
    saved = yaml.safe_load((Path(run_cli(*args).trainer.log_dir) / "config.yaml").read_text())["data"]["init_args"]
    assert {key: saved[key] for key in printed} == printed


def test_a_warmup_as_long_as_the_run_is_refused_before_training(
    tmp_path: Path, digits_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 44: the warmup is used as given (once cut silently to 10%); one the run never leaves is refused."""
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.max_steps", "72",
                "--model.scheduler.init_args.warmup_steps", "72", "--trainer.default_root_dir", tmp_path)  # fmt: skip
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert "warmup_steps=72 is not shorter than this run's 72 optimizer steps" in err
    assert not list(tmp_path.rglob("*.ckpt"))
    # A smoke run of the recipe checks that the code runs, not that it learns: not refused.
    smoke = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.fast_dev_run", "1",
                    "--model.scheduler.init_args.warmup_steps", "72",
                    "--trainer.default_root_dir", tmp_path)  # fmt: skip
    assert smoke.trainer.global_step == 1 and smoke.model.lr_schedulers().warmup_steps == 72


def test_resume_from_saved_config_and_last_checkpoint(tmp_path: Path, cifar_dir: Path) -> None:
    """The documented resume: ``fit --config <run>/config.yaml --ckpt_path <run>/checkpoints/last.ckpt``."""
    first = run_cli(
        "fit",
        "--config",
        TINY_CONFIG,
        *CPU,
        *TINY_MODEL,
        *cifar_args(cifar_dir),
        "--trainer.default_root_dir",
        tmp_path,
        "--trainer.max_epochs",
        "1",
    )
    run_dir = Path(first.trainer.log_dir)
    steps_per_epoch = first.trainer.global_step
    config_before = (run_dir / "config.yaml").read_bytes()
    resumed = run_cli(
        "fit",
        "--config",
        run_dir / "config.yaml",
        "--trainer.max_epochs",
        "2",
        "--ckpt_path",
        run_dir / "checkpoints" / "last.ckpt",
    )
    assert resumed.trainer.current_epoch == 2 and resumed.trainer.global_step == 2 * steps_per_epoch
    # The schedule continued rather than restarting, and keeps the length the checkpoint was written with.
    scheduler = resumed.model.lr_schedulers()
    assert scheduler.last_epoch == 2 * steps_per_epoch and scheduler.total_steps == steps_per_epoch
    # One run, one TensorBoard curve: the resumed part logs into the same version directory, next to its own config.
    assert Path(resumed.trainer.log_dir) == run_dir
    assert (run_dir / "config.yaml").read_bytes() == config_before
    assert "max_epochs: 2" in (run_dir / "config.resume-1.yaml").read_text()
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2
    val_steps = [step for step, _ in read_scalars(run_dir)["val/loss"]]
    assert val_steps == [steps_per_epoch - 1, 2 * steps_per_epoch - 1]  # one curve across the interruption
