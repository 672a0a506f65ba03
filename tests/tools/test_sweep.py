"""vitlit sweep: Optuna trials as vitlit fits, a search space checked before the first trial, stop and continue."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import yaml
from helpers.cli import DIGITS_CONFIG, run_cli

from vitlit.errors import ConfigError
from vitlit.tools.sweep import nested, read_space

SPACE = {
    "model.optimizer.init_args.lr": {"type": "log_uniform", "low": 1.0e-3, "high": 1.0e-2},
    "model.drop_path_rate": {"type": "uniform", "low": 0.0, "high": 0.2},
    "data.batch_size": {"type": "int", "low": 32, "high": 64, "step": 32},
    "data.augment": {"type": "categorical", "choices": ["none", "trivialaugment"]},
}


def _space(tmp: Path, space: dict, **fixed: object) -> Path:
    path = tmp / "space.yaml"
    path.write_text(yaml.safe_dump({**space, "fixed": fixed} if fixed else space))
    return path


@pytest.mark.slow  # about 30 s: four short digits fits
def test_a_sweep_stopped_by_sigterm_continues_with_the_same_command(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixed = {
        "data.root": str(digits_dir), "data.source": "memory", "model.scheduler.init_args.warmup_steps": 0,
        "trainer.limit_train_batches": 3, "trainer.limit_val_batches": 1, "trainer.enable_progress_bar": False,
        "trainer.callbacks+": "helpers.kill.SigtermOnce", "trainer.callbacks.init_args.marker": str(tmp_path / "once"),
    }  # fmt: skip
    command = ["sweep", "--config", DIGITS_CONFIG, "--search", _space(tmp_path, SPACE, **fixed),
               "--n-trials", "3", "--root", tmp_path / "sweeps", "--max-epochs", "2"]  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        run_cli(*command)
    assert stop.value.code == 130 and "the same command continues it" in capsys.readouterr().err
    storage = f"sqlite:///{tmp_path / 'sweeps' / 'vitlit.db'}"
    states = [t.state for t in optuna.load_study(study_name="vitlit", storage=storage).trials]
    assert states == [optuna.trial.TrialState.FAIL]  # the stopped trial, recorded, not counted

    best = run_cli(*command)
    trials = optuna.load_study(study_name="vitlit", storage=storage).trials
    done = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert len(trials) == 4 and len(done) == 3
    assert set(best["params"]) == set(SPACE) and 0 <= best["value"] <= 1
    for trial in done:  # each trial in its own run folder, val/acc reported every epoch (the pruner's input)
        assert (Path(trial.user_attrs["run_root"]) / "lightning_logs" / "version_0" / "config.yaml").is_file()
        assert (
            sorted(trial.intermediate_values) == [0, 1] or trial.state
        )  # --max-epochs 2 == optuna.trial.TrialState.PRUNED
    out = capsys.readouterr().out
    assert "python -m vitlit fit --config" in out and "--model.optimizer.init_args.lr" in out
    assert "--trainer.max_epochs 2" in out  # issue 45: the trials' length, not the recipe's 40 epochs
    # The best config re-parses on top of the base recipe and trains.
    config = Path(best["best_config"])
    saved = yaml.safe_load(config.read_text())
    assert saved["model"]["optimizer"]["init_args"]["lr"] == pytest.approx(
        best["params"]["model.optimizer.init_args.lr"]
    )
    assert saved["trainer"]["max_epochs"] == 2
    fit = run_cli(
        "fit", "--config", DIGITS_CONFIG, "--config", config, "--data.root", digits_dir, "--trainer.max_epochs", "1",
        "--trainer.callbacks", "[]", "--trainer.limit_train_batches", "2", "--trainer.default_root_dir",
        tmp_path / "again",
    )  # fmt: skip
    assert fit.trainer.global_step == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "gaussian"}, "needs a type"),
        ({"type": "uniform", "low": 1.0, "high": 1.0}, "empty range"),
        ({"type": "int", "low": 1.5, "high": 4}, "as integers"),
        ({"type": "log_uniform", "low": 0.0, "high": 1.0}, "needs low > 0"),
        ({"type": "categorical", "choices": []}, "non-empty list"),
        ({"type": "uniform", "low": 0, "high": 1, "step": 0.1}, "does not take step"),
        ({"type": "uniform", "low": 0, "high": float("inf")}, "as finite numbers"),
        ({"type": "log_uniform", "low": float("nan"), "high": 1.0}, "as finite numbers"),
    ],
)
def test_bad_search_spaces_are_refused_in_one_line(spec: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        read_space(_space(tmp_path, {"model.drop_path_rate": spec}))


def test_an_unknown_key_stops_the_sweep_before_any_trial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = _space(tmp_path, {"model.dropout_rat": {"type": "uniform", "low": 0.0, "high": 0.5}})
    with pytest.raises(SystemExit) as stop:
        run_cli("sweep", "--config", DIGITS_CONFIG, "--search", space, "--root", tmp_path / "sweeps")
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.dropout_rat" in err[0] and err[0].startswith("vitlit: error:"), err
    assert not (tmp_path / "sweeps").exists()  # no study, no trial folder


def test_a_multi_process_base_config_is_refused_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A trial runs inside the sweep's process; DDP's launcher would start the sweep command again in its children.
    base = tmp_path / "digits_ddp.yaml"
    recipe = yaml.safe_load(DIGITS_CONFIG.read_text())
    recipe["trainer"].update(strategy="ddp", devices=2)
    base.write_text(yaml.safe_dump(recipe))
    space = _space(tmp_path, {"model.drop_path_rate": {"type": "uniform", "low": 0.0, "high": 0.2}})
    with pytest.raises(SystemExit) as stop:
        run_cli("sweep", "--config", base, "--search", space, "--root", tmp_path / "sweeps")
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trains in several processes (strategy=ddp, devices=2" in err[0], err
    assert not (tmp_path / "sweeps").exists()


@pytest.mark.parametrize(
    ("space", "said"),
    [
        ({"data.batch_size": {"type": "uniform", "low": 32, "high": 64}}, "data.batch_size"),  # an integer option
        (
            {"data.augment": {"type": "categorical", "choices": ["none", "trivialaugmnt", "autoaugment"]}},
            "trivialaugmnt",
        ),
    ],
    ids=["floats-for-an-integer", "a-middle-choice"],
)
def test_every_value_a_trial_may_take_is_checked_before_any_trial(
    space: dict, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the ends were parsed: every trial failed on batch_size 49.56 with Optuna's traceback, and a misspelt
    choice between two good ones failed its trials and the sweep exited 0."""
    with pytest.raises(SystemExit) as stop:
        run_cli("sweep", "--config", DIGITS_CONFIG, "--search", _space(tmp_path, space), "--root", tmp_path / "sweeps")
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and said in err[0] and "do not fit" in err[0], err
    assert not (tmp_path / "sweeps").exists()


