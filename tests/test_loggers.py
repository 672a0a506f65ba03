"""The loggers users expect, offline: CSV, MLflow (a local database) and W&B (offline mode, where installed).

Whatever the logger, the run keeps its folder (config, checkpoints, run card), and the run card names the logger's
own run, so the two can be matched.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import time
from pathlib import Path

import pytest
import yaml
from helpers.cli import DIGITS_CONFIG, run_cli

SHORT = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1"]


def _fit(digits: Path, root: Path, *logger: str):
    return run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits, *SHORT, "--trainer.default_root_dir", root,
                   *logger)  # fmt: skip


def _card(fit) -> dict:
    return json.loads((Path(fit.trainer.log_dir) / "run_card.json").read_text())


def test_a_fit_takes_the_version_its_logger_names_and_refuses_one_taken(
    tmp_path: Path, digits_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A logger's ``version`` was replaced by the next version_N without a word (sixteenth session's read)."""
    from helpers.cli import refused

    named = ["--trainer.logger.class_path", "TensorBoardLogger", "--trainer.logger.init_args.version", "baseline",
             "--trainer.logger.init_args.save_dir", tmp_path]  # fmt: skip
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.max_epochs", "1",
                  "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1", *named)  # fmt: skip
    run = tmp_path / "lightning_logs" / "baseline"
    assert Path(fit.trainer.log_dir) == run and (run / "checkpoints" / "last.ckpt").is_file()
    before = sorted(p.name for p in run.iterdir())
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, *named)
    assert f"{run} exists" in line and "--ckpt_path" in line and sorted(p.name for p in run.iterdir()) == before


