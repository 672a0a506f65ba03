"""What reaches the command line's entry point ends in one line and a status (issue 45's hostile round, issue 46).

An interrupt during setup, a reader that went away, a flag value the parser would expand without end, a number too
large to be one, a key given twice: each is one line to stderr and a status, never a traceback, and a fit that loses
its output stream stops at the next step with ``last.ckpt``, as on SIGHUP.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers.cli import CPU, DIGITS_CONFIG, carries, refused, run_cli

import vitlit.data.folder


class _GoneReader(io.StringIO):
    """A standard output whose reader left after ``lines`` lines (``vitlit fit | head -2``)."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.left = lines

    def write(self, text: str) -> int:
        if "\n" in text:
            self.left -= 1
        if self.left < 0:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")


#: What a lost output stream is stopped as: SIGHUP, or Ctrl-C where there is none (Windows).
HANGUP = getattr(signal, "SIGHUP", signal.SIGINT)


def _interrupted(*args: object) -> None:
    raise KeyboardInterrupt


def test_ctrl_c_while_a_folder_is_scanned_is_one_line(
    tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(vitlit.data.folder, "image_files", _interrupted)  # a 5,000-class folder being scanned
    with pytest.raises(SystemExit) as stop:
        run_cli("fit", "--config", DIGITS_CONFIG, *CPU, "--data", "ImageFolderDataModule", "--data.root", digits_dir,
                "--trainer.default_root_dir", tmp_path)  # fmt: skip
    err = capsys.readouterr().err
    assert stop.value.code == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "vitlit: interrupted by SIGINT; nothing was saved"


def test_a_fit_whose_output_reader_left_stops_at_the_next_step_and_saves(
    tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vitlit fit | head -2`: a BrokenPipeError from the epoch lines ended the fit without its last steps saved."""
    monkeypatch.setattr("sys.stdout", _GoneReader(lines=2))
    with pytest.raises(SystemExit) as stop:
        run_cli("fit", "--config", DIGITS_CONFIG, *CPU, "--data.root", digits_dir, "--trainer.max_epochs", "6",
                "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",  # a line an epoch: 2 steps do
                "--trainer.default_root_dir", tmp_path)  # fmt: skip
    err = capsys.readouterr().err
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert stop.value.code == 128 + HANGUP and "Traceback" not in err and last.is_file()
    assert err.strip().splitlines()[-1].startswith(f"vitlit: interrupted by {HANGUP.name} at epoch 3, step ")


class _ClosedTerminal(io.StringIO):
    """A terminal that closes after ``writes`` writes: every later one fails with EIO, as a closed pty's do."""

    def __init__(self, writes: int) -> None:
        super().__init__()
        self.left = writes

    def close_now(self) -> None:
        self.left = 0

    def write(self, text: str) -> int:
        self.left -= 1
        if self.left < 0:
            raise OSError(errno.EIO, "Input/output error")
        return super().write(text)

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")


@pytest.mark.parametrize("system", ["posix", "windows"])
def test_a_fit_whose_terminal_closed_while_the_bar_draws_stops_at_the_next_step_and_saves(
    system: str, tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bar's writes (on Rich's refresh thread or the loop) met EIO: a traceback, no checkpoint of the last steps.

    Without SIGHUP (Windows) the stop is a first Ctrl-C's, told once: a second would stop at once, without saving.
    """
    if system == "windows" and hasattr(signal, "SIGHUP"):
        monkeypatch.delattr(signal, "SIGHUP")
    hangup = getattr(signal, "SIGHUP", signal.SIGINT)
    from lightning.pytorch.callbacks import Callback

    from vitlit.cli import main

    terminal = _ClosedTerminal(writes=10**9)

    class CloseAfterTheFirstEpoch(Callback):
        """The terminal closes once an epoch is done (not after a count of writes: the bar's refresh thread writes by
        the clock, so a count was seconds of training, and the first epoch done or not as the machine's load had it)."""

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            terminal.close_now()

    monkeypatch.setattr("sys.stdout", terminal)
    monkeypatch.setattr("sys.stderr", _ClosedTerminal(writes=0))  # the same terminal: the stop's line has nowhere to go
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", str(DIGITS_CONFIG), *CPU, "--data.root", str(digits_dir), "--trainer.max_epochs", "30",
              "--trainer.default_root_dir", str(tmp_path), "--model.scheduler.init_args.warmup_steps", "0"],
             callbacks=[CloseAfterTheFirstEpoch()])  # fmt: skip
    run = tmp_path / "lightning_logs" / "version_0"
    card = json.loads((run / "run_card.json").read_text())
    assert stop.value.code == 128 + hangup and (run / "checkpoints" / "last.ckpt").is_file()
    assert card["signal"] == hangup.name and 0 < card["epochs_done"] < 30  # the run card is where the stop is read


@pytest.mark.slow
@pytest.mark.posix  # a pseudo-terminal
def test_closing_the_terminal_of_a_fit_stops_it_with_a_checkpoint(tmp_path: Path, digits_dir: Path) -> None:
    """The real thing: a fit drawing its bar in a pty whose other end closes (the kernel's SIGHUP, then EIO)."""
    pty = pytest.importorskip("pty")
    args = ["fit", "--config", DIGITS_CONFIG, *CPU, "--data.root", digits_dir, "--trainer.max_epochs", "100",
            "--trainer.default_root_dir", tmp_path]  # fmt: skip
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session whose controlling terminal is the pty
        os.execv(sys.executable, [sys.executable, "-m", "vitlit", *map(str, args)])
    seen, started = b"", time.monotonic()
    while b"val/acc" not in seen and time.monotonic() - started < 120:  # the bar shows a validation's result
        with contextlib.suppress(OSError):
            seen += os.read(fd, 65536)
    os.close(fd)
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the fit went on after its terminal closed")
    run = tmp_path / "lightning_logs" / "version_0"
    assert os.waitstatus_to_exitcode(status) == 129 and (run / "checkpoints" / "last.ckpt").is_file()
    assert json.loads((run / "run_card.json").read_text())["signal"] == "SIGHUP"


def test_a_tool_whose_output_reader_left_ends_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vitlit models | head -1`."""
    monkeypatch.setattr("sys.stdout", _GoneReader(lines=1))
    with pytest.raises(SystemExit) as stop:
        run_cli("models", "test_vit*")
    assert stop.value.code == 141 and capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["serve", "--ckpt_path", "x.ckpt", "--max_upload_mb", "1e400"], "--max_upload_mb=1e400 is not a finite"),
        (["sweep", "--config", DIGITS_CONFIG, "--search", "x.yaml", "--seed", "-1"], 'key "seed"'),
        (["fit", "--config", DIGITS_CONFIG, "--model.optimizer.init_args.lr", "1e400"], "lr=1e400 is not a finite"),
        (["fit", "--config", DIGITS_CONFIG, "--trainer.max_time", "{seconds: -10}"], "would train nothing"),
    ],
    ids=["serve-upload", "sweep-seed", "fit-lr", "fit-max-time"],  # serve's port and wait: tests/tools/test_deploy.py
)
def test_numbers_are_checked_as_parsed_for_every_entry_point(
    args: list[object], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert expected in refused(capsys, *args)


def test_a_flag_value_that_expands_without_end_is_refused_before_parsing(capsys: pytest.CaptureFixture[str]) -> None:
    """A billion laughs as a flag value took the parser 107 s, then an IndexError."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdef", "bcdefg", strict=True)
    )
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--model.class_names", bomb)
    carries(line, "--model.class_names", "100,000", "&, *")


