"""Untrusted bytes reach only the raster decoders vitlit chose, at every entry point that reads images.

PIL's EPS plugin hands a file to Ghostscript, a program: a file named ``x.png`` whose bytes are PostScript ran ``gs``
in ``fit``, ``predict``, ``export --images`` and ``serve``. A stand-in ``gs`` on PATH records every call; each entry
point must refuse such files (as images it cannot read) and the stand-in must never run.
"""

from __future__ import annotations

import base64
import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import DIGITS_CONFIG, run_cli
from PIL import EpsImagePlugin, Image

from vitlit.data.images import RASTER_FORMATS, open_image

QUICK = ["--trainer.max_steps", "2", "--trainer.limit_val_batches", "1", "--data.val_size", "16"]

#: Files that are no raster image, named like one: PostScript as text, EPS with its binary DOS header.
PROGRAMS = {
    "postscript.png": b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nnewpath 0 0 moveto 10 10 lineto stroke\n",
    "eps-binary.jpg": b"\xc5\xd0\xd3\xc6"
    + (30).to_bytes(4, "little")
    + (64).to_bytes(4, "little")
    + bytes(20)
    + b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    + bytes(8),
}


@pytest.fixture
def gs_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``gs`` first on PATH that appends its arguments to the returned file; PIL looks for it afresh."""
    folder = tmp_path / "bin"
    folder.mkdir()
    calls = tmp_path / "gs_calls.txt"
    (folder / "gs").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 0\n')
    (folder / "gs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(EpsImagePlugin, "gs_binary", None)  # PIL remembers the gs it found: find this one
    return calls


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, digits_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("untrusted")
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.default_root_dir", root,
                  *QUICK)  # fmt: skip
    return Path(fit.trainer.log_dir)


def _programs(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in PROGRAMS.items():
        (folder / name).write_bytes(data)
    return [folder / name for name in PROGRAMS]


def test_the_stand_in_runs_when_pil_opens_postscript_unrestricted(gs_calls: Path, tmp_path: Path) -> None:
    # Proof that the tests below would see a call: PIL as it is, in a fresh process with this PATH, runs it.
    (path,) = _programs(tmp_path / "files")[:1]
    code = f"from PIL import Image\ntry:\n    Image.open({str(path)!r}).load()\nexcept OSError:\n    pass\n"
    subprocess.run([sys.executable, "-c", code], check=True, env={"PATH": os.environ["PATH"]})
    assert gs_calls.exists() and str(path) in gs_calls.read_text()


def test_the_decoder_refuses_every_format_outside_the_allow_list(gs_calls: Path, tmp_path: Path) -> None:
    for path in _programs(tmp_path / "files"):
        with pytest.raises(OSError):
            open_image(path).load()
        with pytest.raises(OSError):
            open_image(path.open("rb"))
    assert not gs_calls.exists()
    assert "EPS" not in RASTER_FORMATS


def test_fit_names_the_file_and_runs_nothing(
    gs_calls: Path, digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "digits"
    shutil.copytree(digits_dir, data)
    _programs(data / "train" / "3")
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", data, "--trainer.default_root_dir", tmp_path / "out",
                *QUICK)  # fmt: skip
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("vitlit: error: image ") and "not an image of the formats vitlit reads" in line, line
    assert not gs_calls.exists() and not (tmp_path / "out").exists()


def test_predict_skips_the_file_and_runs_nothing(
    gs_calls: Path, run_dir: Path, digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inbox = tmp_path / "inbox"
    programs = _programs(inbox)
    good = next((digits_dir / "test" / "7").iterdir())
    shutil.copy(good, inbox / "seven.png")
    predict = run_cli("predict", "--config", run_dir / "config.yaml", "--ckpt_path", run_dir / "checkpoints" /
                      "last.ckpt", "--data.predict_dir", inbox)  # fmt: skip
    err = capsys.readouterr().err
    for path in programs:
        assert f"skipping {path}:" in err, err[-2000:]
    rows = list(csv.DictReader((Path(predict.trainer.log_dir) / "predictions.csv").open()))
    assert [row["source"] for row in rows] == [str(inbox / "seven.png")]
    assert not gs_calls.exists()


@pytest.mark.part("tools")
def test_export_checks_on_raster_images_only_and_runs_nothing(
    gs_calls: Path, run_dir: Path, digits_dir: Path, tmp_path: Path
) -> None:
    images = tmp_path / "images"
    _programs(images)
    shutil.copy(next((digits_dir / "test" / "1").iterdir()), images / "one.png")
    from vitlit.tools.export import export

    report = export(run_dir / "checkpoints" / "last.ckpt", tmp_path / "vit.pt2", "pt2", images=images)
    assert report["batch"] == 1  # the one raster image; the programs were left out
    assert not gs_calls.exists()


@pytest.mark.part("tools")
def test_serve_bounds_an_image_at_the_side_evaluation_resizes_to_and_refuses_float_pixels(tmp_path: Path) -> None:
    from vitlit.tools.serve import decode_image
    from vitlit.trained import ModelCard

    card = ModelCard("vit", ["a", "b"], img_size=224, in_chans=3, mean=[0.5] * 3, std=[0.5] * 3, crop_pct=0.9)
    assert card.stored_side == 248  # floor(224 / 0.9): at 224 the 7000 x 10 image below would be 35 M pixels
    buffer = io.BytesIO()
    Image.new("RGB", (7000, 10)).save(buffer, format="PNG")
    with pytest.raises(ValueError, match="resizing its shorter side to 248 gives 43,052,800 pixels"):
        decode_image({"image": base64.b64encode(buffer.getvalue()).decode()}, "RGB", card.stored_side)
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8), 0.5, dtype=np.float32)).save(buffer, format="TIFF")
    with pytest.raises(ValueError, match="the image has 32-bit float pixels of unknown range"):  # was read as black
        decode_image({"image": base64.b64encode(buffer.getvalue()).decode()}, "RGB", 32)


@pytest.mark.part("tools")
def test_serve_answers_a_client_error_and_runs_nothing(gs_calls: Path) -> None:
    from vitlit.tools.serve import decode_image

    for data in PROGRAMS.values():
        with pytest.raises(ValueError, match="not an image of the formats vitlit reads"):
            decode_image({"image": base64.b64encode(data).decode()}, "RGB", 32)
    assert not gs_calls.exists()