def test_a_root_that_cannot_be_written_is_one_line_with_a_storage_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space = _space(tmp_path, {"model.drop_path_rate": {"type": "uniform", "low": 0.0, "high": 0.2}})
    (tmp_path / "afile").write_text("mine")
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    with pytest.raises(SystemExit) as stop:
        run_cli("sweep", "--config", DIGITS_CONFIG, "--search", space, "--root", tmp_path / "afile" / "sweeps",
                "--storage", storage)  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "--root" in err[0] and "afile" in err[0], err
    assert not (tmp_path / "study.db").exists()  # refused before the study was made


def test_machines_sharing_a_study_stop_when_it_holds_n_trials(digits_dir: Path, tmp_path: Path) -> None:
    """Each machine ran its own --n-trials on a shared study: 2 machines of --n-trials 2 made 4 trials."""
    from vitlit.tools.sweep import sweep

    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    fixed = {"data.root": str(digits_dir), "model.scheduler.init_args.warmup_steps": 0, "trainer.max_epochs": 1,
             "trainer.limit_train_batches": 1, "trainer.limit_val_batches": 1,
             "trainer.callbacks+": "helpers.sweeps.AnotherMachine",
             "trainer.callbacks.init_args.storage": storage}  # fmt: skip
    space = _space(tmp_path, {"model.drop_path_rate": {"type": "uniform", "low": 0.0, "high": 0.2}}, **fixed)
    sweep(str(DIGITS_CONFIG), str(space), n_trials=2, storage=storage, root=str(tmp_path / "sweeps"))
    states = [t.state.name for t in optuna.load_study(study_name="vitlit", storage=storage).trials]
    assert states == ["COMPLETE", "COMPLETE"], states  # this machine's first, and the other's, which ended meanwhile