def test_a_nul_byte_in_a_config_or_a_flag_value_is_named_with_where_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """YAML's "\\0" in quotes is a NUL byte: a path holding one ended in `ValueError: embedded null byte`."""
    escaped, raw = tmp_path / "escaped.yaml", tmp_path / "raw.yaml"
    escaped.write_text('trainer:\n  default_root_dir: "runs\\0x"\n')
    raw.write_bytes(b"trainer:\n  max_epochs: 1\x00\n")
    said = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--config", escaped)
    carries(said, escaped, "NUL", "line 2")
    said = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--trainer", '{default_root_dir: "runs\\0x"}')
    assert said.startswith("vitlit: error: the value of --trainer holds a NUL byte (\\0) in a value at line 1")
    said = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--config", raw)
    assert said.startswith(f"vitlit: error: config file {raw} is not valid YAML (the character U+0000 at character 25)")


def test_a_key_given_twice_is_refused_in_a_config_and_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """PyYAML and csv.DictReader keep the last of two, silently: a run that is not the one its file shows."""
    twice = tmp_path / "twice.yaml"
    twice.write_text("trainer:\n  max_epochs: 2\ntrainer:\n  max_epochs: 3\n")
    assert "gives the key 'trainer' twice" in refused(capsys, "fit", "--config", DIGITS_CONFIG, "--config", twice)
    table = tmp_path / "data"
    table.mkdir()
    (table / "labels.csv").write_text("filename,label,label\na.png,cat,dog\n")
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *CPU, "--data", "vitlit.data.csv_table.CSVImageDataModule",
                   "--data.root", table, "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "has the column 'label' twice" in line


@pytest.mark.posix  # resource limits
def test_too_little_memory_to_load_torch_is_one_line() -> None:
    """`ulimit -v` below what torch's libraries map: an ImportError traceback from deep inside torch."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (200 * 2**20, resource.RLIM_INFINITY))  # torch maps more

    done = subprocess.run([sys.executable, "-m", "vitlit", "fit", "--config", str(DIGITS_CONFIG)], capture_output=True,
                          text=True, preexec_fn=limit, timeout=120)  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith("vitlit: error: PyTorch, Lightning or timm could not be loaded (")
    assert done.stderr.strip().endswith("(ulimit -v) and the install (pip install -e .).")
