"""Hostile round 6, class 2: every line vitlit prints and every CSV cell it writes leaves through one function.

Escapes shown (`vitlit.text.clean`), credentials redacted wherever they stand (a library's quoted message too),
spreadsheet formulas neutralised (`vitlit.runs.prediction_table.cell`); for fit's log lines, predict's CSV and
prepare's lines.
"""

from __future__ import annotations

import csv
import logging
import sys
from pathlib import Path

import pytest
from helpers.cli import DIGITS_CONFIG, refused, run_cli
from helpers.hf import digits_rows

#: Labels a spreadsheet or a Markdown reader would act on. Labels with terminal escapes, newlines or bidirectional
#: controls are refused by the item table (hostile round 8), so they never reach a line or a cell: see the last test.
HOSTILE = ["=HYPERLINK(\"http://x\",\"y\")", "-2+3", "@SUM(1)", "+1", "<img src=x>", "# title", "x|y", "[a](b)",
           "\tTab", "plain"]  # fmt: skip
ESCAPES = ["\x1b[2Jclear", "\x1b]0;title\x07", "ok\nvitlit: forged line", "\u202eevil"]


@pytest.fixture(scope="module")
def hostile_labels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits as Parquet whose string labels are spreadsheet formulas and Markdown."""
    return _parquet(tmp_path_factory.mktemp("hostile") / "pq", HOSTILE, 400)


def _parquet(folder: Path, labels: list[str], n: int) -> Path:
    """``n`` digits as one Parquet shard in ``folder``, digit ``d`` labelled ``labels[d]``."""
    pytest.importorskip("datasets")
    from datasets import Dataset, Features, Value
    from datasets import Image as HFImage

    images, targets = digits_rows(n)
    folder.mkdir(parents=True)
    Dataset.from_dict({"image": images, "label": [labels[t] for t in targets]},
                      features=Features({"image": HFImage(), "label": Value("string")})).to_parquet(
        str(folder / "train-00000-of-00001.parquet"))  # fmt: skip
    return folder


def test_fit_logs_and_predictions_csv_hold_no_escape_and_no_live_formula(
    hostile_labels: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data", "vitlit.data.hf.HFDataModule", "--data.path",
                      hostile_labels, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1",
                      "--trainer.limit_val_batches", "1", "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    said = [r.getMessage() for r in caplog.records if "labels are the classes" in r.getMessage()]
    assert said and "\n" not in said[0]
    run = Path(fit.trainer.log_dir)
    predict = run_cli("predict", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt")
    text = (Path(predict.trainer.log_dir) / "predictions.csv").read_text(encoding="utf-8")
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    rows = list(csv.reader(text.splitlines()))
    cells = {c for row in rows for c in row[1:] if not c.replace(".", "").isdigit()}  # the text cells, header too
    assert not any(c.startswith(("=", "+", "-", "@", "\t")) for c in cells)
    assert 'p_\'=HYPERLINK("http://x","y")' not in cells  # the header's names start with p_: no formula there
    from vitlit.runs.prediction_table import cell

    assert [cell(name) for name in HOSTILE[:4]] == ["'" + name for name in HOSTILE[:4]]  # quoted, as OWASP advises


def test_a_credential_quoted_by_a_library_is_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cloud client's own message quotes the key without the URL around it: redacted all the same."""
    pytest.importorskip("litdata")
    import litdata

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError("InvalidAccessKeyId: the key AKIAHOSTILEKEY (secret Sup3rSecret) is not valid")

    # The client raises when the data set is built (vitlit's stream is a subclass of LitData's, made once).
    monkeypatch.setattr(litdata.StreamingDataset, "__init__", refuse)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data", "vitlit.data.streaming.StreamingDataModule",
                   "--data.input_dir", "s3://AKIAHOSTILEKEY:Sup3rSecret@bucket/x",
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "InvalidAccessKeyId" in line and "AKIAHOSTILEKEY" not in line and "Sup3rSecret" not in line


def test_a_credential_is_redacted_wherever_it_appears(monkeypatch: pytest.MonkeyPatch) -> None:
    from vitlit.text import clean

    monkeypatch.setattr(sys, "argv", ["vitlit", "fit", "--data.input_dir", "gs://tok%2Fen1234@bucket/x"])
    assert clean("denied for tok/en1234 and tok%2Fen1234") == "denied for *** and ***"
    assert clean("x" * 5000).endswith("(3,000 more)")  # an overlong name is cut


def test_prepare_lines_show_escapes(hostile_labels: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("litdata")
    out = tmp_path / "out\x1b[2J\nvitlit: forged"
    run_cli("prepare", "--data", "vitlit.data.hf.HFDataModule", "--data.path", hostile_labels, "--output", out)
    printed = capsys.readouterr()
    lines = (printed.out + printed.err).splitlines()
    assert not any(line.startswith("vitlit: forged") for line in lines)
    assert "\x1b" not in printed.out + printed.err and "out\\x1b[2J\\nvitlit: forged" in printed.out


@pytest.mark.parametrize("label", ESCAPES, ids=["clear", "title", "forged-line", "right-to-left"])
def test_a_label_a_terminal_acts_on_is_refused_with_its_characters_shown(
    label: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _parquet(tmp_path / "pq", [*HOSTILE[:9], label], 60)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data", "vitlit.data.hf.HFDataModule", "--data.path",
                   data, "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert ascii(label)[1:-1] in line and label not in line  # named, each character as its escape
    assert not (tmp_path / "runs").exists()
