"""Hostile round 6, classes 3 and 4: `vitlit prepare` replaces only what it wrote, and a prepared data set is visible
whole or not at all; a fit refuses one whose parts disagree."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.cli import DIGITS_CONFIG, carries, cifar_archive, refused, run_cli

pytest.importorskip("litdata")

STREAM = ["--data", "vitlit.data.streaming.StreamingDataModule"]


def _prepare(out: Path, *extra: object):
    return run_cli("prepare", "--data", "DigitsDataModule", "--output", out, *extra)


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits as vitlit prepare writes them (copied, not written again, per test)."""
    _prepare(out := tmp_path_factory.mktemp("prepared") / "digits")
    return out


def _copy(digits: Path, out: Path) -> Path:
    shutil.copytree(digits, out, symlinks=True)
    return out


def test_overwrite_refuses_a_planted_index_and_a_users_file_among_prepares(
    digits: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = tmp_path / "planted"
    (planted / "vitlit").mkdir(parents=True)
    (planted / "vitlit" / "index.json").write_text("{}")
    (planted / "train").mkdir()
    (planted / "train" / "mywork.bin").write_bytes(b"mine")
    line = refused(capsys, "prepare", "--data", "DigitsDataModule", "--output", planted, "--overwrite", "true")
    assert "no vitlit prepare wrote" in line and (planted / "train" / "mywork.bin").read_bytes() == b"mine"
    out = _copy(digits, tmp_path / "digits")
    (out / "train" / "mywork.bin").write_bytes(b"mine")
    line = refused(capsys, "prepare", "--data", "DigitsDataModule", "--output", out, "--overwrite", "true")
    carries(line, out, "train/mywork.bin")
    assert (out / "train" / "mywork.bin").read_bytes() == b"mine"
    (out / "train" / "mywork.bin").unlink()
    out.chmod(0o750)
    _prepare(out, "--overwrite", "true", "--data.val_size", "0.5")  # as it was written: replaced
    assert out.stat().st_mode & 0o777 == 0o750
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".digits.")]  # nothing staged is left behind


def test_a_dangling_link_as_output_is_refused_and_its_target_never_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target")
    line = refused(capsys, "prepare", "--data", "DigitsDataModule", "--output", link)
    assert "is a symbolic link" in line and not (tmp_path / "target").exists()


