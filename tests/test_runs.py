"""Run folders: atomic allocation, resume never overwrites newer work, typed flags win, evaluation stays in its run."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.cli import (
    CPU,
    DIGITS_CONFIG,
    TINY_CONFIG,
    TINY_MODEL,
    carries,
    run_cli,
    tiny_cifar_fit,
    tree_digest,
    vitlit_command,
)
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vitlit.cli import VitLitCLI
from vitlit.errors import TrainingHalted
from vitlit.exits import STOP
from vitlit.run_dir import LOCK, Placed, allocate_version, checkpoint_times


@pytest.fixture(scope="module")
def two_epoch_run(tmp_path_factory: pytest.TempPathFactory, cifar_dir: Path) -> Path:
    """A finished two-epoch run whose best checkpoint is older than its last.ckpt."""
    root = tmp_path_factory.mktemp("two_epochs")
    tiny_cifar_fit(cifar_dir, root, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2")
    return root / "lightning_logs" / "version_0"


def _copy(run: Path, tmp_path: Path) -> Path:
    """A private copy of ``run`` (same layout: <root>/lightning_logs/version_0)."""
    target = tmp_path / "root" / "lightning_logs" / "version_0"
    shutil.copytree(run, target)
    return target


def test_versions_are_allocated_atomically_by_concurrent_allocators(tmp_path: Path) -> None:
    # Threads race for the same names as processes do: the exclusive mkdir is the file system's, not Python's.
    start = threading.Barrier(8)

    def allocate(_: int) -> int:
        start.wait()
        return allocate_version(tmp_path)

    with ThreadPoolExecutor(8) as pool:
        versions = list(pool.map(allocate, range(8)))
    assert sorted(versions) == list(range(8))


@pytest.mark.slow  # about 20 s: two digits fits in fresh processes at once
def test_two_fits_started_at_once_finish_in_their_own_folders(tmp_path: Path, digits_dir: Path) -> None:
    args = vitlit_command(
        "fit", "--config", TINY_CONFIG, "--trainer.accelerator", "cpu",
        "--trainer.precision", "32-true", "--model.model_name", "test_vit", "--model.patch_size", "8",
        "--data", "ImageFolderDataModule", "--data.root", digits_dir, "--data.num_workers", "0",
        "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    procs = [subprocess.Popen([str(a) for a in args], stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [proc.communicate(timeout=300)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [e[-1500:] for e in errors]
    runs = sorted((tmp_path / "lightning_logs").iterdir())
    assert [r.name for r in runs] == ["version_0", "version_1"]
    for run in runs:  # each has its own config, event file and checkpoints, nothing of the other's
        assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
        assert len(list(run.glob("events.out.tfevents.*"))) == 1


def test_a_refused_resume_leaves_the_run_as_it_was(
    tmp_path: Path, two_epoch_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resume refused once placed (no end to size the schedule to) left a config.resume-1.yaml and a new event file
    in the finished run (fifteenth session's read)."""
    from helpers.cli import refused

    run = _copy(two_epoch_run, tmp_path)
    before = tree_digest(run)
    line = refused(capsys, "fit", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt",
                   "--trainer.max_epochs", "-1")  # fmt: skip
    assert "max_epochs=-1 and max_steps=-1 set no end" in line and tree_digest(run) == before


