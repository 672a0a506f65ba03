"""The data formats' rules found by the data review: split folders spelt otherwise, links to a file already listed,
a Hugging Face split's own class labels, labels no training row has, float targets, splits that skipping empties,
labels equal in value but not in type, class names alike in Unicode, files checked before the run, line numbers."""

from __future__ import annotations

import io
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import TensorDataset

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.csv_table import CSVImageDataModule
from vitlit.data.folder import ImageFolderDataModule
from vitlit.data.images import image_problem
from vitlit.data.table import ItemTableDataModule
from vitlit.errors import ConfigError


def _png(path: Path, seed: int) -> None:
    """A distinct 16 x 16 RGB PNG."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(path)


def _classes(root: Path, folders: dict[str, int]) -> Path:
    """``root/<folder>/{a,b}/<n>.png`` for each folder and count."""
    for f, (folder, n) in enumerate(folders.items()):
        for c, name in enumerate(("a", "b")):
            for i in range(n):
                _png(root / folder / name / f"{i}.png", 1000 * f + 100 * c + i)
    return root


@pytest.mark.parametrize(
    ("folders", "named", "split"),
    [
        ({"Train": 3, "Test": 2}, "Test", "test"),  # flat layout: the split folders became two classes
        ({"train": 3, "validation": 2}, "validation", "val"),  # left out: validation was carved from train
        ({"train": 3, "dev": 2}, "dev", "val"),
        ({"train": 3, "Testing": 2}, "Testing", "test"),
    ],
)
def test_a_split_folder_in_another_spelling_is_refused(
    tmp_path: Path, folders: dict[str, int], named: str, split: str
) -> None:
    root = _classes(tmp_path / "data", folders)
    with pytest.raises(ConfigError, match=rf"^{root / named} is named as the {split} split .* rename it to {split}/"):
        _ = ImageFolderDataModule(root, num_workers=0).class_names


def test_the_split_folders_as_spelt_still_work(tmp_path: Path) -> None:
    root = _classes(tmp_path / "data", {"train": 3, "val": 2, "test": 2})
    data = ImageFolderDataModule(root, num_workers=0)
    assert data.class_names == ["a", "b"] and len(data.val_dataset()) == 4 and len(data.test_dataset()) == 4
    for name in ("Test", "dev", "cat"):  # a flat layout's classes may be named so (not every one a split)
        for i in range(3):
            _png(tmp_path / "flat" / name / f"{i}.png", i)
    assert ImageFolderDataModule(tmp_path / "flat", num_workers=0).class_names == ["Test", "cat", "dev"]


def test_a_link_to_another_class_folder_is_refused(tmp_path: Path) -> None:
    root = _classes(tmp_path / "data", {"train": 3})
    os.symlink("../b", root / "train" / "a" / "more")  # b's images under the label a too
    with pytest.raises(ConfigError, match=r"are the same folder .* reached through a symbolic link"):
        _ = ImageFolderDataModule(root, num_workers=0).class_names


def test_a_folder_that_links_to_a_sibling_is_refused_before_any_file_is_listed(tmp_path: Path) -> None:
    """A reader of the first files only (`vitlit export --images`' sample) meets the refusal too: a folder's
    sub-folders are checked as it is listed (a fold of the check into the walk read through the link: a review's)."""
    from vitlit.data.images import image_files

    _png(tmp_path / "images" / "first.png", 0)
    _png(tmp_path / "images" / "x" / "1.png", 1)
    os.symlink("x", tmp_path / "images" / "a")  # sorts before x: the walk would enter it first
    with pytest.raises(ConfigError, match=r"are the same folder .* reached through a symbolic link"):
        next(iter(image_files(tmp_path / "images")))


def test_a_test_class_folder_that_links_to_training_is_refused(tmp_path: Path) -> None:
    root = _classes(tmp_path / "data", {"train": 3})
    (root / "test").mkdir()
    os.symlink("../train/a", root / "test" / "a")  # test/a is train/a: every test image a training one
    with pytest.raises(ConfigError, match=rf"{root / 'test' / 'a'} and {root / 'train' / 'a'} are the same folder"):
        _ = ImageFolderDataModule(root, num_workers=0).class_names


def _csv(root: Path, extra: str) -> CSVImageDataModule:
    for i in range(6):
        _png(root / "img" / f"{i}.png", i)
    rows = "".join(f"img/{i}.png,{'ab'[i % 2]},train\n" for i in range(6))
    (root / "labels.csv").write_text("filename,label,split\n" + rows + extra)
    return CSVImageDataModule(root, num_workers=0, val_size=1)


def test_a_link_to_a_listed_file_is_that_file(tmp_path: Path) -> None:
    root = tmp_path / "data"
    data = _csv(root, "img/alias0.png,a,test\n")
    os.symlink("0.png", root / "img" / "alias0.png")  # in test, the training image img/0.png by another name
    with pytest.raises(ConfigError, match=r"alias0\.png is listed twice \(as .*img/0\.png too, a link to the same"):
        _ = data.class_names
    data = _csv(tmp_path / "data2", "same/0.png,b,train\n")
    os.symlink("img", tmp_path / "data2" / "same")  # the same file with a second label, through a folder link
    with pytest.raises(ConfigError, match=r"same/0\.png is listed twice .* the train row 0 and the train row 6"):
        _ = data.class_names


def test_labels_equal_in_value_but_not_in_type_are_each_checked(tmp_path: Path) -> None:
    class Fork(ItemTableDataModule):
        def __init__(self, labels: list[Any], **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.root, self.labels = tmp_path, labels

        def scan(self) -> dict:
            return {"train": [(f"img/{i}.png", label) for i, label in enumerate(self.labels)]}

    for i in range(4):
        _png(tmp_path / "img" / f"{i}.png", i)
    with pytest.raises(ConfigError, match=r"train row 2 .*the label True is a bool"):
        _ = Fork([1, 0, True, False], num_workers=0).class_names
    with pytest.raises(ConfigError, match=r"train row 2 .*the label 2\.0 is a float"):
        _ = Fork([2, 0, 2.0, 0], num_workers=0).class_names


@pytest.mark.parametrize(("first", "second"), [("café", "cafe\u0301"), ("big cat", "big\xa0cat")])
def test_classes_alike_in_unicode_are_refused_naming_both(tmp_path: Path, first: str, second: str) -> None:
    root = tmp_path / "data"
    for i in range(4):
        _png(root / f"{i}.png", i)
    (root / "labels.csv").write_text(f"filename,label\n0.png,{first}\n1.png,{second}\n2.png,tea\n3.png,tea\n")
    with pytest.raises(ConfigError, match="differ only in their Unicode encoding or spaces") as refused:
        _ = CSVImageDataModule(root, num_workers=0, val_size=1).class_names
    assert ascii(first) in str(refused.value) and ascii(second) in str(refused.value)  # the difference, visible
    (root / "labels.csv").write_text("filename,label\n0.png,m\u00b2\n1.png,m2\n2.png,tea\n3.png,tea\n")
    assert CSVImageDataModule(root, num_workers=0, val_size=1).class_names == ["m2", "m\u00b2", "tea"]  # not alike


def test_skip_that_empties_a_split_is_refused_naming_it(tmp_path: Path) -> None:
    root = _classes(tmp_path / "data", {"train": 4})
    for name in ("a", "b"):
        (root / "val" / name).mkdir(parents=True)
        (root / "val" / name / "0.png").write_bytes(b"\x89PNG\r\n\x1a\ncut short")
    data = ImageFolderDataModule(root, num_workers=0, bad_images="skip")
    assert len(data.train_dataset()) == 8
    with pytest.raises(ConfigError, match=r"^every image of the val split is unreadable \(2, the first: .*skip would"):
        data.val_dataset()


class _TensorFork(ImageClassificationDataModule):
    """Two classes in a TensorDataset whose targets are given."""

    def __init__(self, targets: torch.Tensor, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.labels = targets

    @property
    def class_names(self) -> list[str]:
        return ["a", "b"]

    def train_dataset(self) -> TensorDataset:
        return TensorDataset(torch.zeros(len(self.labels), 3, 8, 8, dtype=torch.uint8), self.labels)


@pytest.mark.parametrize(
    ("targets", "said"),
    [
        (torch.tensor([0.0, 1.7] * 4), "item 1 of _TensorFork's TensorDataset has the label 1.7 (torch.float32)"),
        (torch.tensor([0.0, float("nan")] * 4), "item 1 of _TensorFork's TensorDataset has the label nan"),
    ],
)
def test_targets_that_are_no_integers_are_refused(targets: torch.Tensor, said: str) -> None:
    data = _TensorFork(targets, num_workers=0)
    with pytest.raises(ConfigError, match="not a class index; give it integer targets") as refused:
        data._check_labels(data.train_dataset())
    assert str(refused.value).startswith(said)
    whole = data.train_dataset()
    for fine in (torch.tensor([0.0, 1.0] * 4), torch.tensor([False, True] * 4)):  # whole floats, bools: 0 and 1
        whole.tensors = (whole.tensors[0], fine)
        assert data._check_labels(whole) is whole and data.targets_of(whole) == [0, 1] * 4


class _UnlabelledTestFork(_TensorFork):
    """A fork with its own test split, given as a TensorDataset whose labels are ``test_labels``."""

    test_labels = torch.tensor([-1, -1, -1])

    def test_dataset(self) -> TensorDataset:
        return TensorDataset(torch.zeros(len(self.test_labels), 3, 8, 8, dtype=torch.uint8), self.test_labels)


def test_a_forks_unlabelled_test_split_is_refused_for_test_and_read_by_predict() -> None:
    """-1 (the hub's unlabelled row) in a test split: the item table's rule, now the base class's for every format."""
    data = _UnlabelledTestFork(torch.tensor([0, 1] * 4), num_workers=0)
    with pytest.raises(ConfigError, match=r"_UnlabelledTestFork: the test split has no labels .*3 rows.* predict"):
        data.setup("test")
    data.setup("predict")  # predict classifies it
    assert len(data.predict_set) == 3
    data = _UnlabelledTestFork(torch.tensor([0, 1] * 4), num_workers=0)
    data.test_labels = torch.tensor([1, -1, -1])
    with pytest.raises(ConfigError, match=r"item 1 of the test split has no label \(-1\), as 2 of its 3 rows"):
        data.setup("test")


def test_a_csv_error_names_the_line_an_editor_shows(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "img").mkdir(parents=True)
    (root / "labels.csv").write_text('filename,label\nimg/0.png,cat\n\nimg/1.png,"dog\nbreed"\nimg/2.png,\n')
    with pytest.raises(ConfigError, match=r"labels\.csv line 6: the label is empty"):
        _ = CSVImageDataModule(root, num_workers=0).class_names


def test_a_folder_named_as_an_image_is_called_a_folder(tmp_path: Path) -> None:
    (tmp_path / "x.png").mkdir()
    assert image_problem(tmp_path / "x.png") == "not a regular file (a folder)"


def test_missing_svhn_files_are_refused_when_the_module_is_built(tmp_path: Path) -> None:
    pytest.importorskip("scipy")
    from vitlit.data.svhn import SVHNDataModule

    with pytest.raises(ConfigError, match=r"train_32x32\.mat is missing or damaged in"):
        SVHNDataModule(tmp_path, download=False)
    _png(tmp_path / "inbox" / "0.png", 0)
    SVHNDataModule(tmp_path, download=False, predict_dir=str(tmp_path / "inbox"))  # a folder's predict: no .mat file


def test_a_damaged_cifar_archive_with_download_false_is_named_not_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vitlit.data.cifar import CIFARDataModule

    asked: list[Any] = []

    def offline(request: Any, *args: Any, **kwargs: Any) -> None:
        asked.append(request)
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"cut short" * 100)
    data = CIFARDataModule(data_dir=tmp_path, download=False, num_workers=0)
    with pytest.raises(ConfigError, match=r"cifar-10-python\.tar\.gz is not cifar10's original archive"):
        data.prepare_data()
    assert asked == []


def _hf_dataset(splits: dict[str, list[str]], path: Path, names: list[str] | None = None) -> Path:
    """A saved DatasetDict; each split's labels a ClassLabel of ``names``, else of that split's own labels."""
    datasets = pytest.importorskip("datasets")
    tables = {}
    for seed, (split, labels) in enumerate(splits.items()):
        images = []
        for i in range(len(labels)):
            buffer = io.BytesIO()
            Image.fromarray(np.full((8, 8, 3), 10 * seed + i, dtype=np.uint8)).save(buffer, "PNG")
            images.append({"bytes": buffer.getvalue(), "path": None})
        label = datasets.ClassLabel(names=names or sorted(set(labels)))  # as class_encode_column gives, split alone
        features = datasets.Features({"image": datasets.Image(), "label": label})
        tables[split] = datasets.Dataset.from_dict({"image": images, "label": labels}, features=features)
    datasets.DatasetDict(tables).save_to_disk(str(path))
    return path


def test_a_hugging_face_split_with_its_own_class_labels_is_read_by_name(tmp_path: Path) -> None:
    from vitlit.data.hf import HFDataModule

    path = _hf_dataset({"train": ["cat", "dog"] * 4, "test": ["dog"] * 3}, tmp_path / "ds")  # test's: [dog]
    data = HFDataModule(str(path), num_workers=0, val_size=2)
    assert data.class_names == ["cat", "dog"] and data.test_dataset().targets == [1, 1, 1]
    path = _hf_dataset({"train": ["cat", "dog"] * 4, "test": ["bird", "dog"]}, tmp_path / "other")
    with pytest.raises(ConfigError, match=r"test row 0: label 'bird' \(ClassLabel 0\) is none of the 2 classes"):
        _ = HFDataModule(str(path), num_workers=0, val_size=2).class_names


def test_a_hugging_face_label_no_training_row_has_is_refused(tmp_path: Path) -> None:
    from vitlit.data.hf import HFDataModule

    splits = {"train": ["cat", "dog"] * 4, "validation": ["bird", "cat"]}  # bird: a class, but no training row's
    path = _hf_dataset(splits, tmp_path / "ds", names=["bird", "cat", "dog"])
    with pytest.raises(ConfigError, match=r"val rows have labels no training row has: bird; "):
        _ = HFDataModule(str(path), num_workers=0).class_names


class _ImagesFork(_TensorFork):
    """Training images as ``images`` holds them; a validation split whose labels are ``val_labels``, where given."""

    images: torch.Tensor | None = None
    val_labels: torch.Tensor | None = None

    def train_dataset(self) -> TensorDataset:
        images = torch.zeros(len(self.labels), 3, 8, 8, dtype=torch.uint8) if self.images is None else self.images
        return TensorDataset(images, self.labels)

    def val_dataset(self) -> TensorDataset | None:
        if self.val_labels is None:
            return None
        return TensorDataset(torch.zeros(len(self.val_labels), 3, 8, 8, dtype=torch.uint8), self.val_labels)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"val_labels": torch.tensor([0, 1, 2, 0])}, r"^validation item 2 of _ImagesFork has the label 2"),
        ({"images": torch.rand(8, 3, 8, 8)}, r"are torch.float32 tensors, but vitlit reads uint8 images .* ToTensor"),
        ({"images": torch.zeros(8, 8, 8, 3, dtype=torch.uint8)}, r"are \(8, 8, 3\), channels last; .*permute"),
    ],
    ids=["validation-label", "float-images", "channels-last"],
)
def test_a_forks_validation_labels_and_first_image_are_checked_before_the_run(change: dict, said: str) -> None:
    """The data review: each was a traceback mid-run (the loss's IndexError, the pipeline's ValueError) or the advice
    to pass --data.in_chans 8, which the next check refused."""
    data = _ImagesFork(torch.tensor([0, 1] * 4), num_workers=0, val_size=2)
    for name, value in change.items():
        setattr(data, name, value)
    with pytest.raises(ConfigError, match=said):
        data.setup("fit")


class _OptionalTestFork(_TensorFork):
    """A fork whose test file is optional: without one it hands back the base class's ``test_dataset()``."""

    def test_dataset(self) -> TensorDataset:
        return super().test_dataset()


def test_a_test_dataset_of_none_through_super_is_refused_not_drawn_from_training() -> None:
    """The data review: fit held nothing out (the method is overridden), and test then held out images it had
    trained or validated on; predict and prepare were tracebacks."""
    data = _OptionalTestFork(torch.tensor([0, 1] * 20), num_workers=0, val_size=4)
    data.setup("fit")
    for stage in ("test", "predict"):
        with pytest.raises(ConfigError, match=r"^_OptionalTestFork.test_dataset\(\) returned None, .* remove the"):
            data.setup(stage)