def test_a_named_run_resumed_from_an_earlier_checkpoint_goes_beside_it_and_its_config_names_the_file_absolute(
    tmp_path: Path, few_digits_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume from a checkpoint older than the run's last.ckpt goes into a new folder beside the run: for a run
    named by its logger's version that was refused as "names an earlier run" (a review's). And a relative --ckpt_path
    was saved as typed, so the saved config, run from another folder, resumed that folder's run (a review's)."""
    import shutil

    monkeypatch.chdir(tmp_path)
    named = ["--trainer.logger.class_path", "TensorBoardLogger", "--trainer.logger.init_args.version", "baseline",
             "--trainer.logger.init_args.save_dir", tmp_path, "--data.root", few_digits_dir,
             "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1"]  # fmt: skip
    run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "1", *named)
    run = tmp_path / "lightning_logs" / "baseline"
    shutil.copy(run / "checkpoints" / "last.ckpt", run / "checkpoints" / "early.ckpt")  # its state after one epoch
    run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "2", *named, "--ckpt_path", "last")
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    beside = run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "2", *named,
                     "--ckpt_path", "lightning_logs/baseline/checkpoints/early.ckpt")  # fmt: skip
    assert Path(beside.trainer.log_dir).parent == run.parent and Path(beside.trainer.log_dir) != run
    assert beside.trainer.global_step == 2 and {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    saved = yaml.safe_load((Path(beside.trainer.log_dir) / "config.yaml").read_text())
    assert saved["ckpt_path"] == str(run / "checkpoints" / "early.ckpt")
    # Its own config, which names "baseline" and early.ckpt, goes beside again (it was refused as "baseline exists").
    again = run_cli("fit", "--config", Path(beside.trainer.log_dir) / "config.yaml", "--trainer.max_epochs", "2")
    assert Path(again.trainer.log_dir).parent == run.parent and again.trainer.global_step == 2
    # A name typed for it is its folder's (it was dropped for a number while the saved config kept the name).
    branch = run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "2", *named[:3], "branch", *named[4:],
                     "--ckpt_path", "lightning_logs/baseline/checkpoints/early.ckpt")  # fmt: skip
    assert Path(branch.trainer.log_dir) == run.parent / "branch"


@pytest.mark.slow  # a fit (or a fresh process): the default suite stays within its time
def test_csv_logger_writes_the_metrics_into_the_run_folder(tmp_path: Path, digits_dir: Path) -> None:
    fit = _fit(digits_dir, tmp_path, "--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", tmp_path / "csv")
    run = Path(fit.trainer.log_dir)
    assert run == tmp_path / "csv" / "lightning_logs" / "version_0" and (run / "config.yaml").is_file()
    with (run / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/acc")]
    assert len(rows) == 2  # one validation per epoch
    assert _card(fit)["loggers"] == [{"logger": "CSVLogger", "name": "lightning_logs", "run": "0"}]


@pytest.mark.slow  # a fit (or a fresh process): the default suite stays within its time
def test_mlflow_logs_to_its_store_and_the_run_keeps_its_folder(tmp_path: Path, digits_dir: Path) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    fit = _fit(digits_dir, tmp_path, "--trainer.logger", "MLFlowLogger", "--trainer.logger.tracking_uri", store,
               "--trainer.logger.experiment_name", "digits")  # fmt: skip
    run = Path(fit.trainer.log_dir)  # the folder a TensorBoardLogger in front of MLflow gave the run
    assert run == tmp_path / "lightning_logs" / "version_0"
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    mlflow = _card(fit)["loggers"][1]
    assert mlflow["logger"] == "MLFlowLogger"
    history = MlflowClient(tracking_uri=store).get_metric_history(mlflow["run"], "val/acc")
    assert len(history) == 2 and 0 <= history[-1].value <= 1
    # Resuming with the run's own config continues the run, MLflow logger and all.
    resumed = run_cli("fit", "--config", run / "config.yaml", "--trainer.max_epochs", "3", "--ckpt_path", "last")
    assert Path(resumed.trainer.log_dir) == run


def test_wandb_offline_logs_beside_the_run(tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    fit = _fit(digits_dir, tmp_path, "--trainer.logger", "WandbLogger", "--trainer.logger.offline", "true",
               "--trainer.logger.save_dir", tmp_path / "wandb", "--trainer.logger.project", "digits")  # fmt: skip
    assert (Path(fit.trainer.log_dir) / "config.yaml").is_file()
    assert _card(fit)["loggers"][1]["logger"] == "WandbLogger" and list((tmp_path / "wandb").rglob("*.wandb"))


def test_a_logger_that_refuses_its_arguments_is_one_line(
    tmp_path: Path, digits_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("mlflow")
    with pytest.raises(SystemExit) as exit_info:
        _fit(digits_dir, tmp_path, "--trainer.logger", "MLFlowLogger", "--trainer.logger.tracking_uri", "foo://bar")
    err = capsys.readouterr().err.strip().splitlines()
    # One line naming the logger and the value; the words between are MLflow's or jsonargparse's, which change with
    # the versions an install resolves (issue 45: mlflow-skinny 3.18 through jsonargparse's Union report).
    assert exit_info.value.code == 2 and len(err) == 1 and err[0].startswith("vitlit: error:")
    assert "MLFlowLogger" in err[0] and "foo://bar" in err[0]
    assert not (tmp_path / "lightning_logs").exists()


@pytest.mark.parametrize("server", ["refusing", pytest.param("silent", marks=pytest.mark.slow)])
def test_an_unreachable_tracking_server_is_one_line_within_seconds(
    server: str, tmp_path: Path, digits_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36, class 4: 273 s of retries, five chained tracebacks and a locked run folder."""
    pytest.importorskip("mlflow")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        if server == "silent":
            listener.listen()  # connections are accepted by the kernel, and never answered
        uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(SystemExit) as exit_info:
            _fit(digits_dir, tmp_path, "--trainer.logger", "MLFlowLogger", "--trainer.logger.tracking_uri", uri)
        elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitlit: error:")]
    assert exit_info.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert f"MLFlowLogger cannot reach its service at {uri}" in lines[0]
    # A hang guard, ten times the 3 s (9 s: the silent server's connect timeout) of an idle machine: the retries
    # this replaced took 273 s.
    assert elapsed < (90 if server == "silent" else 30), elapsed
    assert not (tmp_path / "lightning_logs").exists()


def test_every_service_waits_seconds_not_minutes_unless_the_user_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46, class 9: an unreachable W&B took 124 s (the bounds covered MLflow only)."""
    from types import SimpleNamespace

    from vitlit.checks import reach_loggers

    for name in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "WANDB_INIT_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")  # the user's own setting stays
    reach_loggers(SimpleNamespace(loggers=[], is_global_zero=True))
    assert "WANDB_INIT_TIMEOUT" not in os.environ  # a run without a service's logger sets nothing
    reach_loggers(SimpleNamespace(loggers=[SimpleNamespace(experiment="a run")], is_global_zero=True))
    assert int(os.environ["WANDB_INIT_TIMEOUT"]) <= 30 and int(os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) <= 30
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3"


def test_a_logger_whose_service_dies_mid_run_is_one_line_with_the_resume_command(
    tmp_path: Path, digits_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 46, class 9: MLflow dying mid-run printed 10 chained tracebacks."""
    with pytest.raises(SystemExit) as stop:
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.max_epochs", "3",
                "--trainer.logger", "helpers.faults.DyingLogger", "--trainer.log_every_n_steps", "2",
                "--trainer.default_root_dir", tmp_path)  # fmt: skip
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitlit: error:")]
    assert stop.value.code == 1 and "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("vitlit: error: DyingLogger failed during the run ([Errno 111] Connection refused")
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert lines[0].endswith(f"--ckpt_path {last}") and last.is_file()