@pytest.mark.posix
def test_a_fit_that_locks_a_lock_file_its_owner_just_removed_takes_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`unlock` removes the lock file: a fit that had opened it just before locked the removed file, and a third fit
    then locked a new one, so two fits held one run (fifteenth session's read)."""
    import fcntl

    from vitlit.errors import ConfigError
    from vitlit.run_dir import lock, unlock

    first, flock = lock(tmp_path), fcntl.flock

    def owner_leaves_first(fd: int, operation: int) -> None:  # between the second fit's open and its flock
        monkeypatch.setattr(fcntl, "flock", flock)
        unlock(tmp_path, first)
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", owner_leaves_first)
    second = lock(tmp_path)
    with pytest.raises(ConfigError, match="is in use by a fit of pid"):
        lock(tmp_path)
    unlock(tmp_path, second)


def test_a_refused_resume_removes_only_its_own_files_beside_the_config(tmp_path: Path) -> None:
    """What an evaluation of the run wrote meanwhile (``<run>/test/``) is not the refused resume's to remove (the
    fifteenth session's review of its own change)."""
    from vitlit.exits import discard

    (tmp_path / "config.yaml").write_text("seed_everything: 42\n")
    placed = Placed(tmp_path, None, (), frozenset(tmp_path.iterdir()))
    (tmp_path / "config.resume-1.yaml").write_text("seed_everything: 42\n")
    (tmp_path / "test" / "version_0").mkdir(parents=True)
    (tmp_path / "test" / "version_0" / "predictions.csv").write_text("file,class\n")
    discard(placed)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "config.yaml", "test", "test/version_0", "test/version_0/predictions.csv"]  # fmt: skip
    # A resume that saved a checkpoint before its error (an image damaged mid-run, a full disk) keeps its config and
    # curves: they say how that checkpoint was trained (the CLI read's: they were removed, the checkpoint kept).
    (tmp_path / "checkpoints").mkdir()
    last, best = tmp_path / "checkpoints" / "last.ckpt", tmp_path / "checkpoints" / "epoch5-best.ckpt"
    torch.save({"global_step": 16}, last)
    torch.save({"global_step": 100}, best)  # a later step than the one the resume starts from (a snapshot's)
    placed = Placed(tmp_path, None, (), frozenset(tmp_path.iterdir()), checkpoint_times(tmp_path), 16)
    (tmp_path / "config.resume-1.yaml").write_text("seed_everything: 42\n")
    torch.save({"global_step": 16}, last)  # Lightning's save on the way out, at the same step: nothing trained
    os.utime(last, ns=(1, 2))
    discard(placed)
    assert not (tmp_path / "config.resume-1.yaml").exists()
    (tmp_path / "config.resume-1.yaml").write_text("seed_everything: 42\n")
    torch.save({"global_step": 28}, last)  # the resume trained and saved
    os.utime(last, ns=(3, 4))
    discard(placed)
    assert (tmp_path / "config.resume-1.yaml").is_file()