def test_dotted_keys_become_a_nested_config() -> None:
    assert nested({"a.b.c": 1, "a.d": 2, "e": 3}) == {"a": {"b": {"c": 1}, "d": 2}, "e": 3}


@pytest.mark.parametrize("storage", ["sqlite:////proc/no/such/folder.db", "foo://bar"])
def test_a_storage_that_cannot_be_opened_is_one_line(
    storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space = _space(tmp_path, {"model.drop_path_rate": {"type": "uniform", "low": 0.0, "high": 0.2}})
    with pytest.raises(SystemExit) as stop:
        run_cli("sweep", "--config", DIGITS_CONFIG, "--search", space, "--root", tmp_path / "sweeps",
                "--storage", storage)  # fmt: skip
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"vitlit: error: --storage {storage} cannot be opened"), err
    assert not (tmp_path / "sweeps").exists()


@pytest.mark.slow  # about 40 s: a sweep killed in its first trial, then two short trials
@pytest.mark.posix  # SIGKILL, process groups, preexec_fn or /proc
def test_a_trial_whose_sweep_was_killed_does_not_stay_running(digits_dir: Path, tmp_path: Path) -> None:
    fixed = {"data.root": str(digits_dir), "model.scheduler.init_args.warmup_steps": 0,
             "trainer.max_epochs": 1, "trainer.limit_train_batches": 2,
             "trainer.limit_val_batches": 1, "trainer.callbacks+": "helpers.kill.KillAtEpoch",
             "trainer.callbacks.init_args.epoch": 0}  # fmt: skip
    command = [sys.executable, "-m", "vitlit", "sweep", "--config", str(DIGITS_CONFIG), "--search",
               str(_space(tmp_path, SPACE, **fixed)), "--n-trials", "2", "--root", str(tmp_path / "sweeps"),
               "--heartbeat", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}  # tests/: helpers
    killed = subprocess.run(command, env={**env, "VITLIT_TEST_KILL": "1"}, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    storage = f"sqlite:///{tmp_path / 'sweeps' / 'vitlit.db'}"
    assert [t.state.name for t in optuna.load_study(study_name="vitlit", storage=storage).trials] == ["RUNNING"]
    time.sleep(2.5)  # past the grace period of two heartbeats
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    states = [t.state.name for t in optuna.load_study(study_name="vitlit", storage=storage).trials]
    assert states[0] == "FAIL" and states.count("COMPLETE") == 2 and "RUNNING" not in states, states
    # A line per ended trial, with the best so far and an ETA until the last.
    lines = [line for line in done.stderr.splitlines() if line.startswith("vitlit: trial ")]
    assert len(lines) == 2 and "(1 of 2): val/acc " in lines[0] and "; best val/acc " in lines[0], lines
    assert "; ETA " in lines[0] and "(2 of 2)" in lines[1] and "ETA" not in lines[1]


def test_a_study_continues_only_the_sweep_that_made_it(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second sweep of another search space into the same root and study name ran no trial and reported the first
    sweep's best trial as its own, with its own --max_epochs (fifteenth session's read); and the pruner's warmup
    counted one epoch more than --prune_after."""
    from vitlit.tools.sweep import sweep

    warmups = []
    median = optuna.pruners.MedianPruner
    monkeypatch.setattr(
        optuna.pruners, "MedianPruner", lambda **kw: warmups.append(kw.get("n_warmup_steps")) or median(**kw)
    )
    fixed = {"data.root": str(digits_dir), "model.scheduler.init_args.warmup_steps": 0, "trainer.max_epochs": 1,
             "trainer.limit_train_batches": 1, "trainer.limit_val_batches": 1}  # fmt: skip
    (tmp_path / "first").mkdir()
    lr = {"model.optimizer.init_args.lr": {"type": "log_uniform", "low": 1.0e-3, "high": 1.0e-2}}
    sweep(str(DIGITS_CONFIG), str(_space(tmp_path / "first", lr, **fixed)), n_trials=1, root=str(tmp_path / "sweeps"),
          prune_after=3)  # fmt: skip
    assert warmups[0] == 2  # Optuna counts epochs from 0: a trial may be stopped after its third
    crlf = tmp_path / "digits.yaml"  # the same recipe as another checkout writes it, with a comment: the same sweep
    crlf.write_bytes(Path(DIGITS_CONFIG).read_bytes().replace(b"\n", b"\r\n") + b"# tuned on 2026-12-07\r\n")
    again = sweep(str(crlf), str(tmp_path / "first" / "space.yaml"), n_trials=1, root=str(tmp_path / "sweeps"))
    assert again["number"] == 0
    # A sweep an earlier vitlit began recorded the recipe as PyYAML reads it (2e-3 as text): it continues.
    storage = f"sqlite:///{tmp_path / 'sweeps' / 'vitlit.db'}"
    earlier = tmp_path / "earlier.yaml"
    earlier.write_text(Path(DIGITS_CONFIG).read_text().replace("lr: 2.0e-3", "lr: 2e-3"))
    recipe = json.dumps(yaml.safe_load(earlier.read_text()), sort_keys=True, default=str)
    study = optuna.load_study(study_name="vitlit", storage=storage)
    study.set_user_attr("vitlit_sweep", {**study.user_attrs["vitlit_sweep"],
                                         "config": hashlib.sha256(recipe.encode()).hexdigest()})  # fmt: skip
    assert sweep(str(earlier), str(tmp_path / "first" / "space.yaml"), n_trials=1, root=str(tmp_path / "sweeps"))
    other = _space(tmp_path, {"model.drop_path_rate": {"type": "uniform", "low": 0.0, "high": 0.2}}, **fixed)
    with pytest.raises(ConfigError, match="holds a sweep of another search space; give another --study_name"):
        sweep(str(DIGITS_CONFIG), str(other), n_trials=2, root=str(tmp_path / "sweeps"))
    assert len(optuna.load_study(study_name="vitlit", storage=storage).trials) == 1


def test_the_best_command_is_printed_with_its_credentials_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The best command went out through print(): a URL's password in the search file's values reached the terminal."""
    import vitlit.tools.sweep as sweep_module

    real_main = sweep_module.main
    trial = SimpleNamespace(trainer=SimpleNamespace(checkpoint_callback=SimpleNamespace(best_model_score=0.5)))
    # The search file's keys are checked by the real CLI; the trial's fit itself is not this test's (a fixed score).
    monkeypatch.setattr(sweep_module, "main", lambda args, **kw: real_main(args) if "--print_config" in args else trial)
    secret = "https://alice:S3cretT0ken99@example.com/runs"
    space = _space(tmp_path, {"model.drop_path_rate": {"type": "uniform", "low": 0.0, "high": 0.1}},
                   **{"trainer.default_root_dir": secret})  # fmt: skip
    best = sweep_module.sweep(str(DIGITS_CONFIG), str(space), n_trials=1, root=str(tmp_path / "sweeps"))
    out = capsys.readouterr().out
    assert best["value"] == 0.5 and "S3cretT0ken99" not in out
    assert len([line for line in out.splitlines() if line.startswith("python -m vitlit fit --config ")]) == 1, out
    assert "example.com/runs" in out and "(also as a config: --config " in out
