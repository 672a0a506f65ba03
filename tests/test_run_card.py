"""The run card (vitlit.runs.records.RunCard): written by every fit, carried through a resume, completed by test."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.cli import DIGITS_CONFIG, ROOT, carries, run_cli
from helpers.shapes import write_shapes

from vitlit.runs.records import _near_chance

SHORT = [
    "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2", "--data.batch_size", "32",
]  # fmt: skip


def _fit(digits: Path, root: Path, *extra: object):
    return run_cli(
        "fit", "--config", DIGITS_CONFIG, "--data.root", digits, "--trainer.default_root_dir", root, *SHORT, *extra
    )


def _card(run_dir: Path) -> dict:
    return json.loads((run_dir / "run_card.json").read_text())


def test_a_fit_writes_its_card_and_a_test_of_its_checkpoint_completes_it(digits_dir: Path, tmp_path: Path) -> None:
    fit = _fit(digits_dir, tmp_path, "--trainer.max_epochs", "2", "--trainer.log_every_n_steps", "1")
    run = Path(fit.trainer.log_dir)
    card = _card(run)
    assert card["exit_reason"] == "finished" and card["epochs_done"] == 2
    best = fit.trainer.checkpoint_callback.best_model_score.item()
    assert card["best_val_acc"] == pytest.approx(best) and card["best_epoch"] in (0, 1)
    assert f"epoch{card['best_epoch']:03d}" in fit.trainer.checkpoint_callback.best_model_path
    assert card["precision"] == "32-true" and card["seed"] == 42 and card["model_name"] == "test_vit"
    assert card["versions"]["torch"] == torch.__version__ and card["device"]
    assert card["wall_seconds"] > 0 and card["run_dir"] == str(run) and card["effective_batch"] == 32
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # the suite runs from a checkout (CI: a fresh clone)
        assert card["git_commit"] == head.stdout.strip() and isinstance(card["git_dirty"], bool)
    assert card["test_acc"] is None
    # Issue 53, 3: what the options left to the run, as it took it: the source (digits fit in memory), the sizes,
    # the statistics and evaluation geometry in use (ImageNet's: an image folder has none of its own), the planned
    # length and the warmup it resolved to. The seed is the card's own field (above).
    data = fit.datamodule
    assert card["resolved"] == {
        "source": "memory", "source_option": "auto", "workers": 0, "stored_size": {"train": 32, "eval": 32},
        "mean": data.mean, "std": data.std, "statistics": "ImageNet's", "crop_pct": 1.0,
        "interpolation": "bilinear", "planned_steps": 8, "warmup_steps": 0,  # the tests' runs: no warmup
    }  # fmt: skip
    assert '# resolved source: "memory"' in (run / "config.yaml").read_text()  # the saved config says it too
    markdown = (run / "run_card.md").read_text()
    assert "| exit_reason | finished |" in markdown and f"| best_val_acc | {card['best_val_acc']} |" in markdown

    test = run_cli(
        "test", "--config", run / "config.yaml", "--ckpt_path", fit.trainer.checkpoint_callback.best_model_path
    )
    after = _card(run)
    assert after["test_acc"] == pytest.approx(test.trainer.callback_metrics["test/acc"].item())
    assert after["test_checkpoint"].startswith("epoch") and after["best_val_acc"] == card["best_val_acc"]
    assert f"| test_acc | {after['test_acc']} |" in (run / "run_card.md").read_text()
    # A test of a part of the split is not the run's test accuracy (fifteenth session's read: it replaced it).
    best = fit.trainer.checkpoint_callback.best_model_path
    run_cli("test", "--config", run / "config.yaml", "--ckpt_path", best, "--trainer.limit_test_batches", "1")
    assert _card(run) == after
    # Nor is a test of the same format on another folder: the card records the folder (it recorded the class alone).
    assert card["data"] == f"DigitsDataModule at {digits_dir.resolve()}"
    embedded = SimpleNamespace(root=None)  # a format of embedded images has no root: the class names it
    assert type(fit.datamodule).description.fget(embedded) == "SimpleNamespace"
    other = shutil.copytree(digits_dir, tmp_path / "other")
    run_cli("test", "--config", run / "config.yaml", "--ckpt_path", best, "--data.root", other)
    assert _card(run) == after
    # Nor is a test that prepares its images otherwise (a review's: the timm model card published it).
    run_cli("test", "--config", run / "config.yaml", "--ckpt_path", best, "--data.crop_pct", "0.5")
    assert _card(run) == after
    # Its resume keeps each file's test accuracy, with the file's stamp, but not the latest test's line, nor the
    # signal that stopped it (the runs review's: a finished run said SIGTERM, and last.ckpt's old accuracy).
    (run / "run_card.json").write_text(json.dumps({**after, "signal": "SIGTERM"}))
    run_cli("fit", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt",
            "--trainer.max_epochs", "3")  # fmt: skip
    resumed = _card(run)
    assert resumed["exit_reason"] == "finished" and "signal" not in resumed and "test_checkpoint" not in resumed
    assert resumed["test_acc"] is None and resumed["test_acc_by_checkpoint"] == after["test_acc_by_checkpoint"]


def test_a_card_has_the_speed_monitors_figure_and_the_files_modes_of_any_file(digits_dir: Path, tmp_path: Path) -> None:
    fit = _fit(digits_dir, tmp_path, "--trainer.max_epochs", "2", "--trainer.log_every_n_steps", "2",
               "--trainer.callbacks+=vitlit.runs.monitor.SpeedMonitor")  # fmt: skip
    run = Path(fit.trainer.log_dir)
    assert _card(run)["images_per_sec"] > 0
    umask = os.umask(0)
    os.umask(umask)
    for name in ("run_card.json", "run_card.md", "checkpoints/last.ckpt"):  # not mkstemp's owner-only 0600
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o666 & ~umask, name


@pytest.mark.slow  # two fits; with the other resume runs
def test_a_resumed_run_carries_its_card_on(digits_dir: Path, tmp_path: Path) -> None:
    stop = ["--trainer.callbacks+=helpers.probes.StopAfterEpoch", "--trainer.callbacks.init_args.epoch", "0"]
    first = _fit(digits_dir, tmp_path, "--trainer.max_epochs", "3", *stop)
    run = Path(first.trainer.log_dir)
    card = _card(run)
    assert card["exit_reason"] == "stopped" and card["epochs_done"] == 1
    resumed = run_cli("fit", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt")
    assert Path(resumed.trainer.log_dir) == run
    after = _card(run)
    assert after["exit_reason"] == "finished" and after["epochs_done"] == 3
    assert after["wall_seconds"] > card["wall_seconds"] and after["resumed_from"].endswith("last.ckpt")
    assert (run / "config.resume-1.yaml").is_file()


# vitlit's EarlyStop, with one of Lightning's options it passes on.
EARLY_STOP = ["--trainer.callbacks+=vitlit.runs.stopping.EarlyStop", "--trainer.callbacks.monitor", "val/loss",
              "--trainer.callbacks.mode", "min", "--trainer.callbacks.stopping_threshold", "100"]  # fmt: skip
POISON = ["--trainer.callbacks+=helpers.faults.PoisonBatch", "--trainer.callbacks.init_args.step", "2"]


@pytest.mark.parametrize(
    ("flags", "reason"), [(EARLY_STOP, "early stop"), (POISON, "TrainingHalted")], ids=["early-stop", "nan"]
)
def test_the_card_says_why_the_run_ended(flags: list[str], reason: str, digits_dir: Path, tmp_path: Path) -> None:
    try:
        _fit(digits_dir, tmp_path, "--trainer.max_epochs", "3", *flags)
    except SystemExit as stop:
        assert reason == "TrainingHalted" and stop.code == 1
    (run,) = (tmp_path / "lightning_logs").iterdir()
    assert _card(run)["exit_reason"] == reason


@pytest.mark.slow  # a fit, then the commands its summary prints
def test_a_fit_ends_with_a_summary_whose_commands_work(
    tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the paths printed are the ones to type here
    # A model that learned (0.59-0.72 val/acc over seeds 0-2), or the summary warns instead of offering commands.
    run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.max_epochs", "6",
            "--data.val_size", "64", "--model.patch_size", "16",
            "--model.scheduler.init_args.warmup_steps", "20")  # fmt: skip
    lines = capsys.readouterr().err.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("vitlit: fit finished after 6 epochs in"))
    block = dict(line.split(None, 1) for line in lines[start + 1 : start + 5])
    assert block["run"] == "folder  lightning_logs/version_0"
    assert block["best"].startswith("lightning_logs/version_0/checkpoints/epoch") and "val/acc 0." in block["best"]
    assert block["last"] == "lightning_logs/version_0/checkpoints/last.ckpt"
    test = block["next"].split()  # python -m vitlit test --config ... --ckpt_path ...
    assert test[:4] == ["python", "-m", "vitlit", "test"]
    assert 0 <= float(run_cli(*test[3:]).trainer.callback_metrics["test/acc"]) <= 1
    assert "export --ckpt_path lightning_logs/version_0/checkpoints/" in lines[start + 6]


def test_a_fast_dev_run_writes_no_card(tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.fast_dev_run", "1")
    assert not list(tmp_path.rglob("run_card.*"))


def test_git_dirty_counts_an_untracked_module_but_not_ignored_runs(tmp_path: Path) -> None:
    """Issue 44: a fork with a new, uncommitted module recorded ``git_dirty: false``."""
    from vitlit.runs.records import git_state

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)  # fmt: skip

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("/lightning_logs/\n")
    (tmp_path / "model.py").write_text("x = 1\n")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    (tmp_path / "lightning_logs").mkdir()
    (tmp_path / "lightning_logs" / "events").write_text("a run's output")
    assert git_state(tmp_path)["git_dirty"] is False  # ignored files are not code
    (tmp_path / "my_data.py").write_text("y = 2\n")
    assert git_state(tmp_path)["git_dirty"] is True


@pytest.mark.parametrize(
    ("best", "images", "classes", "warned"),
    [(0.50, 40, 3, True), (0.60, 40, 3, False), (0.15, 160, 10, True), (0.20, 160, 10, False)],
)
def test_near_chance_is_guessing_plus_three_standard_errors(best: float, images: int, classes: int, warned: bool):
    trainer = SimpleNamespace(lightning_module=SimpleNamespace(hparams={"num_classes": classes}),
                              val_dataloaders=SimpleNamespace(dataset=range(images)))  # fmt: skip
    assert (_near_chance({"best_val_acc": best}, trainer) is not None) is warned


def test_a_fit_that_learned_nothing_says_so_instead_of_offering_its_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45: 450 drawn shapes ended at chance with the README's line, and the summary read as a normal finish."""
    shapes = write_shapes(tmp_path / "shapes", per_class=40)
    run_cli("fit", "--config", DIGITS_CONFIG, "--data", "ImageFolderDataModule", "--data.root", shapes,
            "--trainer.max_epochs", "2", "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    err = capsys.readouterr().err
    warning = next(line for line in err.splitlines() if line.lstrip().startswith("warning"))
    carries(warning, "3 classes", "(0.33)")
    assert "configs/own_images.yaml" in warning and "python -m vitlit test" not in err
    # Issue 65, 3: a run of 2 epochs is first told to train longer, not to fetch weights from the hub.
    assert warning.index("more epochs (this run trained 2") < warning.index("configs/own_images.yaml"), warning


@pytest.mark.part("tools")
def test_the_timm_folder_quotes_a_test_accuracy_only_for_the_file_that_was_tested(tmp_path: Path) -> None:
    """A resume rewrites last.ckpt; the timm folder's README quoted the accuracy recorded under that name, the older
    model's (fourteenth session's read)."""
    from vitlit.runs.records import record_test
    from vitlit.tools.hf_folder import model_card
    from vitlit.trained import ModelCard

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "run_card.json").write_text(json.dumps({"seed": 0}))
    last = run / "checkpoints" / "last.ckpt"
    last.write_bytes(b"the tested model")
    record_test(last, 0.75)
    card = ModelCard("test_vit", ["a", "b"], 32, 3, [0.5] * 3, [0.5] * 3)
    assert "- test accuracy: 0.7500 (this checkpoint)" in model_card(card, run, "mit", "exported", last)
    resumed = last.with_name(".last.ckpt.tmp")  # a resume's save: a new file under the same name
    resumed.write_bytes(b"the resumed model")
    os.replace(resumed, last)
    os.utime(last, ns=(last.stat().st_atime_ns, last.stat().st_mtime_ns + 1))  # a coarse clock's same tick
    assert "- test accuracy: not measured for this checkpoint" in model_card(card, run, "mit", "exported", last)
