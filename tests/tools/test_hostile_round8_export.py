"""Hostile round 8 (issue 73): the export's names and folders.

`vitlit export` refuses a file name its format does not write and creates a missing folder; a pt2 export prints
vitlit's line, not torch's logs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import warnings
from pathlib import Path

import pytest
import timm
import torch
from helpers.cli import carries, refused, run_cli, tiny_folder_fit

import vitlit.tools.export as export_module
from vitlit.errors import CheckFailed, ConfigError
from vitlit.tools.export import check_opset, export, sample_batch
from vitlit.tools.export import export_onnx as real_export_onnx
from vitlit.tools.hf_folder import write_timm_folder
from vitlit.trained import load_classifier


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


# Hostile round 8, later read: what an export writes, where, and what it takes from the checkpoint and its run.


def test_an_onnx_model_over_what_one_file_holds_is_refused_before_anything_is_written(
    ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ViT-H (2.5 GB) made torch write a file per weight beside the output (over a user's ``pos_embed``), then fail."""
    net, _ = load_classifier(ckpt)
    size = sum(t.numel() * t.element_size() for t in [*net.parameters(), *net.buffers()])
    monkeypatch.setattr(export_module, "ONNX_MAX_BYTES", size - 1, raising=False)  # this model, one byte over the bound
    (tmp_path / "pos_embed").write_text("mine")
    for format in ("onnx", "int8"):
        line = refused(capsys, "export", "--ckpt_path", ckpt, "--format", format, "--output",
                       tmp_path / "new" / "vit.onnx")  # fmt: skip
        carries(line, f"{size / 2**30:.2f} GiB", "2 GiB", "--format pt2", f"--format {format}")
    assert [p.name for p in tmp_path.iterdir()] == ["pos_embed"] and (tmp_path / "pos_embed").read_text() == "mine"
    monkeypatch.setattr(export_module, "ONNX_MAX_BYTES", size)  # at the bound: exported
    export(ckpt, tmp_path / "vit.onnx", "onnx")
    # The real bound, on a ViT-H built on the meta device (no memory): 632 M float32 weights are 2.35 GiB.
    monkeypatch.undo()
    with torch.device("meta"):
        huge = timm.create_model("vit_huge_patch14_224", num_classes=2)
    with pytest.raises(ConfigError, match=r"weights take 2\.35 GiB, more than one ONNX file holds"):
        export_module.check_onnx_size(huge, "onnx")


def test_the_onnx_exporter_writes_its_own_files_in_a_private_folder_not_beside_the_output(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's exporter writes external data (a file per weight, named after it) beside the file it is given."""
    beside = []

    def exporter_writing_beside(net: torch.nn.Module, batch: torch.Tensor, output: Path, opset: int = 17) -> None:
        beside.append(output.parent)
        (output.parent / "pos_embed").write_text("the exporter's")  # as external data would
        real_export_onnx(net, batch, output, opset)

    monkeypatch.setattr(export_module, "export_onnx", exporter_writing_beside)
    (tmp_path / "pos_embed").write_text("mine")
    for format, name in (("onnx", "vit.onnx"), ("int8", "vit-int8.onnx")):
        export(ckpt, tmp_path / name, format)
    assert (tmp_path / "pos_embed").read_text() == "mine" and len(beside) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["pos_embed", "vit.onnx", "vit.onnx.json", "vit-int8.onnx", "vit-int8.onnx.json"]
    )
    assert not [folder for folder in beside if folder.exists()]  # the private folders are gone too


