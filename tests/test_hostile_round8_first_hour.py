"""Hostile round 8 (issue 73): the export's names and folders, and a new user's first hour with a fork.

`vitlit export` refuses a file name its format does not write and creates a missing folder; a pt2 export prints
vitlit's line, not torch's logs. The commands a fork's fit ends with carry the ``PYTHONPATH`` its module needs; the
epoch line's ETA ends with the time budget; the docs and the refusal give one ``label_smoothing`` for a loss of
one's own.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from helpers.cli import CPU, ROOT, TINY_CONFIG, TINY_MODEL, carries, refused, run_cli, tiny_folder_fit
from lightning.pytorch.callbacks import Timer

from vitlit.errors import ConfigError
from vitlit.model import ViTClassifier
from vitlit.runs import run_card
from vitlit.runs.progress import epoch_line
from vitlit.tools.export import export

FORK = "coco_data_r8"  # a module name no other test imports: sys.modules keeps what a test imported


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


def _next_commands(err: str) -> list[str]:
    """The commands the fit's summary offers (``next`` and the lines below it)."""
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("next "))
    return [lines[start].split("next", 1)[1].strip()] + [line.strip() for line in lines[start + 1 : start + 3]]


def test_a_forks_next_commands_carry_the_pythonpath_its_module_needs(
    tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pasted into a new shell, ``python -m vitlit test --config ...`` failed: "No module named 'coco_data'"."""
    fork = tmp_path / "fork"
    fork.mkdir()
    (fork / f"{FORK}.py").write_text(
        "from vitlit import ImageFolderDataModule\n\n\n"
        'class CocoData(ImageFolderDataModule):\n    """A fork\'s data module, in a module of its own."""\n'
    )
    monkeypatch.chdir(tmp_path)  # the paths printed are the ones to type here
    monkeypatch.syspath_prepend(str(fork))  # what `PYTHONPATH=fork vitlit fit` does
    monkeypatch.setenv("PYTHONPATH", str(fork))
    monkeypatch.delitem(sys.modules, FORK, raising=False)
    monkeypatch.setattr(run_card, "_near_chance", lambda card, trainer: None)  # a short run learns little
    run_cli(
        "fit", "--config", TINY_CONFIG, *CPU, *TINY_MODEL, "--data", f"{FORK}.CocoData", "--data.root", digits_dir,
        "--data.img_size", "16", "--data.batch_size", "4", "--data.num_workers", "0", "--data.val_size", "4",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
    )  # fmt: skip
    test, predict, _export = _next_commands(capsys.readouterr().err)
    for command in (test, predict):
        env, *argv = shlex.split(command)
        assert env == "PYTHONPATH=fork" and argv[:3] == ["python", "-m", "vitlit"], command
    # In a new shell (no PYTHONPATH) in this folder: the module is found with the prefix, and only with it.
    fresh = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # Found, not imported: importing it would load torch (seconds); a module not found is what the commands met.
    imports = [sys.executable, "-c", f"import importlib.util, sys; sys.exit(not importlib.util.find_spec('{FORK}'))"]
    assert subprocess.run(imports, env=fresh, cwd=tmp_path, capture_output=True).returncode != 0
    assert subprocess.run(imports, env={**fresh, "PYTHONPATH": "fork"}, cwd=tmp_path).returncode == 0


def test_classes_of_installed_packages_need_no_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """vitlit (an editable install's folder), Lightning (site-packages): no prefix; a PYTHONPATH folder: quoted."""
    monkeypatch.delenv("PYTHONPATH", raising=False)  # vitlit itself from a PYTHONPATH folder would need it too
    config = "model:\n  class_path: vitlit.model.ViTClassifier\ntrainer:\n  callbacks:\n  - class_path: " \
             "lightning.pytorch.callbacks.Timer\n"  # fmt: skip
    assert run_card._pythonpath(config) == ""
    folder = tmp_path / "my forks"  # a space: the prefix is quoted for the shell
    folder.mkdir()
    (folder / f"{FORK}_b.py").write_text("X = 1\n")
    monkeypatch.setattr(sys, "path", [sys.path[0], str(folder), *sys.path[1:]])  # second, as PYTHONPATH puts it
    monkeypatch.setenv("PYTHONPATH", str(folder))
    monkeypatch.delitem(sys.modules, f"{FORK}_b", raising=False)
    __import__(f"{FORK}_b")
    prefix = run_card._pythonpath(f"{config}data:\n  class_path: {FORK}_b.X\n")
    assert shlex.split(prefix) == [f"PYTHONPATH={folder}"], prefix


def test_the_epoch_lines_eta_ends_with_the_time_budget() -> None:
    """``ETA 10388 s`` from max_epochs 1000 on a 4-minute budget: the budget ends the run first."""
    metrics = {"train/loss": torch.tensor(1.0)}
    budget = Timer(duration=timedelta(minutes=4))  # not started: all 240 s left
    trainer = SimpleNamespace(current_epoch=2, max_epochs=1000, callback_metrics=metrics, callbacks=[budget])
    line = epoch_line(trainer, seconds=31.2, epochs_timed=3)
    assert re.search(r"ETA 240 s\b", line) and "10" not in line.split("ETA")[1], line
    trainer.callbacks = []  # no budget: the epochs left
    assert "ETA 10369 s" in epoch_line(trainer, seconds=31.2, epochs_timed=3)
    trainer.max_epochs, trainer.callbacks = 5, [budget]  # the epochs end first
    assert re.search(r"ETA 21 s$", epoch_line(trainer, seconds=31.2, epochs_timed=3))
    trainer.max_epochs = -1  # max_time alone (Lightning's max_epochs -1)
    assert re.search(r"ETA 240 s\b", epoch_line(trainer, seconds=31.2, epochs_timed=3))


def test_the_docs_and_the_refusal_give_one_label_smoothing_for_a_loss_of_ones_own() -> None:
    """docs/your-data.md said ``--model.label_smoothing null``, the refusal ``0``: both work; they now say one."""
    docs = (ROOT / "docs" / "your-data.md").read_text(encoding="utf-8")
    (given,) = re.findall(r"--model\.loss your_module\.FocalLoss.*?--model\.label_smoothing ([^`]+)`", docs, re.S)

    def model(label_smoothing: object) -> ViTClassifier:
        return ViTClassifier("test_vit", num_classes=4, img_size=32, patch_size=4, pretrained=False,
                             loss=torch.nn.CrossEntropyLoss(), label_smoothing=label_smoothing)  # fmt: skip

    with pytest.raises(ConfigError) as refusal:
        model(0.1)
    assert f"--model.label_smoothing {given}." in str(refusal.value), (given, str(refusal.value))
    assert model(yaml.safe_load(given)).criterion.label_smoothing == 0.0  # the value as the CLI reads it: taken
