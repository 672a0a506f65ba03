"""Hostile round 8 (issue 73): what a run writes and where, and what it masks, one test per class.

The masker masks a URL's credentials, never words (`vitlit.text.redacted`), and never inside the parser's own
dump-and-reload; the folder a run writes is checked against the data root with its links resolved
(`vitlit.config.written_folders`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from helpers.cli import DIGITS_CONFIG, carries, refused, run_cli, tree_digest

SHORT = ["--trainer.max_steps", "1", "--trainer.limit_val_batches", "1"]


def test_a_password_that_is_a_word_is_masked_in_its_url_only(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The password ``model`` became ``***`` in every ``model_name`` of jsonargparse's dump-and-reload (a YAML
    "ScannerError: while scanning an alias"); a user name that also named a folder was masked in the saved config."""
    url = "http://alicehostile:model@h/x"
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.predict_dir", url,
                   "--trainer.default_root_dir", tmp_path / "runs", *SHORT)  # fmt: skip
    carries(line, "predict_dir", "***@h/x")  # the data module's own refusal of a URL, not the parser's YAML error
    assert "ScannerError" not in line and "model@" not in line, line
    root = tmp_path / "alicehostile" / "digits"  # --print_config shows what the run saves as its config.yaml
    with pytest.raises(SystemExit):
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", root, "--data.predict_dir", url, "--print_config")
    saved = yaml.safe_load(capsys.readouterr().out)
    data, model = saved["data"]["init_args"], saved["model"]["init_args"]
    assert data["root"] == str(root) and data["predict_dir"] == "http://***@h/x" and model["model_name"] == "test_vit"


def test_a_learned_credential_is_masked_alone_only_in_printed_lines_as_a_whole_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key quoted by a library without its URL is still masked where vitlit prints it; a word never is."""
    from vitlit.text import clean, redacted

    monkeypatch.setattr(sys, "argv", ["vitlit", "fit", "--data.input_dir", "s3://AKIAHOSTILE9:Sup3rS3cret8@b/x",
                                      "--data.predict_dir", "https://john.smith:password@h/y"])  # fmt: skip
    assert clean("key AKIAHOSTILE9 (secret Sup3rS3cret8) denied") == "key *** (secret ***) denied"
    assert clean("the model of john.smith in /home/john.smith: password") == (
        "the model of john.smith in /home/john.smith: password"
    )
    assert clean("xAKIAHOSTILE9 and Sup3rS3cret8x") == "xAKIAHOSTILE9 and Sup3rS3cret8x"  # whole tokens only
    assert redacted("root: /data/AKIAHOSTILE9\n") == "root: /data/AKIAHOSTILE9\n"  # a file keeps its words
    assert clean("cannot read http:/u:model@h/x") == "cannot read http:/***@h/x"  # a URL a Path made one slash of


@pytest.mark.parametrize("how", ["lightning_logs linked", "logger's save_dir linked"])
def test_a_run_folder_linked_into_the_data_root_is_refused(
    how: str, digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """default_root_dir's lightning_logs a link to a class folder: config, events and checkpoints went inside it."""
    flat = tmp_path / "flat"
    shutil.copytree(digits_dir / "train", flat)
    before = tree_digest(flat)
    runs = tmp_path / "runs"
    runs.mkdir()
    if how == "lightning_logs linked":
        (runs / "lightning_logs").symlink_to(flat / "3", target_is_directory=True)
        logger: list[object] = []
    else:
        (runs / "tb").symlink_to(flat / "3", target_is_directory=True)
        logger = ["--trainer.logger", "TensorBoardLogger", "--trainer.logger.save_dir", runs / "tb"]
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", flat, *logger,
                   "--trainer.default_root_dir", runs, *SHORT)  # fmt: skip
    carries(line, f"--trainer.default_root_dir {runs}", flat / "3", "is inside --data.root")
    assert tree_digest(flat) == before and sorted(p.name for p in (flat / "3").iterdir()) == sorted(
        p.name for p in (digits_dir / "train" / "3").iterdir()
    )
