"""Exact resume: a run killed with SIGKILL and resumed from last.ckpt ends exactly where an uninterrupted one does."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
import torch
from helpers.cli import CPU, ROOT, TINY_CONFIG, TINY_MODEL, run_cli, tiny_cifar_fit, vitlit_command

KILLER = """
trainer:
  callbacks+:
    - class_path: helpers.kill.KillAtEpoch
      init_args:
        epoch: 1
"""


def _digits_run(digits: Path, epochs: int, train_batches: int, val_batches: int, *configs: Path) -> list[object]:
    """Arguments of a short run of the tiny recipe (plus ``configs``) on the digits folder, CPU, no progress bar.

    The recipe's randomness stays on (shuffling, crop, flip, AutoAugment, erasing, Mixup/CutMix, drop path). The
    data are real image files, because these runs happen in fresh processes, and the CIFAR test files need this
    session's checksums.
    """
    extra = [arg for config in configs for arg in ("--config", config)]
    return [
        "--config", TINY_CONFIG, *extra, *CPU, *TINY_MODEL,
        "--trainer.max_epochs", epochs, "--trainer.enable_progress_bar", "false",
        "--trainer.limit_train_batches", train_batches, "--trainer.limit_val_batches", val_batches,
        "--data", "ImageFolderDataModule", "--data.num_workers", "0", "--data.batch_size", "16",
        "--data.root", digits,
    ]  # fmt: skip


def _vitlit(*args: object) -> list[str]:
    """The command line of ``python -m vitlit`` with ``args``, for a fresh process."""
    return vitlit_command(*args)


def _env() -> dict[str, str]:
    """The environment of a killing subprocess: tests/ importable (helpers.kill) and VITLIT_TEST_KILL armed."""
    path = os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "VITLIT_TEST_KILL": "1"}


@dataclass
class Stopped:
    """A `python -m vitlit fit` that was killed or signalled in a fresh process."""

    returncode: int
    stderr: str
    common: list[object]  # its arguments after `fit`, without the root
    root: Path

    @property
    def run_dir(self) -> Path:
        return self.root / "lightning_logs" / "version_0"


def _killed(tmp: Path, digits: Path) -> Stopped:
    killer = tmp / "kill.yaml"
    killer.write_text(KILLER)
    exact = ["--trainer.deterministic", "true", "--data.persistent_workers", "false"]
    common = [*_digits_run(digits, 2, 6, 3, killer), *exact]
    done = subprocess.run(_vitlit("fit", *common, "--trainer.default_root_dir", tmp / "run"), env=_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    return Stopped(done.returncode, done.stderr, common, tmp / "run")


def _signalled(sig: signal.Signals, tmp: Path, digits: Path) -> Stopped:
    common = _digits_run(digits, 1000, 5, 2)
    root = tmp / "run"
    last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    command = _vitlit("fit", *common, "--trainer.default_root_dir", root)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        deadline = time.monotonic() + 400
        while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # wait for the end of the first epoch
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
    return Stopped(proc.returncode, err, common, root)


def _in_validation(tmp: Path, digits: Path) -> Stopped:
    interrupt = tmp / "interrupt.yaml"
    interrupt.write_text("trainer:\n  callbacks+:\n    - class_path: helpers.kill.SignalInValidation\n")
    common = _digits_run(digits, 3, 5, 3, interrupt)
    done = subprocess.run(_vitlit("fit", *common, "--trainer.default_root_dir", tmp / "run"), env=_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    return Stopped(done.returncode, done.stderr, common, tmp / "run")


def _dying_while_saving(tmp: Path, digits: Path) -> Stopped:
    dying = tmp / "dying.yaml"
    dying.write_text("trainer:\n  callbacks+:\n    - class_path: helpers.kill.DieWhileSavingLast\n")
    common = _digits_run(digits, 3, 4, 2, dying)
    command = _vitlit("fit", *common, "--trainer.default_root_dir", tmp / "run", "--ckpt_path", "auto")
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    return Stopped(done.returncode, done.stderr, common, tmp / "run")


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory, digits_dir: Path) -> Iterator[dict[str, Future[Stopped]]]:
    """The five runs that die or are stopped, started at once: each new process spends most of its time importing."""
    jobs = {
        "killed": partial(_killed),
        "SIGTERM": partial(_signalled, signal.SIGTERM),
        "SIGINT": partial(_signalled, signal.SIGINT),
        "in_validation": partial(_in_validation),
        "dying_while_saving": partial(_dying_while_saving),
    }
    with ThreadPoolExecutor(len(jobs)) as pool:
        yield {name: pool.submit(job, tmp_path_factory.mktemp(name), digits_dir) for name, job in jobs.items()}


@pytest.mark.slow
@pytest.mark.posix  # SIGKILL, process groups, preexec_fn or /proc
def test_killed_and_resumed_run_equals_uninterrupted_run(tmp_path: Path, stopped: dict[str, Future[Stopped]]) -> None:
    killed = stopped["killed"].result()
    whole = run_cli("fit", *killed.common, "--trainer.default_root_dir", tmp_path / "whole")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    last = killed.run_dir / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["epoch"] == 0  # killed before epoch 1 trained

    resumed = run_cli("fit", "--config", killed.run_dir / "config.yaml", "--ckpt_path", last)
    assert resumed.trainer.global_step == whole.trainer.global_step == 12
    resumed_state = resumed.model.state_dict()
    for key, value in whole.model.state_dict().items():
        torch.testing.assert_close(resumed_state[key], value, rtol=0, atol=0, msg=key)
    for name in ("val/loss", "val/acc"):
        assert float(resumed.trainer.callback_metrics[name]) == float(whole.trainer.callback_metrics[name])


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
@pytest.mark.posix  # SIGKILL, process groups, preexec_fn or /proc
def test_signal_saves_a_checkpoint_and_says_how_to_resume(sig, status, stopped: dict[str, Future[Stopped]]) -> None:
    run = stopped[sig.name].result()
    last = run.run_dir / "checkpoints" / "last.ckpt"
    assert run.returncode == status, run.stderr[-2000:]
    message = [line for line in run.stderr.splitlines() if line.startswith(f"vitlit: interrupted by {sig.name}")]
    assert len(message) == 1, run.stderr[-2000:]
    assert message[0].endswith(
        f"resume with: python -m vitlit fit --config {run.run_dir / 'config.yaml'} --ckpt_path {last}"
    )
    assert "Received SIGTERM" not in run.stderr and "SIGTERMException was raised" not in run.stderr  # one line only
    # Saved on the signal (or at the epoch end just before it): the checkpoint holds the step the run stopped at.
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)  # loadable without trusting pickles
    stopped_at = int(re.search(r"step (\d+);", message[0]).group(1))
    assert checkpoint["global_step"] == stopped_at > 0
    card = json.loads((run.run_dir / "run_card.json").read_text())
    assert card["exit_reason"] == "SIGTERMException"  # a first Ctrl-C is routed as one

    resumed = run_cli(
        "fit", "--config", run.run_dir / "config.yaml", "--ckpt_path", last,
        "--trainer.max_epochs", str(checkpoint["epoch"] + 2),
    )  # fmt: skip
    assert resumed.trainer.global_step > checkpoint["global_step"]
    after = json.loads((run.run_dir / "run_card.json").read_text())  # the same card, carried on
    assert after["exit_reason"] == "finished" and after["wall_seconds"] > card["wall_seconds"]
    assert after["epochs_done"] == checkpoint["epoch"] + 2 and (run.run_dir / "config.resume-1.yaml").is_file()


@pytest.mark.slow
@pytest.mark.posix  # SIGKILL, process groups, preexec_fn or /proc
def test_sigterm_during_validation_resumes(stopped: dict[str, Future[Stopped]]) -> None:
    """The checkpoint saved mid-validation resumes too (EarlyStopping must not demand that validation's metric)."""
    run = stopped["in_validation"].result()
    assert run.returncode == 143, run.stderr[-2000:]
    assert "vitlit: interrupted by SIGTERM at epoch 1, step 10; resume with:" in run.stderr
    last = run.run_dir / "checkpoints" / "last.ckpt"
    resumed = run_cli("fit", "--config", run.run_dir / "config.yaml", "--ckpt_path", last)
    assert resumed.trainer.current_epoch == 3 and resumed.trainer.global_step == 15


@pytest.mark.slow
@pytest.mark.posix  # SIGKILL, process groups, preexec_fn or /proc
def test_kill_while_saving_keeps_last_ckpt_and_auto_resume_continues_the_run(
    stopped: dict[str, Future[Stopped]],
) -> None:
    killed = stopped["dying_while_saving"].result()
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    run_dir = killed.run_dir
    last = run_dir / "checkpoints" / "last.ckpt"
    partial_files = list(last.parent.glob(".last.ckpt.*.tmp"))
    assert len(partial_files) == 1  # the kill came during the write of the new last.ckpt ...
    assert torch.load(last, map_location="cpu", weights_only=True)["epoch"] == 0  # ... and the old one is whole

    # The same command again, as a restarted job script would run it: it finds last.ckpt and continues version_0.
    config_before = (run_dir / "config.yaml").read_bytes()
    resumed = run_cli("fit", *killed.common, "--trainer.default_root_dir", killed.root, "--ckpt_path", "auto")
    assert Path(resumed.trainer.log_dir) == run_dir
    assert resumed.trainer.current_epoch == 3 and resumed.trainer.global_step == 12
    assert (run_dir / "config.yaml").read_bytes() == config_before and (run_dir / "config.resume-1.yaml").is_file()
    assert sorted(p.name for p in killed.root.joinpath("lightning_logs").iterdir()) == ["version_0"]
    assert not list(last.parent.glob(".*.tmp"))  # the next save of last.ckpt removed the partial file


# Every n steps is Lightning's own ModelCheckpoint argument; vitlit's fraction of the run is the default test.
@pytest.mark.parametrize(
    "every",
    [["every_fraction", "0.25"], pytest.param(["every_n_steps", "2"], marks=pytest.mark.slow)],
    ids=["fraction", "steps"],
)
def test_snapshots_are_periodic_and_keep_the_newest(every: list[str], tmp_path: Path, digits_dir: Path) -> None:
    snapshots = ["--trainer.callbacks+=vitlit.runs.snapshots.Snapshots", "--trainer.callbacks.init_args.keep", "2"]
    snapshots += [f"--trainer.callbacks.init_args.{every[0]}", every[1]]
    cli = run_cli("fit", *_digits_run(digits_dir, 2, 4, 1), *snapshots, "--trainer.default_root_dir", tmp_path)
    folder = Path(cli.trainer.log_dir) / "checkpoints"
    # 8 optimizer steps, a snapshot every 2: steps 2, 4, 6, 8 were written, the two newest are kept.
    kept = sorted(p.name for p in folder.glob("snapshot-*"))
    assert kept == ["snapshot-step0000006.ckpt", "snapshot-step0000008.ckpt"]
    assert torch.load(folder / "snapshot-step0000006.ckpt", map_location="cpu", weights_only=True)["global_step"] == 6


def test_two_snapshots_by_steps_into_their_own_folders_are_two_states() -> None:
    """Frequent snapshots kept 2 and rare ones kept all, each in its folder, were refused as the same settings."""
    from vitlit.runs.snapshots import Snapshots

    frequent = Snapshots(every_n_steps=2, keep=2, dirpath="frequent")
    rare, again = Snapshots(every_n_steps=50, keep=-1, dirpath="rare"), Snapshots(every_n_steps=2, dirpath="frequent")
    assert len({frequent.state_key, rare.state_key}) == 2 and again.state_key == frequent.state_key
    # Without a folder of their own, the keys are what checkpoints saved before hold (their states restore).
    key = "Snapshots{'snapshots': 'snapshot-step{step:07d}', 'every_fraction': %s}"
    assert Snapshots().state_key == key % 0.2 and Snapshots(every_n_steps=2).state_key == key % None


def test_two_snapshots_writing_one_name_into_one_folder_are_refused() -> None:
    """A frequent Snapshots by fraction that keeps 2 and a rare one that keeps all, both in the run's folder, wrote
    snapshot-step{step}: the frequent one's pruning deleted the snapshots the rare one kept."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from vitlit.checks import check_built_callbacks
    from vitlit.errors import ConfigError
    from vitlit.runs.snapshots import Snapshots

    with pytest.raises(
        ConfigError, match=re.escape("write files named 'snapshot-step{step:07d}' into the run's checkpoints/")
    ):
        check_built_callbacks([Snapshots(every_fraction=0.1, keep=2), Snapshots(every_fraction=0.5, keep=-1)])
    check_built_callbacks(
        [Snapshots(every_fraction=0.1, keep=2), Snapshots(every_fraction=0.5, keep=-1, dirpath="rare")]
    )
    check_built_callbacks([Snapshots(every_fraction=0.1), Snapshots(every_fraction=0.5, filename="rare-{step}")])
    # Lightning's pattern: the best k, and a second one that keeps only last.ckpt (save_top_k 0: no named file).
    check_built_callbacks([ModelCheckpoint(monitor="val/acc"), ModelCheckpoint(save_last=True, save_top_k=0)])


@pytest.mark.slow  # three fits; with the other exact-resume runs
def test_resume_restores_ema_weights(tmp_path: Path, cifar_dir: Path) -> None:
    """EMAWeightAveraging's averaged weights and count come back on resume: 1 + 1 epochs equal 2 epochs."""
    flags = """
        --trainer.deterministic true --trainer.enable_progress_bar false
        --trainer.callbacks+=EMAWeightAveraging --trainer.callbacks.decay 0.9
        --model.scheduler.init_args.total_steps 16
    """.split()  # one schedule for both (the half run would size its cosine for its own single epoch)
    whole = tiny_cifar_fit(cifar_dir, tmp_path / "whole", *flags, "--trainer.max_epochs", "2")
    half = tiny_cifar_fit(cifar_dir, tmp_path / "half", *flags, "--trainer.max_epochs", "1")
    config = Path(half.trainer.log_dir) / "config.yaml"
    resumed = run_cli("fit", "--config", config, "--trainer.max_epochs", "2", "--ckpt_path", "last")
    resumed_state = resumed.model.state_dict()  # after fit, the model holds the EMA weights
    for key, value in whole.model.state_dict().items():
        torch.testing.assert_close(resumed_state[key], value, rtol=0, atol=0, msg=key)
    ema = next(cb for cb in resumed.trainer.callbacks if type(cb).__name__ == "EMAWeightAveraging")
    assert ema._average_model.n_averaged.item() == 16  # counted across the interruption


@pytest.mark.slow  # a fit (or a fresh process): the default suite stays within its time
def test_resume_with_more_epochs_keeps_the_schedule_and_says_so(
    tmp_path: Path, cifar_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's story: a resume keeps the schedule it was created with, and one line says so."""
    flags = ["--trainer.enable_progress_bar", "false", "--model.scheduler.init_args.warmup_steps", "3"]
    first = tiny_cifar_fit(cifar_dir, tmp_path, *flags, "--trainer.max_epochs", "1")
    scheduler = first.model.lr_schedulers()
    kept = (scheduler.total_steps, scheduler.warmup_steps)
    capsys.readouterr()
    config = Path(first.trainer.log_dir) / "config.yaml"
    # The saved warmup given again: run_cli would add the tests' NO_WARMUP, a change a resume refuses (issue 64).
    resumed = run_cli("fit", "--config", config, "--trainer.max_epochs", "3", "--ckpt_path", "last", *flags[2:])
    err = capsys.readouterr().err
    assert f"schedule of the checkpoint's run ({kept[0]} steps; this run has {3 * kept[0]})" in err
    resumed_scheduler = resumed.model.lr_schedulers()
    assert (resumed_scheduler.total_steps, resumed_scheduler.warmup_steps) == kept


def test_a_remote_checkpoint_keeps_lightnings_own_writing_and_reading(tmp_path: Path) -> None:
    """A path with an fsspec protocol (here fsspec's in-memory one, as s3:// would be) is Lightning's to write."""
    from vitlit.runs.checkpoint_io import AtomicCheckpointIO

    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": torch.tensor(3)}, "memory://runs/last.ckpt")
    assert int(io.load_checkpoint("memory://runs/last.ckpt")["step"]) == 3
    io.save_checkpoint({"state_dict": {}, "step": torch.tensor(4)}, tmp_path / "last.ckpt")  # local: the atomic writer
    assert int(io.load_checkpoint(tmp_path / "last.ckpt")["step"]) == 4 and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("schedule", [["--trainer.check_val_every_n_epoch", "2", "--trainer.max_steps", "5"],
                                      ["--trainer.val_check_interval", "0.5", "--trainer.max_steps", "7"]])  # fmt: skip
def test_a_fit_that_max_steps_ends_between_validations_saves_its_last_step(
    schedule: list[str], tmp_path: Path, digits_dir: Path
) -> None:
    # last.ckpt is saved after each validation: a fit ended between two exited 0 with no last.ckpt, or an older one.
    cli = run_cli("fit", *_digits_run(digits_dir, 4, 4, 1), *schedule, "--trainer.default_root_dir", tmp_path)
    last = Path(cli.trainer.log_dir) / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == cli.trainer.global_step
    assert cli.trainer.global_step == int(schedule[-1])
