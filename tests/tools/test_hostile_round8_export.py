"""Hostile round 8 (issue 73): the export's names and folders.

`vitlit export` refuses a file name its format does not write and creates a missing folder; a pt2 export prints
vitlit's line, not torch's logs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from helpers.cli import carries, refused, run_cli, tiny_folder_fit

from vitlit.tools.export import export


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory, digits_dir: Path) -> Path:
    """The last checkpoint of a short fit of the tiny recipe on the digits folder."""
    fit = tiny_folder_fit(digits_dir, tmp_path_factory.mktemp("runs"))
    return Path(fit.trainer.log_dir) / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize(
    ("format", "name", "fix"),
    [("pt2", "x.onnx", ["x.pt2", "--format onnx"]), ("onnx", "x.pt2", ["x.onnx", "--format pt2"]),
     ("int8", "vit", ["vit.onnx"])],
)  # fmt: skip
def test_export_refuses_a_name_its_format_does_not_write_before_reading_anything(
    format: str, name: str, fix: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--format pt2 --output x.onnx`` exited 0 and wrote a torch.export archive named ``.onnx``."""
    missing = tmp_path / "nowhere.ckpt"  # never read: the name is refused first
    line = refused(capsys, "export", "--ckpt_path", missing, "--format", format, "--output", tmp_path / name)
    carries(line, name, *fix)
    assert "nowhere.ckpt" not in line and not list(tmp_path.iterdir())


def test_a_pt2_export_prints_its_line_and_no_raw_torch_log(ckpt: Path, tmp_path: Path, capfd) -> None:
    """torch logged "Expect archive file to be a file ending in .pt2" twice, for the staged file's name."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_cli("export", "--ckpt_path", ckpt, "--format", "pt2", "--output", tmp_path / "vit.pt2")
    out, err = capfd.readouterr()
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert lines and all(line.startswith("vitlit: ") for line in lines), lines
    assert not [w for w in caught if "torch" in w.filename], [str(w.message) for w in caught]
    program = torch.export.load(str(tmp_path / "vit.pt2")).module()
    assert program(torch.zeros(2, 3, 16, 16)).shape == (2, 10)


@pytest.mark.parametrize("format", ["pt2", "timm"])
def test_export_creates_a_missing_output_folder(format: str, ckpt: Path, tmp_path: Path) -> None:
    """The export refused ``--output new/vit.onnx`` where ``new/`` did not exist yet; prepare creates it."""
    output = tmp_path / "new" / "deeper" / ("vit.pt2" if format == "pt2" else "vit")
    export(ckpt, output, format)
    assert (output / "model.safetensors").is_file() if format == "timm" else Path(f"{output}.json").is_file()


@pytest.mark.parametrize("format", ["onnx", "timm"])
def test_export_still_refuses_a_file_or_a_dangling_link_where_a_folder_is_needed(
    format: str, ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    name = "vit.onnx" if format == "onnx" else "vit"
    for parent, said in ((tmp_path / "a-file" / "sub", "a-file"), (tmp_path / "dangling" / "sub", "dangling")):
        line = refused(capsys, "export", "--ckpt_path", ckpt, "--format", format, "--output", parent / name)
        carries(line, said, "--output")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "dangling"]
    assert (tmp_path / "a-file").read_text() == "mine" and not (tmp_path / "gone").exists()
