"""The on-device data path: the per-image pipeline's semantics on whole batches, and runs that use it end to end."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from helpers.cli import CPU, TINY_CONFIG, TINY_MODEL, run_cli, tiny_cifar_fit
from torch.utils.data import DataLoader, RandomSampler
from torchvision.transforms import v2

from vitlit.data import ImageClassificationDataModule
from vitlit.data.cifar import CIFARDataModule
from vitlit.errors import ConfigError
from vitlit.fast import loader as loader_module
from vitlit.fast.device import DeviceLoader, random_crop, random_flip
from vitlit.fast.loader import OnDevice
from vitlit.fast.policies import BatchPolicy

N = 4000  # draws per pipeline: a frequency's standard error is below 0.008


def with_device_path(data: ImageClassificationDataModule) -> ImageClassificationDataModule:
    """What the fast part's DeviceData callback does in a run: an OnDevice loader for ``data.on_device``."""
    data.loader = OnDevice(data.on_device)
    return data


def _marker_positions(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column of the single lit pixel of each (C, H, W) image of a batch."""
    flat = images[:, 0].flatten(1).argmax(dim=1)
    return flat // images.shape[-1], flat % images.shape[-1]


def test_batched_crop_and_flip_match_the_per_image_pipeline() -> None:
    torch.manual_seed(0)
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    image[:, 10, 5] = 255  # rows 6..14 and columns 1..9 (22..30 mirrored) after a padding-4 crop: never cut off
    per_image = v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()])
    cpu_rows, cpu_cols = _marker_positions(torch.stack([per_image(image) for _ in range(N)]))
    # The loader's path (crops straight out of a pre-padded copy) and the batch functions (pad per batch).
    loader = DeviceLoader(
        image.expand(N, -1, -1, -1).contiguous(), torch.zeros(N, dtype=torch.long), 500, img_size=32,
        mean=(0, 0, 0), std=(1, 1, 1), sampler=RandomSampler(range(N)), crop_padding=4, hflip=True,
    )  # fmt: skip
    loader_rows, loader_cols = _marker_positions(torch.cat([images for images, _ in loader]))
    batch_rows, batch_cols = _marker_positions(random_flip(random_crop(image.expand(N, -1, -1, -1), 4)))
    for rows, cols in ((cpu_rows, cpu_cols), (loader_rows, loader_cols), (batch_rows, batch_cols)):
        flipped = cols > 15
        assert abs(flipped.float().mean() - 0.5) < 0.03
        offsets = torch.cat([rows - 6, torch.where(flipped, 30 - cols, cols - 1)])  # both axes, 0..8
        frequencies = torch.bincount(offsets, minlength=9).float() / len(offsets)
        assert len(frequencies) == 9 and (frequencies - 1 / 9).abs().max() < 0.02, frequencies


@pytest.mark.parametrize("img_size", [32, 64], ids=["native", "resized"])
def test_eval_batches_equal_the_per_image_pipeline(img_size: int, cifar_dir: Path) -> None:
    dm = with_device_path(
        CIFARDataModule(data_dir=str(cifar_dir), download=False, val_size=16, img_size=img_size, batch_size=8)
    )
    dm.setup("fit")
    expected = torch.stack([dm.val_set[i][0] for i in range(16)])  # the per-image pipeline, item by item
    expected_targets = torch.tensor([dm.val_set[i][1] for i in range(16)])
    loader = dm.val_dataloader()
    assert isinstance(loader, DeviceLoader) and len(loader) == 2
    images, targets = map(torch.cat, zip(*loader, strict=True))
    assert torch.equal(targets, expected_targets)
    # Same pixels; the resized ones may differ by one uint8 level where the two resize kernels round differently.
    atol = 0.0 if img_size == 32 else 1.01 / 255 / min(dm.std)  # at 32 px: bit for bit
    torch.testing.assert_close(images, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("policy", ["autoaugment", "randaugment", "trivialaugment"])
def test_a_policy_works_on_images_resized_on_the_device(policy: str) -> None:
    # CIFAR's 32 px at a 224 px recipe: the device path resizes batch by batch, and the policies' bit operations
    # (posterize, solarize) need the uint8 images the per-image path gives them.
    images = torch.randint(0, 256, (32, 3, 16, 16), dtype=torch.uint8)
    targets, grey = torch.zeros(32, dtype=torch.long), {"mean": [0.5] * 3, "std": [0.5] * 3}
    loader = DeviceLoader(images, targets, 16, img_size=24, **grey, sampler=RandomSampler(images), drop_last=True,
                          crop_padding=3, hflip=True, policy=BatchPolicy(policy))  # fmt: skip
    batches = [batch for batch, _ in loader]
    assert len(batches) == 2 and all(b.shape == (16, 3, 24, 24) and b.dtype == torch.float32 for b in batches)
    plain = DeviceLoader(images, torch.zeros(32, dtype=torch.long), 32, img_size=24, mean=[0.0] * 3, std=[1.0] * 3)
    pixels = next(iter(plain))[0] * 255  # the resized images themselves: whole uint8 levels
    torch.testing.assert_close(pixels, pixels.round(), rtol=0, atol=1e-4)


def test_train_batches_shuffle_crop_and_keep_every_image_once(cifar_dir: Path) -> None:
    dm = with_device_path(CIFARDataModule(data_dir=str(cifar_dir), download=False, val_size=16, batch_size=8))
    dm.setup("fit")
    loader = dm.train_dataloader()
    first = torch.cat([t for _, t in loader])
    second = torch.cat([t for _, t in loader])
    assert len(first) == 64 and sorted(first.tolist()) == sorted(second.tolist())
    assert not torch.equal(first, second)  # a new order each epoch
    images, _ = next(iter(loader))
    assert images.dtype == torch.float32 and images.shape == (8, 3, 32, 32)


def _fit(cifar_dir: Path, root: Path, *extra: object):
    flags = """--data.on_device true --trainer.deterministic true
               --trainer.enable_progress_bar false --trainer.max_epochs 2""".split()
    return tiny_cifar_fit(cifar_dir, root, *flags, *extra)


# The recipe's AutoAugment, batched on the device (its draws must resume too); without a policy with the slow tests.
@pytest.mark.parametrize("augment", [pytest.param("none", marks=pytest.mark.slow), "autoaugment"])
def test_on_device_fit_resumes_exactly(tmp_path: Path, cifar_dir: Path, augment: str) -> None:
    """Shuffle, crop, flip, policy, erasing, Mixup/CutMix on the device draw from generators the checkpoint restores."""
    # One schedule for both: the half run would otherwise size its cosine for one epoch (its own length).
    schedule = ["--model.scheduler.init_args.total_steps", "16", "--data.augment", augment]
    whole = _fit(cifar_dir, tmp_path / "whole", *schedule)
    half = _fit(cifar_dir, tmp_path / "half", "--trainer.max_epochs", "1", *schedule)
    run_dir = Path(half.trainer.log_dir)
    resumed = run_cli("fit", "--config", run_dir / "config.yaml", "--trainer.max_epochs", "2", "--ckpt_path", "last")
    assert resumed.trainer.global_step == whole.trainer.global_step == 16
    resumed_state = resumed.model.state_dict()
    for key, value in whole.model.state_dict().items():
        torch.testing.assert_close(resumed_state[key], value, rtol=0, atol=0, msg=key)
    assert float(whole.trainer.callback_metrics["val/acc"]) == float(resumed.trainer.callback_metrics["val/acc"])


def test_image_folder_on_device_decodes_once_and_trains(tmp_path: Path, digits_dir: Path) -> None:
    flags = """--data ImageFolderDataModule --data.on_device true --data.augment none --data.batch_size 64
               --trainer.max_epochs 1 --trainer.limit_train_batches 3 --trainer.enable_progress_bar false""".split()
    cli = run_cli(
        "fit", "--config", TINY_CONFIG, *CPU, *TINY_MODEL, *flags, "--data.root", digits_dir,
        "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    loader = cli.datamodule.train_dataloader()
    assert isinstance(loader, DeviceLoader)
    # The folder's train/ images, decoded once into one uint8 tensor that train and validation index into.
    assert loader.targets.numel() == len(cli.datamodule.train_set) > 1000 and loader.images.dtype == torch.uint8
    assert torch.equal(loader.targets.cpu(), torch.tensor(cli.datamodule.targets(cli.datamodule.train_set)))
    assert len(cli.datamodule.loader._uint8) == 1
    assert cli.trainer.global_step == 3


def test_auto_takes_the_device_path_only_when_the_images_fit(
    cifar_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def module() -> CIFARDataModule:
        dm = with_device_path(CIFARDataModule(data_dir=str(cifar_dir), download=False, val_size=16, batch_size=8))
        dm.setup("fit")  # on_device: auto
        return dm

    with caplog.at_level(logging.INFO):
        assert isinstance(module().train_dataloader(), DeviceLoader)  # 80 images of 3 KB, gigabytes free
        monkeypatch.setattr(
            loader_module, "free_memory", lambda device: 3 * 80 * 3072
        )  # a quarter of it would not hold them
        tight = module()
        assert isinstance(tight.train_dataloader(), DataLoader) and isinstance(tight.val_dataloader(), DataLoader)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vitlit: data path")]
    assert len(lines) == 2, lines  # one line per data module, however many loaders it builds
    assert lines[0].startswith("vitlit: data path: on the device (80 images of 3x32x32")
    assert lines[1].startswith("vitlit: data path: DataLoader (80 images") and "33.3% of the" in lines[1]


def test_forcing_the_device_path_is_refused_where_the_images_cannot_fit(
    cifar_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36, class 4: --data.on_device true grew until the OOM killer; it is refused before decoding."""
    monkeypatch.setattr(loader_module, "free_memory", lambda device: 80 * 3072)  # one copy fits, two do not
    dm = with_device_path(CIFARDataModule(data_dir=str(cifar_dir), download=False, val_size=16, batch_size=8))
    dm.on_device = True
    dm.loader = loader_module.OnDevice(True)
    dm.setup("fit")
    with pytest.raises(ConfigError, match=r"--data.on_device true: the 80 images of 3x32x32 take 0.2 MB"):
        dm.train_dataloader()
    assert not dm.loader._uint8  # nothing decoded
