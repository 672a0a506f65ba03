"""Data modules over real on-disk formats: CIFAR's pickles and PNG class folders."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from vitlit.data import ImageFolderDataModule
from vitlit.data.base import split_indices
from vitlit.data.cifar import CIFARDataModule
from vitlit.data.pipeline import DeviceTransform
from vitlit.errors import ConfigError


def test_split_is_seeded_disjoint_and_complete() -> None:
    train, val = split_indices(100, 0.2, seed=1)
    assert len(val) == 20 and sorted(train + val) == list(range(100))
    assert split_indices(100, 0.2, seed=1) == (train, val)
    assert split_indices(100, 0.2, seed=2)[1] != val
    assert len(split_indices(100, 7, seed=1)[1]) == 7


def _cifar(cifar_dir: Path, **kwargs) -> CIFARDataModule:
    return CIFARDataModule(data_dir=cifar_dir, download=False, val_size=16, num_workers=0, batch_size=8, **kwargs)


def test_cifar_reads_torchvision_files_and_keeps_test_apart(cifar_dir: Path) -> None:
    data = _cifar(cifar_dir)
    data.setup("fit")
    assert (len(data.train_set), len(data.val_set), data.test_set) == (64, 16, None)  # test untouched by fit
    images, labels = next(iter(data.train_dataloader()))
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    images, _ = data.on_after_batch_transfer((images, labels), 0)  # the training device's part of the pipeline
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.float32
    assert data.class_names[:2] == ["airplane", "automobile"]
    data.setup("test")
    assert len(data.test_set) == 24


def test_cifar_normalises_with_its_statistics(cifar_dir: Path) -> None:
    data = _cifar(cifar_dir)
    data.setup("fit")
    raw, _ = data.val_set.dataset[data.val_set.indices[0]]
    expected = torch.tensor(list(raw.getdata()), dtype=torch.float32).T.reshape(3, 32, 32) / 255
    expected = (expected - torch.tensor(data.mean)[:, None, None]) / torch.tensor(data.std)[:, None, None]
    torch.testing.assert_close(data.device_transform(train=False)(data.val_set[0][0][None])[0], expected)
    assert data.mean == [0.4914, 0.4822, 0.4465]


def test_cifar100_and_resizing_for_patch16_models(cifar_dir: Path) -> None:
    data = _cifar(cifar_dir, dataset="cifar100", img_size=64)
    assert data.num_classes == 100
    data.setup("fit")
    assert data.train_set[0][0].shape == (3, 32, 32)  # stored at CIFAR's own size; resized on the device
    images, _ = data.on_after_batch_transfer(next(iter(data.val_dataloader())), 0)
    assert images.shape == (8, 3, 64, 64)
    assert data.device_transform(train=True)(data.train_set[0][0][None]).shape[-1] == 64
    assert len(data.class_names) == 100


def test_the_pipeline_crops_and_flips_in_training_and_evaluates_deterministically() -> None:
    image = (torch.arange(32 * 32 * 3) % 251).reshape(3, 32, 32).to(torch.uint8)
    batch = image.expand(64, -1, -1, -1)
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    evaluate = DeviceTransform(32, mean, std)
    reference = evaluate(image[None])[0]
    assert torch.equal(evaluate(batch), reference.expand(64, -1, -1, -1))

    outputs = DeviceTransform(32, mean, std, hflip=True)(batch)
    flipped = sum(torch.equal(out, reference.flip(-1)) for out in outputs)
    unchanged = sum(torch.equal(out, reference) for out in outputs)
    assert flipped + unchanged == 64 and 10 < flipped < 54  # each output is the image or its mirror, about half

    padded = torch.nn.functional.pad(reference, (4, 4, 4, 4), value=(0 - 0.5) / 0.25)  # zero pixels, normalised
    windows = {(y, x): padded[:, y : y + 32, x : x + 32] for y in range(9) for x in range(9)}
    offsets = set()
    for out in DeviceTransform(32, mean, std, crop="pad", crop_padding=4)(batch):
        offsets |= {key for key, window in windows.items() if torch.equal(out, window)}
    assert len(offsets) > 10  # many of the 81 offsets, each output an exact window of the padded image


def _folder(root: Path, layout: dict[str, list[str]]) -> Path:
    for split, classes in layout.items():
        for name in classes:
            (root / split / name).mkdir(parents=True)
            Image.new("RGB", (40, 30), color=(len(name) * 40, 0, 0)).save(root / split / name / "x.png")
    return root


def test_image_folder_keeps_train_class_indices_in_a_partial_val_split(tmp_path: Path) -> None:
    root = _folder(tmp_path, {"train": ["ant", "bee", "cat"], "val": ["ant", "cat"], "test": ["cat"]})
    data = ImageFolderDataModule(root, img_size=16, num_workers=0, batch_size=2)
    assert data.class_names == ["ant", "bee", "cat"] and data.num_classes == 3
    data.setup("fit")
    assert sorted(label for _, label in data.val_set) == [0, 2]  # "cat" stays 2 although val has no "bee"
    data.setup("test")
    image, label = data.test_set[0]
    assert label == 2 and image.shape == (3, 16, 16)  # non-square images are resized and centre-cropped


def test_image_folder_refuses_a_class_unknown_to_train(tmp_path: Path) -> None:
    root = _folder(tmp_path, {"train": ["ant", "bee"], "test": ["ant", "wasp"]})
    with pytest.raises(ConfigError, match="wasp is a class that"):
        _ = ImageFolderDataModule(root).class_names  # as the CLI reads them, before anything runs


def test_image_folder_without_test_split_says_so_at_test_time(tmp_path: Path) -> None:
    data = ImageFolderDataModule(_folder(tmp_path, {"train": ["ant", "bee"], "val": ["ant"]}), num_workers=0)
    with pytest.raises(ConfigError, match="test and predict need"):
        data.setup("test")


@pytest.mark.slow
def test_datasets_survive_spawned_workers(cifar_dir: Path, digits_dir: Path) -> None:
    """Windows and macOS start DataLoader workers with spawn: datasets and transforms must pickle."""
    from torch.utils.data import ConcatDataset, DataLoader, Subset

    splits = []
    for data in (_cifar(cifar_dir), ImageFolderDataModule(digits_dir, img_size=32, num_workers=0)):
        data.setup("fit")
        splits.append(data.train_set)
    both = ConcatDataset(splits)  # one spawned worker (each start imports torch anew) unpickles both
    first = Subset(both, [*range(8), *range(len(splits[0]), len(splits[0]) + 8)])
    loader = DataLoader(first, batch_size=16, num_workers=1, multiprocessing_context="spawn")
    images, labels = next(iter(loader))
    assert images.shape == (16, 3, 32, 32) and labels.shape == (16,)