@pytest.mark.parametrize("format", ["onnx", "timm"])
def test_a_failed_export_removes_the_folders_it_made_for_the_output(
    format: str, ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused check left ``a/b/`` behind, though a failed export leaves nothing."""
    monkeypatch.setattr(export_module, "TOLERANCE", -1.0)  # no difference passes: the check after the export fails
    (tmp_path / "kept").mkdir()
    output = tmp_path / "kept" / "a" / "b" / ("vit.onnx" if format == "onnx" else "vit")
    with pytest.raises(CheckFailed):
        export(ckpt, output, format)
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not list((tmp_path / "kept").iterdir())


@pytest.mark.parametrize("given", ["tilde", "relative"])
def test_a_checkpoint_path_with_a_tilde_or_relative_to_checkpoints_keeps_the_runs_facts(
    given: str, ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--ckpt_path=~/...`` (no shell expands it after ``=``) crashed; ``last.ckpt`` in checkpoints/ lost the run."""
    run = ckpt.parent.parent
    monkeypatch.setenv("HOME", str(run.parent))
    monkeypatch.chdir(ckpt.parent)
    export(f"~/{run.name}/checkpoints/{ckpt.name}" if given == "tilde" else ckpt.name, tmp_path / "vit", "timm")
    readme = (tmp_path / "vit" / "README.md").read_text()
    assert "run folder version" in readme and "- epochs the run trained: 1" in readme, readme
    assert "- data module: ImageFolderDataModule" in readme, readme


def test_export_images_with_a_tilde_is_the_folder(
    ckpt: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--images ~/folder`` was refused as not a folder, as nothing expanded it."""
    monkeypatch.setenv("HOME", str(digits_dir.parent))
    _, card = load_classifier(ckpt)
    torch.testing.assert_close(sample_batch(card, Path(f"~/{digits_dir.name}")), sample_batch(card, digits_dir))


@pytest.mark.parametrize("content", ["[]", '{"epochs_done": 3, "best', '{"test_acc_by_checkpoint": [0.5]}', "\xff"])
def test_a_damaged_run_card_leaves_the_run_facts_out_of_the_model_card(
    content: str, ckpt: Path, tmp_path: Path
) -> None:
    """A run_card.json that is not a JSON object ended the timm export in a traceback."""
    run = tmp_path / "run"
    shutil.copytree(ckpt.parent.parent, run)
    (run / "run_card.json").write_text(content, encoding="latin-1")
    export(run / "checkpoints" / ckpt.name, tmp_path / "vit", "timm")
    readme = (tmp_path / "vit" / "README.md").read_text()
    assert "- epochs the run trained:" not in readme and "- test accuracy: not measured for this checkpoint" in readme


def test_a_model_card_says_where_its_checkpoint_was_saved_beside_the_runs_facts(ckpt: Path, tmp_path: Path) -> None:
    """An early snapshot's card gave the run's epochs and best accuracy as its own: both files' cards were alike."""
    run = tmp_path / "run"
    shutil.copytree(ckpt.parent.parent, run)
    early = torch.load(run / "checkpoints" / ckpt.name, weights_only=True)
    early["epoch"], early["global_step"] = 0, 1  # as a snapshot saved one step in
    torch.save(early, run / "checkpoints" / "early.ckpt")
    last = torch.load(ckpt, weights_only=True, mmap=True)
    for name, saved in (
        ("early.ckpt", "epoch 0, step 1"),
        (ckpt.name, f"epoch {last['epoch']}, step {last['global_step']}"),
    ):
        export(run / "checkpoints" / name, tmp_path / name, "timm")
        readme = (tmp_path / name / "README.md").read_text()
        assert f"- this checkpoint: {saved}\n" in readme and "- the run's best validation accuracy: " in readme
    early["args"] = argparse.Namespace(note="a pickled object")  # read only with --weights_only false
    torch.save(early, run / "checkpoints" / "pickled.ckpt")
    export(run / "checkpoints" / "pickled.ckpt", tmp_path / "pickled", "timm", weights_only=False)
    assert "- this checkpoint: epoch 0, step 1\n" in (tmp_path / "pickled" / "README.md").read_text()


def test_a_timm_folder_says_a_centre_crop_whatever_the_base_models_config(ckpt: Path, tmp_path: Path) -> None:
    """timm kept a base model's ``crop_mode: squash`` (vit_medium_patch16_gap_384): its transform squashed images."""
    net, card = load_classifier(ckpt)
    net.pretrained_cfg = {**net.pretrained_cfg, "crop_mode": "squash", "test_input_size": (3, 24, 24),
                          "test_crop_pct": 0.5}  # fmt: skip
    batch = torch.zeros(2, 3, card.img_size, card.img_size)
    write_timm_folder(net, card, batch, tmp_path / "vit", ckpt, "other", 1e-3)
    saved = json.loads((tmp_path / "vit" / "config.json").read_text())["pretrained_cfg"]
    assert saved["crop_mode"] == "center" and "test_input_size" not in saved and "test_crop_pct" not in saved
    loaded = timm.create_model(f"local-dir:{tmp_path / 'vit'}", pretrained=True)
    config = timm.data.resolve_data_config({}, model=loaded, use_test_size=True)
    assert config["crop_mode"] == "center" and config["crop_pct"] == card.crop_pct
    assert config["input_size"] == (3, card.img_size, card.img_size)


def test_an_opset_refused_prints_nothing_but_its_line(capfd: pytest.CaptureFixture[str]) -> None:
    """The probe's refused export dumped 9 lines of TorchScript IR on the standard output."""
    with pytest.raises(ConfigError, match="opset=99 is not one this PyTorch can export"):
        check_opset(99)
    out, _ = capfd.readouterr()
    assert out == ""


@pytest.mark.parametrize(
    ("key", "value"),
    [("input_std", [0.0, 0.0, 0.0]), ("input_std", [1.0, -1.0, 1.0]), ("input_mean", ["red", "green", "blue"]),
     ("input_std", [True, 1, 1]), ("input_mean", [float("nan"), 0.5, 0.5]), ("input_std", [10**400, 1, 1])],
)  # fmt: skip
def test_a_checkpoints_normalisation_must_be_finite_numbers_and_a_positive_std(
    key: str, value: list, ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the length was checked: a zero std gave NaN logits, a word a traceback, True passed as 1."""
    checkpoint = torch.load(ckpt, weights_only=True)
    checkpoint["hyper_parameters"][key] = value
    torch.save(checkpoint, tmp_path / "crafted.ckpt")
    line = refused(capsys, "export", "--ckpt_path", tmp_path / "crafted.ckpt", "--output", tmp_path / "x.onnx")
    carries(line, key, "finite numbers", "crafted.ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["crafted.ckpt"]
