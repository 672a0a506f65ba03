"""What differs on Windows, simulated on Linux so that a regression shows here first (docs/training.md: "On Windows").

Windows has no ``fcntl``, no SIGHUP, no ``os.register_at_fork`` (tests/tools/test_deploy.py), an ``os.kill`` that ends
a process at once whatever the signal, byte-range locks that others cannot read through, and no replacing of a file
another process holds open. These tests take the POSIX calls away and check the Windows paths; they also run on the
Windows CI job as they are.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import CPU, DIGITS_CONFIG, NO_WARMUP
from lightning.pytorch import Callback, LightningModule, Trainer

from vitlit import atomic
from vitlit.cli import interrupts_stop_the_fit, main
from vitlit.errors import ConfigError
from vitlit.run_dir import lock, unlock


class CtrlCAtStep(Callback):
    """Ctrl-C as Windows delivers it: SIGINT to this process's main thread, after training step ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        if trainer.global_step == self.step:
            signal.raise_signal(signal.SIGINT)


def test_ctrl_c_saves_and_says_how_to_resume_without_sighup_or_a_gentle_kill(
    tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delattr(signal, "SIGHUP")

    def kill(pid: int, signum: int) -> None:  # Windows' os.kill: TerminateProcess, no handler, no checkpoint
        raise AssertionError(f"os.kill({pid}, {signum}) would end the process on Windows")

    monkeypatch.setattr(os, "kill", kill)
    args = ["fit", "--config", DIGITS_CONFIG, *CPU, *NO_WARMUP, "--data.root", digits_dir, "--data.num_workers", "0",
            "--trainer.max_epochs", "3", "--trainer.default_root_dir", tmp_path]  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        main([str(a) for a in args], callbacks=[CtrlCAtStep(3)])
    assert stop.value.code == 130
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    lines = capsys.readouterr().err.splitlines()
    assert "vitlit: stopping at the next step; Ctrl-C again to stop at once" in lines
    assert lines[-1].startswith("vitlit: interrupted by SIGINT at epoch 0, step 3; resume with:"), lines[-3:]
    assert lines[-1].endswith(f"--ckpt_path {last}") and last.is_file()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler goes with the fit


def test_ctrl_break_stops_a_fit_where_the_system_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(signal, "SIGHUP", raising=False)
    monkeypatch.setattr(signal, "SIGBREAK", signal.SIGTERM, raising=False)  # one every system has, as Ctrl-Break
    before = signal.getsignal(signal.SIGTERM)
    with interrupts_stop_the_fit():
        assert signal.getsignal(signal.SIGTERM) is signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGTERM) is before


class _Msvcrt:
    """Windows' ``msvcrt.locking`` over one process: a byte locked through one descriptor is locked for the others,
    and reading it through another descriptor fails, as on Windows."""

    LK_NBLCK = 2

    def __init__(self) -> None:
        self.held: dict[tuple[int, int], int] = {}  # (inode, offset) -> the descriptor holding it

    def locking(self, fd: int, mode: int, nbytes: int) -> None:
        key = (os.fstat(fd).st_ino, os.lseek(fd, 0, os.SEEK_CUR))
        if self.held.setdefault(key, fd) != fd:
            raise PermissionError(13, "Permission denied")

    def read(self, fd: int, n: int, read: Any = os.read) -> bytes:
        start, inode = os.lseek(fd, 0, os.SEEK_CUR), os.fstat(fd).st_ino
        if any(i == inode and start <= at < start + n and by != fd for (i, at), by in self.held.items()):
            raise PermissionError(13, "The process cannot access the file because another process has locked it")
        return read(fd, n)


def test_a_second_fit_into_a_locked_run_is_one_line_where_locks_are_byte_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msvcrt = _Msvcrt()
    monkeypatch.setitem(sys.modules, "fcntl", None)  # `import fcntl` fails, as on Windows
    monkeypatch.setitem(sys.modules, "msvcrt", msvcrt)
    monkeypatch.setattr(os, "read", msvcrt.read)
    held = lock(tmp_path)
    with pytest.raises(ConfigError, match=rf"is in use by a fit of pid {os.getpid()} on "):
        lock(tmp_path)
    unlock(tmp_path, held)


def test_a_file_another_process_holds_open_is_replaced_once_it_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "last.ckpt"
    target.write_bytes(b"old")
    refusals, replace = iter([PermissionError(13, "Access is denied")] * 2), os.replace

    def held_open(src: Any, dst: Any) -> None:  # Windows: no replacing a file that is open anywhere
        for err in refusals:
            raise err
        replace(src, dst)

    monkeypatch.setattr(os, "replace", held_open)
    monkeypatch.setattr(atomic.time, "sleep", lambda s: None)
    atomic.write_atomically(target, b"new")
    assert target.read_bytes() == b"new"

    refusals = iter([PermissionError(13, "Access is denied")] * 100)
    with pytest.raises(PermissionError, match=r"last\.ckpt could not be replaced: another process holds it open"):
        atomic.write_atomically(target, b"newer")
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