def test_resuming_from_an_older_checkpoint_continues_in_a_new_run(
    tmp_path: Path, two_epoch_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(two_epoch_run, tmp_path)
    best = next((run / "checkpoints").glob("epoch000-*.ckpt"), None)
    if best is None:  # the first epoch was not the best: make an older checkpoint by hand
        best = run / "checkpoints" / "epoch000-old.ckpt"
        checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        torch.save({**checkpoint, "global_step": 2, "epoch": 0}, best)
    before = tree_digest(run)
    resumed = run_cli("fit", "--config", run / "config.yaml", "--ckpt_path", best, "--trainer.max_epochs", "2")
    assert tree_digest(run) == before  # last.ckpt (step 4) and everything else of the run untouched
    assert Path(resumed.trainer.log_dir) == run.parent / "version_1"
    assert resumed.trainer.global_step == 4
    err = capsys.readouterr().err
    assert f"vitlit: {best.name} is from step 2, but {run / 'checkpoints' / 'last.ckpt'} is from step 4" in err


def test_typed_flags_win_over_the_checkpoint_and_architecture_changes_are_refused(
    tmp_path: Path, two_epoch_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(two_epoch_run, tmp_path)
    last = run / "checkpoints" / "last.ckpt"
    knobs = ["--model.label_smoothing", "0.0", "--model.drop_path_rate", "0.3", "--trainer.max_epochs", "3"]
    resumed = run_cli("fit", "--config", run / "config.yaml", "--ckpt_path", last, *knobs)
    assert resumed.model.hparams.label_smoothing == 0.0 and resumed.model.criterion.label_smoothing == 0.0
    assert resumed.model.hparams.drop_path_rate == 0.3
    assert Path(resumed.trainer.log_dir) == run and resumed.trainer.current_epoch == 3

    before = tree_digest(run.parent.parent)
    for ckpt_path in (last, "last"):
        with pytest.raises(SystemExit) as exit_info:
            run_cli(
                "fit", "--config", run / "config.yaml", "--ckpt_path", ckpt_path,
                "--model.model_name", "vit_tiny_patch16_224", "--trainer.max_epochs", "4",
            )  # fmt: skip
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        # A checkpoint's path meets the checkpoint's own check; last takes only a run of this config (issue 55, 4).
        said = "the checkpoint was trained with model_name='test_vit'"
        if ckpt_path == "last":
            said = "--ckpt_path last: no run under"
        assert f"vitlit: error: {said}" in err and "'test_vit'" in err, err[-1000:]
        assert tree_digest(run.parent.parent) == before  # no config.resume-K.yaml, no event file, no new version


@pytest.mark.slow  # two fits in fresh folders
def test_a_resume_command_works_from_any_directory(
    tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative root, as a user's usually is: the saved config makes it absolute
    run_cli(
        "fit", "--config", TINY_CONFIG, *CPU, *TINY_MODEL, "--data", "ImageFolderDataModule", "--data.root", digits_dir,
        "--data.num_workers", "0", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
        "--trainer.limit_val_batches", "1", "--trainer.default_root_dir", "root",
    )  # fmt: skip
    run = tmp_path / "root" / "lightning_logs" / "version_0"
    assert f"default_root_dir: {tmp_path / 'root'}" in (run / "config.yaml").read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the printed resume command, run from another working directory
    run_cli(
        "fit", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt",
        "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
    )  # fmt: skip
    assert not any(elsewhere.iterdir())  # nothing started here
    assert torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["epoch"] == 1
    assert (run / "config.resume-1.yaml").is_file()


def test_evaluating_a_runs_checkpoint_writes_beside_it(tmp_path: Path, two_epoch_run: Path) -> None:
    run = _copy(two_epoch_run, tmp_path)
    before = tree_digest(run)
    last = run / "checkpoints" / "last.ckpt"
    for subcommand in ("test", "predict", "test"):
        run_cli(subcommand, "--config", run / "config.yaml", "--ckpt_path", last)
    # The training files stay as they were; only the run card gains the test accuracy.
    card = {"run_card.json", "run_card.md"}
    assert {k: v for k, v in tree_digest(run).items() if k in before and k not in card} == {
        k: v for k, v in before.items() if k not in card
    }
    assert json.loads((run / "run_card.json").read_text())["test_acc"] is not None
    assert (run / "predict" / "version_0" / "predictions.csv").is_file()
    assert sorted(p.name for p in (run / "test").iterdir()) == ["version_0", "version_1"]
    assert sorted(p.name for p in run.parent.iterdir()) == ["version_0"]  # no new training-run numbers


def _digits_fit(*args: object) -> list[str]:
    """``python -m vitlit fit`` of the digits recipe, a few quick steps per epoch, as a command line."""
    return vitlit_command("fit", "--config", DIGITS_CONFIG, "--model.patch_size", "16",
                          "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "1", *args)  # fmt: skip


def _file_size_limit(limit: int):
    """A preexec_fn: writes past ``limit`` bytes fail with EFBIG, as on a full disk (no signal kills the process)."""

    def apply() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
@pytest.mark.posix  # SIGKILL, process groups, preexec_fn or /proc
def test_a_full_disk_stops_with_one_line_and_keeps_the_checkpoints(tmp_path: Path, digits_dir: Path) -> None:
    common = ["--data.root", digits_dir, "--trainer.default_root_dir", tmp_path]
    first = subprocess.run(_digits_fit(*common, "--trainer.max_epochs", "1"), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    assert len(before) > 1_500_000  # weights and optimizer state: the resumed save below cannot fit
    # A real short write: torch.save's zip writer meets the failing write, as it would meet a full disk.
    resumed = subprocess.run(
        _digits_fit(*common, "--trainer.max_epochs", "3", "--ckpt_path", "last"),
        capture_output=True, text=True, preexec_fn=_file_size_limit(1_500_000),
    )  # fmt: skip
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    lines = [line for line in resumed.stderr.splitlines() if line.startswith("vitlit: error:")]
    assert len(lines) == 1 and "Traceback" not in resumed.stderr, resumed.stderr[-3000:]
    assert lines[0].startswith(f"vitlit: error: saving {last.parent}") and "GiB free" in lines[0], lines[0]
    carries(lines[0], "ulimit -f unlimited", "--trainer.default_root_dir")
    assert "free some" not in lines[0]  # freeing space does not lift a size limit
    assert last.read_bytes() == before
    assert not list(last.parent.glob(".*.tmp"))  # no partial file left


def test_disk_full_is_read_from_the_error_torch_raises() -> None:
    from vitlit.exits import disk_full

    try:  # what torch's zip writer raises while handling the OSError of a full disk
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") from None
    except RuntimeError as err:
        assert disk_full(err)[0] == "the disk is full"
    assert disk_full(RuntimeError("unexpected pos")) is None


@pytest.mark.slow
def test_a_second_fit_of_a_run_in_use_is_refused(tmp_path: Path, digits_dir: Path) -> None:
    common = ["--data.root", digits_dir, "--trainer.default_root_dir", tmp_path]
    assert subprocess.run(_digits_fit(*common, "--trainer.max_epochs", "1"), capture_output=True).returncode == 0
    run, go_on = tmp_path / "lightning_logs" / "version_0", tmp_path / "go-on"
    again = _digits_fit(*common, "--trainer.max_epochs", "2", "--ckpt_path", "auto")
    held = [*again, "--trainer.callbacks+=helpers.probes.WaitForFile", "--trainer.callbacks.path", go_on]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    with subprocess.Popen(held, stderr=subprocess.PIPE, text=True, env=env) as first:
        deadline = time.monotonic() + 120
        while not (run / LOCK).exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        with subprocess.Popen(again, stderr=subprocess.PIPE, text=True) as second:  # while the first trains
            second_err = second.communicate(timeout=300)[1]
        go_on.touch()
        first.communicate(timeout=600)
    assert second.returncode == 2, second_err[-3000:]
    line = second_err.strip().splitlines()[-1]
    assert line.startswith(f"vitlit: error: {run} is in use by a fit of pid {first.pid} on "), line
    assert first.returncode == 0 and not (run / LOCK).exists()
    # The refused one added nothing: no config of its own, no event file.
    assert sorted(p.name for p in run.glob("config*.yaml")) == ["config.resume-1.yaml", "config.yaml"]
    assert not [p for p in run.glob("events.out.tfevents.*") if p.name.split(".")[-2] == str(second.pid)]


@pytest.mark.slow
@pytest.mark.posix  # SIGKILL, process groups, preexec_fn or /proc
def test_a_run_killed_before_its_first_checkpoint_is_left_as_it_was(tmp_path: Path, digits_dir: Path) -> None:
    common = ["--data.root", digits_dir, "--trainer.default_root_dir", tmp_path, "--trainer.max_epochs", "1"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "VITLIT_TEST_KILL": "1"}
    killed = subprocess.run(_digits_fit(*common, "--trainer.callbacks+=helpers.kill.KillAtEpoch",
                                        "--trainer.callbacks.epoch", "0"), env=env, capture_output=True)  # fmt: skip
    assert killed.returncode == -9
    stale = tmp_path / "lightning_logs" / "version_0"
    before = tree_digest(stale)
    assert (stale / LOCK).is_file() and not list(stale.rglob("*.ckpt"))
    done = subprocess.run(_digits_fit(*common), capture_output=True, text=True)  # its lock died with it
    assert done.returncode == 0, done.stderr[-2000:]
    assert tree_digest(stale) == before  # another run's folder is never removed
    assert (tmp_path / "lightning_logs" / "version_1" / "checkpoints" / "last.ckpt").is_file()


def _stopped(err: BaseException, signal_name: str | None, run: Path | None = None) -> int:
    """What the CLI does with ``err`` leaving a fit that stopped in epoch 2, step 30: the exit status."""
    cli = VitLitCLI.__new__(VitLitCLI)  # the method alone: a CLI whose run stopped
    cli.run = Placed(run, None, (run,)) if run is not None else None
    cli.trainer = SimpleNamespace(interrupted=True, current_epoch=2, global_step=30, is_global_zero=True, callbacks=[])
    STOP.signal_name = signal_name
    with pytest.raises(SystemExit) as exit_info:
        cli._stopped(err)
    return exit_info.value.code


@pytest.mark.parametrize(
    ("error", "routed", "status"),
    [(SystemExit(1), "SIGINT", 130), (SIGTERMException(), None, 143), (SIGTERMException(), "SIGINT", 130),
     (SIGTERMException(), "SIGHUP", 129)],
    ids=["second-ctrl-c", "sigterm", "first-ctrl-c", "terminal-closed"],
)  # fmt: skip
def test_a_stopped_fit_says_one_line_and_exits_with_the_signals_status(
    error: BaseException, routed: str | None, status: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _stopped(error, routed) == status
    name = {130: "SIGINT", 143: "SIGTERM", 129: "SIGHUP"}[status]
    assert capsys.readouterr().err.splitlines() == [
        f"vitlit: interrupted by {name} at epoch 2, step 30; no checkpoint was written, so there is nothing to resume"
    ]
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert _stopped(error, routed, tmp_path) == status
    line = capsys.readouterr().err.strip()
    assert line.endswith(f"; resume with: python -m vitlit fit --config {tmp_path / 'config.yaml'} --ckpt_path "
                         f"{tmp_path / 'checkpoints' / 'last.ckpt'}")  # fmt: skip


def test_a_halted_fit_exits_with_status_1_and_the_guards_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert _stopped(TrainingHalted("the loss became NaN at step 3"), None) == 1
    assert capsys.readouterr().err.splitlines() == [
        "vitlit: error: the loss became NaN at step 3; no checkpoint was written, so there is nothing to resume"
    ]


def test_a_copied_run_folder_resumes_with_its_best_checkpoint_known(tmp_path: Path, digits_dir: Path) -> None:
    """A run folder copied elsewhere and resumed forgot its best checkpoint (the checkpoints name the old folder): the
    next validation became best however it scored, and the old best stayed beside it (sixteenth session's read)."""
    short = ["--data.root", digits_dir, "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
    fit = run_cli("fit", "--config", DIGITS_CONFIG, *short, "--trainer.max_epochs", "2",
                  "--trainer.default_root_dir", tmp_path / "first")  # fmt: skip
    copy = Path(shutil.copytree(fit.trainer.log_dir, tmp_path / "copied" / "version_0"))
    resumed = run_cli("fit", "--config", copy / "config.yaml", "--ckpt_path", copy / "checkpoints" / "last.ckpt",
                      "--trainer.max_epochs", "3")  # fmt: skip
    best = resumed.trainer.checkpoint_callback
    kept = sorted(p.name for p in (copy / "checkpoints").glob("epoch*.ckpt"))
    assert Path(best.best_model_path).parent == copy / "checkpoints" and len(kept) == 1, kept  # top 1 of 3 epochs
    assert Path(best.best_model_path).name == kept[0] and len(best.best_k_models) == 1


def test_a_resume_stopped_before_it_restored_its_step_says_to_run_the_same_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while a resume set up its data: the line named config.resume-1.yaml, which Lightning had not written
    yet ("config file ... does not exist" when pasted), and said step 0 of a checkpoint at step 7 (a review's); a
    config of the run's own would drop the flags typed (a longer run), and last.ckpt would not be the checkpoint
    resumed (a newer snapshot, a resume beside its run: a read of the mends)."""
    from lightning.pytorch.cli import SaveConfigCallback

    from vitlit.exits import STOP, stopped_line

    monkeypatch.setattr(STOP, "signal_name", None)  # Ctrl-C: not the signal an earlier test's fit left there
    (tmp_path / "checkpoints").mkdir()
    torch.save({"global_step": 7}, tmp_path / "checkpoints" / "snapshot-step0000007.ckpt")
    torch.save({"global_step": 6}, tmp_path / "checkpoints" / "last.ckpt")
    (tmp_path / "config.yaml").write_text("seed_everything: 42\n")
    saver = SaveConfigCallback.__new__(SaveConfigCallback)  # the resume's, placed: its file is not written yet
    saver.config_filename = "config.resume-1.yaml"
    resumed = tmp_path / "checkpoints" / "snapshot-step0000007.ckpt"
    trainer = SimpleNamespace(interrupted=True, current_epoch=0, global_step=0, callbacks=[saver])
    line, status = stopped_line(KeyboardInterrupt(), trainer, tmp_path, resumed, 7)
    assert status == 130 and line == (f"vitlit: interrupted by SIGINT before the resume from step 7 of {resumed} "
                                      f"began; run the same command again to resume")  # fmt: skip
    (tmp_path / "config.resume-1.yaml").write_text("seed_everything: 42\n")  # restored, and its config written
    trainer.global_step = 9
    line, _ = stopped_line(KeyboardInterrupt(), trainer, tmp_path, resumed, 7)
    assert "at epoch 0, step 9;" in line and f"--config {tmp_path / 'config.resume-1.yaml'} " in line


def test_a_resume_stopped_while_its_data_are_set_up_leaves_its_run_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each Ctrl-C during a resume's data setup left an events file in the run (or a folder beside it holding one),
    a run TensorBoard then showed (a read of the mends)."""
    from vitlit.data.base import ImageClassificationDataModule

    short = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "1", *short,
                  "--trainer.default_root_dir", tmp_path)  # fmt: skip
    run = Path(fit.trainer.log_dir)
    before = tree_digest(run)

    def interrupted(self: ImageClassificationDataModule, stage: str) -> None:
        raise KeyboardInterrupt  # Ctrl-C before Lightning listens for it: at once

    monkeypatch.setattr(ImageClassificationDataModule, "setup", interrupted)
    with pytest.raises(SystemExit) as stop:
        run_cli("fit", "--config", run / "config.yaml", "--trainer.max_epochs", "2", "--ckpt_path",
                run / "checkpoints" / "last.ckpt")  # fmt: skip
    assert stop.value.code == 130 and "before the resume from step 2 of" in capsys.readouterr().err
    assert tree_digest(run) == before


def test_the_resume_line_and_the_closing_commands_quote_a_path_with_spaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pasted, an unquoted path with a space was two arguments: "config file .../with does not exist" (the CLI
    read's)."""
    import shlex
    from types import SimpleNamespace

    from vitlit.exits import stopped_line

    run = tmp_path / "with space" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"saved")
    trainer = SimpleNamespace(interrupted=True, current_epoch=0, global_step=3, callbacks=[])
    line, status = stopped_line(KeyboardInterrupt(), trainer, run)
    assert status == 130 and shlex.split(line.split("resume with: ", 1)[1]) == [
        "python", "-m", "vitlit", "fit", "--config", str(run / "config.yaml"), "--ckpt_path",
        str(run / "checkpoints" / "last.ckpt")]  # fmt: skip
    from vitlit.runs.records import summary

    card = {"run_dir": str(run), "exit_reason": "finished", "epochs_done": 1, "wall_seconds": 1.0}
    trainer.checkpoint_callback, trainer.datamodule = None, SimpleNamespace(has_test_split=True)
    trainer.lightning_module, trainer.val_dataloaders = SimpleNamespace(hparams={"num_classes": 10}), None
    test = next(line for line in summary(card, trainer) if "vitlit test" in line).split("python ", 1)[1]
    assert shlex.split(test)[-4:] == [
        "--config",
        str(run / "config.yaml"),
        "--ckpt_path",
        str(run / "checkpoints" / "last.ckpt"),
    ]
    # Windows' cmd.exe takes single quotes as part of the name: double quotes there, and a plain path as it is.
    from vitlit.text import shell_word

    monkeypatch.setattr(os, "name", "nt")
    assert shell_word(r"C:\runs\version 0\config.yaml") == r'"C:\runs\version 0\config.yaml"'
    assert shell_word(r"C:\runs\config.yaml") == r"C:\runs\config.yaml"


def test_a_file_where_the_runs_go_is_refused_only_where_a_run_would_make_them(tmp_path: Path) -> None:
    """A fit without a logger writes into the root itself, an evaluation beside its run: a stray file named
    lightning_logs is in neither's way (the mends' read: both were refused)."""
    from vitlit.checks import check_run
    from vitlit.errors import ConfigError

    (tmp_path / "lightning_logs").write_text("")
    for subcommand, logger in (("fit", False), ("test", None)):
        check_run(subcommand, {"trainer": {"logger": logger, "default_root_dir": str(tmp_path)}, "ckpt_path": "x"})
    # A run copied from a machine whose folder cannot be made here is evaluated beside itself (the last read's).
    gone = {"trainer": {"default_root_dir": str(tmp_path / "lightning_logs" / "project")}, "ckpt_path": "x"}
    check_run("test", gone)
    with pytest.raises(ConfigError, match="which is a file; give a folder"):
        check_run("fit", gone)
    # Where a run's folder is made (a fit's, an evaluation's of no run): one line, not mkdir's traceback.
    for root in (tmp_path / "lightning_logs", tmp_path / "lightning_logs" / "below"):
        with pytest.raises(ConfigError, match="lightning_logs is a file, where the runs' folders go"):
            allocate_version(root)


@pytest.mark.part("tools")  # the export's model card
def test_a_run_config_with_a_value_yaml_cannot_read_is_read_as_none_not_a_traceback(tmp_path: Path) -> None:
    """PyYAML's constructors raise ValueError (a date out of range), not a YAMLError: a hand-edited run config ended
    a resume into another root, and an export's model card, in a traceback (the twenty-second session's read)."""
    from vitlit.run_dir import another_root
    from vitlit.tools.hf_folder import _data

    run = tmp_path / "lightning_logs" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("trainer:\n  default_root_dir: 2001-13-01\n")
    assert another_root(str(tmp_path / "elsewhere"), run / "checkpoints" / "last.ckpt", run)
    assert _data(run) == "- (the run's config.yaml was not found beside the checkpoint)"