def test_an_overwrite_killed_midway_leaves_the_earlier_data_set_whole(
    digits: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vitlit.data import prepare as module
    from vitlit.data.streaming import read_meta

    out = _copy(digits, tmp_path / "digits")
    before = read_meta(str(out))
    files = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def killed(*args: object) -> None:
        raise KeyboardInterrupt  # as Ctrl-C after the splits were written, before their description

    monkeypatch.setattr(module, "write_meta", killed)
    with pytest.raises(SystemExit):
        _prepare(out, "--overwrite", "true", "--data.val_size", "0.5")
    assert read_meta(str(out)) == before
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == files  # every split too
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".digits.")]
    fit = run_cli("fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", out, "--trainer.max_epochs", "1",
                  "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
                  "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert fit.trainer.global_step == 2


def test_a_fit_refuses_a_data_set_whose_splits_are_not_its_descriptions(
    digits: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, other = _copy(digits, tmp_path / "one"), _copy(digits, tmp_path / "other")
    chunk = next((other / "val").glob("*.bin"))  # another val split: one sample fewer, its index rewritten
    index = json.loads((other / "val" / "index.json").read_text())
    index["chunks"][0]["chunk_size"] -= 1
    (other / "val" / "index.json").write_text(json.dumps(index))
    assert chunk.is_file()
    shutil.rmtree(one / "val")
    shutil.copytree(other / "val", one / "val")  # the new val beside the old description, as a killed copy leaves it
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", one,
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "the val split is not the one vitlit's description was written with" in line
    assert not (tmp_path / "runs").exists()


def test_prepare_leaves_ctrl_c_to_the_process(digits: Path) -> None:
    """LitData's optimize installs a Ctrl-C handler of its own and leaves it: a later fit in the same process (a
    notebook) would hand Ctrl-C to it instead of stopping at the next step with a checkpoint."""
    import signal

    assert digits.is_dir() and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_description_without_its_keys_and_a_prepared_set_as_source_are_one_line(
    digits: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hostile round 6, class 6: a description without ``in_chans`` was a KeyError, ``prepare --data
    StreamingDataModule`` an AttributeError."""
    from vitlit.data.streaming import read_meta, write_meta

    out = _copy(digits, tmp_path / "copy")
    meta = read_meta(str(out))
    del meta["in_chans"]
    shutil.rmtree(out / "vitlit")
    write_meta(str(out), meta)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", out,
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "vitlit's description of the data set has no valid 'in_chans'" in line
    line = refused(capsys, "prepare", *STREAM, "--data.input_dir", digits, "--output", tmp_path / "again")
    assert "is a data set vitlit prepare wrote" in line and not (tmp_path / "again").exists()


def test_a_label_past_the_described_classes_and_a_split_too_small_are_one_line(
    digits: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hostile round 6, classes 6 and 7: a description with fewer class names than the labels ended in the loss's
    traceback; a split that leaves a process no batch was named by LitData's ``Dir(path=..., url=None)``."""
    from vitlit.data.streaming import read_meta, write_meta

    out = _copy(digits, tmp_path / "copy")
    meta = read_meta(str(out))
    meta["class_names"] = meta["class_names"][:5]  # the digits' labels go to 9
    shutil.rmtree(out / "vitlit")
    write_meta(str(out), meta)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", out, "--data.num_workers",
                   "0", "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    carries(line, "label", "5 classes")
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", digits,
                   "--data.batch_size", "4096", "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    carries(line, f"{digits}/train", "process 0 of 1", "4096")
    assert "Dir(" not in line


@pytest.mark.slow  # a signalled run in a process of its own
@pytest.mark.posix  # SIGINT to another process
def test_ctrl_c_while_litdata_writes_stops_with_130_and_leaves_nothing(digits_dir: Path, tmp_path: Path) -> None:
    """LitData's Ctrl-C handler ends its process with status 0: a prepare interrupted mid-write said nothing, exited
    0 and left its staged folder. Its writer now runs in a process of its own; this one stops as on any Ctrl-C."""
    import signal
    import subprocess
    import time

    from helpers.cli import vitlit_command

    out = tmp_path / "out"
    command = vitlit_command("prepare", "--data", "ImageFolderDataModule", "--data.root", digits_dir, "--output", out)
    prepare = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not any(tmp_path.glob(".out.*.partial/train")) and prepare.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # LitData has begun writing the training split
    prepare.send_signal(signal.SIGINT)
    said, _ = prepare.communicate(timeout=60)
    assert prepare.returncode == 130, said
    assert "vitlit: interrupted by SIGINT; nothing was saved" in said and "Traceback" not in said
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the output nor its staged folder


def test_prepare_extracts_a_cifar_archive_copied_by_hand_as_a_fit_does(
    tmp_path: Path, cifar_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prepare never called the data module's prepare_data(): CIFAR's archive copied by hand (--data.download false)
    was refused with words telling the user to copy it, as they had."""
    from torchvision.datasets import CIFAR10

    from vitlit.data.cifar import CIFARDataModule
    from vitlit.data.prepare import prepare

    data = tmp_path / "data"
    cifar_archive(cifar_dir, data, monkeypatch)
    cifar = CIFARDataModule(data_dir=data, download=False, val_size=16, num_workers=0)
    meta = prepare(cifar, str(tmp_path / "out"))
    assert meta["splits"]["val"] == 16 and meta["splits"]["train"] + 16 == len(cifar.train_set.dataset)
    assert (data / CIFAR10.base_folder / "data_batch_1").is_file() and meta["native_size"] == 32


def _hf_folder(root: Path, test_labels: list[int]) -> Path:
    """A Hugging Face data set of 40 training digits and a test split of ``len(test_labels)`` with those labels."""
    from datasets import ClassLabel, Dataset, Features
    from datasets import Image as HFImage
    from helpers.hf import digits_rows

    images, targets = digits_rows(40 + len(test_labels))
    features = Features({"image": HFImage(), "label": ClassLabel(names=[str(d) for d in range(10)])})
    root.mkdir()
    Dataset.from_dict({"image": images[:40], "label": targets[:40]}, features=features).to_parquet(
        str(root / "train-00000-of-00001.parquet")
    )
    Dataset.from_dict({"image": images[40:], "label": test_labels}, features=features).to_parquet(
        str(root / "test-00000-of-00001.parquet")
    )
    return root


def test_an_unlabelled_hf_test_split_is_left_out_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A test split of -1 (the hub's mark) is left alone by a fit; prepare refused the whole data set for it."""
    from vitlit.data.hf import HFDataModule
    from vitlit.data.prepare import prepare

    root = _hf_folder(tmp_path / "hf", [-1] * 12)
    meta = prepare(HFDataModule(path=str(root), num_workers=0, val_size=8), str(tmp_path / "out"))
    assert meta["splits"] == {"train": 32, "val": 8} and not (tmp_path / "out" / "test").exists()
    said = [line for line in capsys.readouterr().out.splitlines() if "the test split of" in line]
    assert len(said) == 1 and "its 12 images are -1" in said[0]


def test_a_channel_count_prepare_cannot_describe_is_refused_before_the_data_is_read(tmp_path: Path) -> None:
    """Two-channel images were written whole, then prepare refused its own description, naming the staged folder."""
    import torch
    from torch.utils.data import TensorDataset

    from vitlit.data.base import ImageClassificationDataModule
    from vitlit.data.prepare import prepare
    from vitlit.errors import ConfigError

    reads = []

    class TwoBands(ImageClassificationDataModule):
        @property
        def class_names(self) -> list[str]:
            return ["a", "b"]

        def train_dataset(self) -> TensorDataset:
            reads.append("train")
            return TensorDataset(torch.zeros(8, 2, 16, 16, dtype=torch.uint8), torch.arange(8) % 2)

    data = TwoBands(in_chans=2, mean=[0.5, 0.5], std=[0.25, 0.25], num_workers=0)
    with pytest.raises(ConfigError, match=r"^--data.in_chans 2: vitlit prepare writes images of 1, 3 or 4 channels"):
        prepare(data, str(tmp_path / "new" / "out"))
    assert reads == [] and list(tmp_path.iterdir()) == []


def test_a_refused_prepare_removes_the_folders_it_made_for_the_output(tmp_path: Path) -> None:
    """The output's parent folders were made before the data was read, and left behind by a refusal."""
    from vitlit.data.hf import HFDataModule
    from vitlit.data.prepare import prepare
    from vitlit.errors import ConfigError

    root = _hf_folder(tmp_path / "hf", [-1, 3, -1, 5])  # partly unlabelled: test refuses it, naming an image
    (tmp_path / "kept").mkdir()
    with pytest.raises(ConfigError, match="of the test split has no label"):
        prepare(HFDataModule(path=str(root), num_workers=0, val_size=8), str(tmp_path / "kept" / "a" / "b" / "out"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "kept"] and list((tmp_path / "kept").iterdir()) == []
