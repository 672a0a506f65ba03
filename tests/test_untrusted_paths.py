"""Hostile round 6, class 1: a data set's rows and metadata reach no file outside the data set's own folder.

A Hugging Face row names a ``path`` beside (or instead of) its bytes, and a ``save_to_disk`` folder names its Arrow
files in ``state.json``: the one admission (`vitlit.data.table.file_inside`, the rows' rule for one file) keeps every
read inside the data set's folder, for fit and for ``prepare`` alike, before anything is read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.cli import DIGITS_CONFIG, refused, run_cli
from helpers.hf import digits_rows, write_rows, write_saved

pytest.importorskip("datasets")

HF = ["--data", "vitlit.data.hf.HFDataModule"]
SHORT = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
SECRET = b"root:x:0:0:root:/root:/bin/bash\n"


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "elsewhere" / "passwd"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    return secret


def test_prepare_copies_a_rows_bytes_never_the_file_its_path_names(tmp_path: Path) -> None:
    pytest.importorskip("litdata")
    images, targets = digits_rows(300)
    secret = _secret(tmp_path)
    images = [dict(image, path=str(secret)) for image in images]  # valid bytes, and a path to a file elsewhere
    folder = tmp_path / "pq"
    write_rows(folder / "train-00000-of-00001.parquet", images, targets)
    out = tmp_path / "chunks"
    run_cli("prepare", *HF, "--data.path", folder, "--output", out, "--format", "encoded")
    chunks = b"".join(p.read_bytes() for p in out.rglob("*.bin"))
    assert SECRET not in chunks and b"\x89PNG" in chunks  # the rows' own PNG bytes, not the named file


@pytest.mark.parametrize("where", ["absolute", "dotdot"])
def test_a_row_naming_only_a_file_outside_the_data_set_is_refused_or_skipped(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images, targets = digits_rows(300)
    secret = _secret(tmp_path)
    folder = tmp_path / "pq"
    images[5] = {"bytes": None, "path": str(secret) if where == "absolute" else "../elsewhere/passwd"}
    write_rows(folder / "train-00000-of-00001.parquet", images, targets)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", folder, *SHORT,
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "a file outside the data set's folder" in line and "bad_images skip" in line
    assert not (tmp_path / "runs").exists()
    fit = run_cli("fit", "--config", DIGITS_CONFIG, *HF, "--data.path", folder, *SHORT, "--data.bad_images", "skip",
                  "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert len(fit.datamodule.skipped) == 1


def test_a_row_naming_a_file_inside_the_data_set_trains_from_it(tmp_path: Path) -> None:
    images, targets = digits_rows(300)
    folder = tmp_path / "pq"
    (folder / "images").mkdir(parents=True)
    for i in range(0, 300, 7):  # every seventh row names its PNG beside the table instead of embedding it
        (folder / "images" / f"{i}.png").write_bytes(images[i]["bytes"])
        images[i] = {"bytes": None, "path": f"images/{i}.png"}
    write_rows(folder / "train-00000-of-00001.parquet", images, targets)
    fit = run_cli("fit", "--config", DIGITS_CONFIG, *HF, "--data.path", folder, *SHORT,
                  "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert not fit.datamodule.skipped and fit.trainer.global_step == 2


@pytest.mark.parametrize("named", ["same", "alias", "missing"])
def test_rows_naming_one_file_twice_or_a_missing_one_are_refused_as_a_tables(
    named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test rows naming the training files were accepted (an info line on byte copies), where labels.csv's are
    refused; a missing file inside the folder was called one outside it."""
    images, targets = digits_rows(40)
    folder = tmp_path / "pq"
    (folder / "images").mkdir(parents=True)
    for i in range(40):
        (folder / "images" / f"{i}.png").write_bytes(images[i]["bytes"])
    (folder / "images" / "alias.png").symlink_to(folder / "images" / "0.png")
    train = [{"bytes": None, "path": f"images/{i}.png"} for i in range(30)]
    test = [{"bytes": None, "path": f"images/{i}.png"} for i in range(30, 40)]
    (train if named == "missing" else test)[2]["path"] = {"same": "images/0.png", "alias": "images/alias.png",
                                                          "missing": "images/none.png"}[named]  # fmt: skip
    write_rows(folder / "train-00000-of-00001.parquet", train, targets[:30])
    write_rows(folder / "test-00000-of-00001.parquet", test, targets[30:])
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", folder, *SHORT,
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    said = {"same": "0.png is listed twice, as the train row 0 and the test row 2",
            "alias": "alias.png is listed twice (as",
            "missing": "missing: 'images/none.png' is no file in"}[named]  # fmt: skip
    assert said in line, line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["absolute", "../outside.arrow", "split"])
def test_a_saved_data_set_naming_files_outside_its_folder_is_refused_before_reading(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = write_saved(tmp_path / "other", n=40)  # a real Arrow file, elsewhere
    folder = write_saved(tmp_path / "saved", n=40)
    if name == "split":
        meta = folder / "dataset_dict.json"
        meta.write_text(json.dumps({"splits": ["../other/train"]}))
        said = "names the split '../other/train'"
    else:
        state = folder / "train" / "state.json"
        value = json.loads(state.read_text())
        arrow = next((other / "train").glob("*.arrow"))
        value["_data_files"] = [{"filename": str(arrow) if name == "absolute" else name}]
        state.write_text(json.dumps(value))
        said = "names the data file"
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", folder,
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert said in line and "only name files inside its folder" in line
