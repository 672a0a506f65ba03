"""Issue 46, class 2: text vitlit did not write (file and class names, table contents, URLs, flag values) reaches
terminals, files and messages only in a form that cannot act there: escapes made visible, Markdown escaped,
credentials left out, paths confined to the root a flag names. One test per entry point; the model card's Markdown
and front matter are tested with the export (tests/tools/test_deploy.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.cli import DIGITS_CONFIG, run_cli, said_with, tiny_folder_fit
from PIL import Image

from vitlit.text import markdown, redacted, shown

#: A name that retitles the terminal, then clears it, then starts a forged line of its own.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\nvitlit: all good \u202egnp"


def test_shown_markdown_and_redacted_leave_nothing_active() -> None:
    assert shown(HOSTILE) == "\\x1b]0;pwned\\x07\\x1b[2J\\nvitlit: all good \\u202egnp"
    assert shown("ünïcode 猫 tab\there") == "ünïcode 猫 tab\\there"  # letters stay letters
    assert shown(b"caf\xe9".decode(errors="surrogateescape")) == "caf\\udce9"  # a non-UTF-8 name's byte
    assert markdown("<b>x</b> # [a](b) `c` | d 0.5") == "\\<b\\>x\\</b\\> \\# \\[a\\](b) \\`c\\` \\| d 0.5"
    assert redacted("at https://bob:s3cret@host:5000/x?token=abc&page=2 (401)") == (
        "at https://***@host:5000/x?token=***&page=2 (401)"
    )
    assert redacted("postgresql://ghp_tok3n@db/x and file:///tmp/a@b") == "postgresql://***@db/x and file:///tmp/a@b"


def _folder(root: Path, bad_name: str) -> Path:
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        (root / "train" / name).mkdir(parents=True)
        for i in range(8):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / "train" / name / f"{i}.png")
    (root / "train" / "b" / bad_name).write_bytes(b"not an image")
    return root


def test_fit_names_a_hostile_file_with_its_escapes_visible(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _folder(tmp_path / "data", f"{HOSTILE}.png")
    with pytest.raises(SystemExit) as stop:
        tiny_folder_fit(root, tmp_path / "out")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "\x1b" not in err and "\u202e" not in err, err[-2000:]
    line = next(line for line in err.splitlines() if line.startswith("vitlit: error:"))
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\nvitlit: all good \\u202egnp.png" in line
    assert not [line for line in err.splitlines() if line.startswith("vitlit: all good")]  # no forged line
    # Skipped, the file is listed in skipped_images.txt on one line, as shown on the terminal.
    fit = tiny_folder_fit(root, tmp_path / "out", "--data.bad_images", "skip")
    listed = (Path(fit.trainer.log_dir) / "skipped_images.txt").read_text().splitlines()
    assert len(listed) == 1 and listed[0].startswith(str(root / "train" / "b" / shown(HOSTILE)))
    assert "\x1b" not in (Path(fit.trainer.log_dir) / "run_card.md").read_text()


@pytest.mark.slow  # a short fit, then predict: the default suite stays within its time
def test_predict_names_a_skipped_hostile_file_with_its_escapes_visible(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.max_epochs", "1",
                  "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
                  "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    Image.new("RGB", (8, 8)).save(inbox / "fine.png")
    (inbox / f"{HOSTILE}.png").write_bytes(b"not an image")
    capsys.readouterr()
    run = Path(fit.trainer.log_dir)
    run_cli("predict", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt",
            "--data.predict_dir", inbox)  # fmt: skip
    err = capsys.readouterr().err
    assert "\x1b" not in err and f"skipping {inbox / shown(HOSTILE)}.png: " in err, err[-2000:]


def test_a_labels_table_outside_the_root_is_never_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A labels.csv that links to a file elsewhere had its first line (a secret) printed in the column error."""
    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET=hunter2\n")
    root = tmp_path / "data"
    root.mkdir()
    (root / "labels.csv").symlink_to(secret)
    for table in ("labels.csv", "../secret.txt"):
        with pytest.raises(SystemExit) as stop:
            run_cli("fit", "--config", DIGITS_CONFIG, "--data", "vitlit.data.csv_table.CSVImageDataModule",
                    "--data.root", root, "--data.table", table,
                    "--trainer.default_root_dir", tmp_path / "out")  # fmt: skip
        err = capsys.readouterr().err
        assert stop.value.code == 2 and "hunter2" not in err, err[-2000:]
        assert f"--data.table {table} leads out of {root}" in err
    assert not (tmp_path / "out").exists()


def test_a_tracking_uri_s_password_is_not_printed(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("mlflow")
    import socket

    with socket.socket() as closed:  # a port nothing listens on: refused at once
        closed.bind(("127.0.0.1", 0))
        uri = f"http://bob:s3cret@127.0.0.1:{closed.getsockname()[1]}"
        with pytest.raises(SystemExit) as stop:
            run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.logger", "MLFlowLogger",
                    "--trainer.logger.tracking_uri", uri, "--trainer.default_root_dir", tmp_path)  # fmt: skip
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "s3cret" not in err, err[-2000:]
    said_with(err, "http://***@127.0.0.1:")


@pytest.mark.part("tools")
@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "a/b", "..", "", "x\ny"])
def test_a_sweep_s_study_name_cannot_leave_its_root(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("optuna")
    space = tmp_path / "space.yaml"
    space.write_text("model.drop_path_rate: {type: uniform, low: 0.0, high: 0.2}\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    with pytest.raises(SystemExit) as stop:
        run_cli("sweep", "--config", DIGITS_CONFIG, "--search", space, "--root", tmp_path / "a" / "b" / "sweeps",
                "--study_name", name)  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "is not a plain name" in err[0], err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "space.yaml"]


@pytest.mark.part("tools")
def test_a_storage_url_s_password_is_not_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("optuna")
    space = tmp_path / "space.yaml"
    space.write_text("model.drop_path_rate: {type: uniform, low: 0.0, high: 0.2}\n")
    with pytest.raises(SystemExit) as stop:
        run_cli("sweep", "--config", DIGITS_CONFIG, "--search", space, "--root", tmp_path / "sweeps",
                "--storage", "nosuchdb://bob:s3cret@127.0.0.1:1/optuna")  # fmt: skip
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "s3cret" not in err and "nosuchdb://***@127.0.0.1:1/optuna" in err, err
