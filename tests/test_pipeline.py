"""One image pipeline for every source: the sources hand over uint8 batches, the training device does the rest.

What is tested: the batched crops against torchvision's (RandomCrop's offsets, RandomResizedCrop's boxes), the two
sources giving identical batches for the same images and seed, the choice of source, and runs end to end.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli import CPU, FEW_TOKENS, TINY_CONFIG, TINY_MODEL, run_cli, tiny_cifar_fit
from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
from scipy.stats import ks_2samp
from torch.utils.data import Dataset
from torchvision.transforms import v2

from vitlit.data import ImageClassificationDataModule
from vitlit.data import pipeline as sources_module
from vitlit.data.cifar import CIFARDataModule
from vitlit.data.pipeline import (
    DeviceTransform,
    InMemory,
    random_crop,
    random_flip,
    random_resized_crop,
    resized_crop_boxes,
)
from vitlit.data.policies import BatchPolicy
from vitlit.errors import ConfigError

N = 4000  # draws per pipeline: a frequency's standard error is below 0.008


def _marker_positions(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column of the single lit pixel of each (C, H, W) image of a batch."""
    flat = images[:, 0].flatten(1).argmax(dim=1)
    return flat // images.shape[-1], flat % images.shape[-1]


def test_batched_crop_and_flip_draw_torchvisions_offsets() -> None:
    torch.manual_seed(0)
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    image[:, 10, 5] = 255  # rows 6..14 and columns 1..9 (22..30 mirrored) after a padding-4 crop: never cut off
    per_image = v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()])
    theirs = _marker_positions(torch.stack([per_image(image) for _ in range(N)]))
    ours = _marker_positions(random_flip(random_crop(image.expand(N, -1, -1, -1), 4)))
    for rows, cols in (theirs, ours):
        flipped = cols > 15
        assert abs(flipped.float().mean() - 0.5) < 0.03
        offsets = torch.cat([rows - 6, torch.where(flipped, 30 - cols, cols - 1)])  # both axes, 0..8
        frequencies = torch.bincount(offsets, minlength=9).float() / len(offsets)
        assert len(frequencies) == 9 and (frequencies - 1 / 9).abs().max() < 0.02, frequencies


@pytest.mark.parametrize(
    ("height", "width", "scale", "ratio"),
    [(32, 32, (0.08, 1.0), (3 / 4, 4 / 3)), (32, 32, (0.8, 1.0), (3 / 4, 4 / 3)), (24, 40, (0.08, 1.0), (3 / 4, 4 / 3)),
     (20, 60, (0.9, 1.0), (1.0, 1.0))],  # the last one often finds no box and falls back to the centre crop
    ids=["timm", "write-up", "wide", "fallback"],
)  # fmt: skip
def test_resized_crop_boxes_are_drawn_as_torchvisions_get_params(
    height: int, width: int, scale: tuple, ratio: tuple
) -> None:
    """Issue 42: RandomResizedCrop's box statistics, batched, against torchvision's sampling image by image."""
    torch.manual_seed(0)
    image = torch.zeros(3, height, width)
    theirs = torch.tensor([v2.RandomResizedCrop.get_params(image, list(scale), list(ratio)) for _ in range(N)])
    ours = resized_crop_boxes(N, height, width, scale, ratio, torch.device("cpu"))
    assert ours.dtype == torch.float32 and ((ours >= 0).all() and (ours[:, 0] + ours[:, 2] <= height).all())
    assert (ours[:, 1] + ours[:, 3] <= width).all() and (ours[:, 2:] >= 1).all()
    for column, name in enumerate(("top", "left", "height", "width")):
        test = ks_2samp(ours[:, column].numpy(), theirs[:, column].float().numpy())
        assert test.pvalue > 1e-3, (name, test, ours[:, column].mean(), theirs[:, column].float().mean())
    area = lambda boxes: (boxes[:, 2] * boxes[:, 3]).float().numpy()  # noqa: E731
    assert ks_2samp(area(ours), area(theirs)).pvalue > 1e-3


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_a_resized_crop_resamples_its_box_as_torchvision_resizes_the_crop(
    interpolation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    boxes = torch.tensor([[0.0, 0.0, 32.0, 32.0], [3.0, 5.0, 20.0, 17.0], [10.0, 0.0, 9.0, 30.0], [7.0, 7.0, 8.0, 8.0]])
    monkeypatch.setattr("vitlit.data.pipeline.resized_crop_boxes", lambda *args: boxes)
    ours = random_resized_crop(images, 64, (0.08, 1.0), (0.75, 1.33), interpolation)
    mode = v2.InterpolationMode(interpolation)
    for image, (top, left, h, w), got in zip(images, boxes.int().tolist(), ours, strict=True):
        expected = v2.functional.resized_crop(image, top, left, h, w, [64, 64], interpolation=mode, antialias=False)
        # Upsampling: the same sample points. At the box's edge the two differ on purpose: the crop resized alone
        # repeats its edge, the box read out of the image reads the pixels beyond it; inside, only rounding differs
        # (and torchvision's bicubic kernel for uint8 rounds and clamps between its two passes).
        edge = 64 // min(h, w) * 2 + 2
        inside = (got.int() - expected.int()).abs()[:, edge:-edge, edge:-edge]
        if interpolation == "bilinear":
            assert inside.max() <= 1, inside.max()
        assert inside.float().mean() < 0.6, inside.float().mean()
    # Shrinking (a 32 px box to 8 px) averages the box's pixels rather than picking some: an image of stripes one
    # pixel wide becomes an even grey, as an antialiased resize makes it.
    stripes = (torch.arange(32) % 2 * 255).to(torch.uint8).expand(1, 3, 32, 32)
    monkeypatch.setattr("vitlit.data.pipeline.resized_crop_boxes", lambda *args: boxes[:1])
    grey = random_resized_crop(stripes, 8, (0.08, 1.0), (0.75, 1.33), "bilinear")
    assert (grey.float() - 127.5).abs().max() <= 1


class _Images(Dataset):
    """CIFAR-shaped uint8 images as PIL images (what torchvision's CIFAR hands out), and their class indices."""

    def __init__(self, n: int = 96, size: int = 16) -> None:
        rng = np.random.default_rng(0)
        self.data = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
        self.targets = rng.integers(0, 4, n).tolist()

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        from PIL import Image

        return Image.fromarray(self.data[i]), self.targets[i]


class _Data(ImageClassificationDataModule):
    """Images that share one size (``native_size``), from one array: both sources can hold them."""

    native_size = 16

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.images = _Images()

    @property
    def class_names(self) -> list[str]:
        return ["a", "b", "c", "d"]

    def train_dataset(self) -> Dataset:
        return self.images

    def test_dataset(self) -> Dataset:
        return self.images

    def uint8_images_of(self, dataset: _Images) -> torch.Tensor:
        return torch.from_numpy(dataset.data).permute(0, 3, 1, 2)


class _Recorder(LightningModule):
    """Keeps every batch the model receives (after the pipeline), training and validation."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[tuple[str, torch.Tensor, torch.Tensor]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(("train", batch[0].clone(), batch[1].clone()))
        return (self.weight * batch[0].float().mean()).sum()

    def validation_step(self, batch, batch_idx):
        self.seen.append(("val", batch[0].clone(), batch[1].clone()))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _seen(data: LightningDataModule) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Every batch the model receives in two epochs of ``data`` (seed the generators first)."""
    model = _Recorder()
    trainer = Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip
    trainer.fit(model, data)
    return model.seen


def _batches(on_device: bool, workers: int, **options) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    seed_everything(3)
    return _seen(
        _Data(
            img_size=24,
            batch_size=16,
            val_size=16,
            num_workers=workers,
            source="memory" if on_device else "workers",
            **options,
        )
    )


@pytest.mark.parametrize(
    "options",
    [{"augment": "autoaugment", "crop": "pad", "crop_padding": 3},
     {"augment": "randaugment", "crop": "resized", "crop_scale": (0.25, 1.0)}],
    ids=["pad-autoaugment", "resized-randaugment"],
)  # fmt: skip
def test_the_two_sources_give_identical_batches(options: dict) -> None:
    """Issue 42: held in memory or streamed by workers, the same images and seed give the same batches, bit for bit.

    By construction: both sources hand the same uint8 images (at their shared 16 px) in the sampler's order, and one
    pipeline resizes them to 24 px, crops, flips, augments and normalises them on the device, drawing from the same
    generator; the loaders' own random numbers (workers' seeds) come from generators of their own.
    """
    held = _batches(True, 0, **options)
    assert len(held) == 2 * (5 + 1) and held[0][1].shape == (16, 3, 24, 24) and held[0][1].dtype == torch.float32
    for workers in (0, 2):
        streamed = _batches(False, workers, **options)
        assert len(streamed) == len(held)
        for (kind, images, targets), (kind_s, images_s, targets_s) in zip(held, streamed, strict=True):
            assert kind == kind_s and torch.equal(targets, targets_s) and torch.equal(images, images_s), workers
    train = [images for kind, images, _ in held if kind == "train"]
    assert not torch.equal(train[0], train[5])  # a new order and new draws in the second epoch


class _DataOfManySizes(_Data):
    """`_Data` not saying that its images share one size: each source stores them at the split's stored size."""

    native_size = None


def test_an_array_taken_as_it_is_is_stored_at_the_splits_size_as_the_workers_store_each_image() -> None:
    # Without native_size the in-memory source held the array at its own 16 px (and estimated it at 24), while the
    # workers stored each image at 24 px: the same seed gave other crops.
    seen, held = {}, None
    for source in ("memory", "workers"):
        seed_everything(3)
        data = _DataOfManySizes(img_size=24, batch_size=16, val_size=16, num_workers=0, source=source, crop="resized")
        seen[source] = _seen(data)
        held = held or [split.images.shape[-2:] for split in data._held.values()]
    assert held == [(24, 24), (24, 24)]  # training and validation, at their stored size
    for (kind, images, targets), (kind_s, images_s, targets_s) in zip(seen["memory"], seen["workers"], strict=True):
        assert kind == kind_s and torch.equal(targets, targets_s) and torch.equal(images, images_s)


def test_a_policy_works_on_images_resized_on_the_device() -> None:
    # CIFAR's 32 px at a 224 px recipe: resized batch by batch, and the policies' bit operations (posterize, solarize)
    # need the uint8 images the resize gives them.
    images = torch.randint(0, 256, (32, 3, 16, 16), dtype=torch.uint8)
    for policy in ("autoaugment", "randaugment", "trivialaugment"):
        augment = DeviceTransform(
            24, [0.5] * 3, [0.5] * 3, crop="pad", crop_padding=3, hflip=True, policy=BatchPolicy(policy)
        )
        out = augment(images)
        assert out.shape == (32, 3, 24, 24) and out.dtype == torch.float32
    # The resized images themselves: whole uint8 levels.
    pixels = DeviceTransform(24, [0.0] * 3, [1.0] * 3)(images) * 255
    torch.testing.assert_close(pixels, pixels.round(), rtol=0, atol=1e-4)


def test_in_memory_batches_shuffle_and_keep_every_image_once(cifar_dir: Path) -> None:
    dm = CIFARDataModule(data_dir=str(cifar_dir), download=False, val_size=16, batch_size=8, source="memory")
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert isinstance(loader.dataset, InMemory)
    first = torch.cat([t for _, t in loader])
    again = torch.cat([t for _, t in loader])
    loader.sampler.set_epoch(1)  # as Lightning does at each epoch
    second = torch.cat([t for _, t in loader])
    assert len(first) == 64 and sorted(first.tolist()) == sorted(second.tolist())
    assert torch.equal(first, again) and not torch.equal(first, second)  # an order of the seed and the epoch
    images, _ = next(iter(loader))
    assert images.dtype == torch.uint8 and images.shape == (8, 3, 32, 32)  # the source's part: uint8, as stored


def _fit(cifar_dir: Path, root: Path, *extra: object):
    flags = """--data.source memory --trainer.deterministic true
               --trainer.enable_progress_bar false --trainer.max_epochs 2""".split()
    return tiny_cifar_fit(cifar_dir, root, *flags, *FEW_TOKENS, *extra)


# The recipe's AutoAugment (its draws must resume too); without a policy with the slow tests. With DataLoader
# workers, the resumed epoch's first batches are drawn before Lightning sets the sampler's epoch: they came in epoch
# 0's order until the data module's state carried the epoch.
@pytest.mark.parametrize(("augment", "workers"), [pytest.param("none", 0, marks=pytest.mark.slow),
                                                  ("autoaugment", 0), ("none", 2)])  # fmt: skip
def test_on_device_fit_resumes_exactly(tmp_path: Path, cifar_dir: Path, augment: str, workers: int) -> None:
    """Shuffle, crop, flip, policy, erasing, Mixup/CutMix draw from generators the checkpoint restores."""
    # One schedule for both: the half run would otherwise size its cosine for one epoch (its own length).
    schedule = ["--model.scheduler.init_args.total_steps", "16", "--data.augment", augment]
    if workers:
        schedule += ["--data.source", "workers", "--data.num_workers", str(workers)]
    whole = _fit(cifar_dir, tmp_path / "whole", *schedule)
    half = _fit(cifar_dir, tmp_path / "half", "--trainer.max_epochs", "1", *schedule)
    run_dir = Path(half.trainer.log_dir)
    resumed = run_cli("fit", "--config", run_dir / "config.yaml", "--trainer.max_epochs", "2", "--ckpt_path", "last")
    assert resumed.trainer.global_step == whole.trainer.global_step == 16
    resumed_state = resumed.model.state_dict()
    for key, value in whole.model.state_dict().items():
        torch.testing.assert_close(resumed_state[key], value, rtol=0, atol=0, msg=key)
    assert float(whole.trainer.callback_metrics["val/acc"]) == float(resumed.trainer.callback_metrics["val/acc"])


def test_image_folder_in_memory_decodes_once_and_trains(tmp_path: Path, digits_dir: Path) -> None:
    flags = """--data ImageFolderDataModule --data.source memory --data.augment none --data.batch_size 64
               --trainer.max_epochs 1 --trainer.limit_train_batches 3 --trainer.enable_progress_bar false""".split()
    cli = run_cli(
        "fit", "--config", TINY_CONFIG, *CPU, *TINY_MODEL, *flags, "--data.root", digits_dir,
        "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    held = cli.datamodule.train_dataloader().dataset
    assert isinstance(held, InMemory)
    # Each split's own images decoded once into one uint8 tensor (training's at the stored size, evaluation's
    # at its own), and nothing else of the folder.
    assert held.targets.numel() == len(cli.datamodule.train_set) > 1000 and held.images.dtype == torch.uint8
    assert torch.equal(held.targets.cpu(), torch.tensor(cli.datamodule.split_targets(cli.datamodule.train_set)))
    assert len(cli.datamodule.val_dataloader().dataset.images) == len(cli.datamodule.val_set)
    assert cli.trainer.global_step == 3


def test_auto_holds_the_images_in_memory_only_when_they_fit(
    cifar_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def module() -> CIFARDataModule:
        dm = CIFARDataModule(data_dir=str(cifar_dir), download=False, val_size=16, batch_size=8)
        dm.setup("fit")  # source: auto
        return dm

    with caplog.at_level(logging.INFO):
        assert isinstance(module().train_dataloader().dataset, InMemory)  # 80 images of 3 KB, gigabytes free
        monkeypatch.setattr(sources_module, "free_memory", lambda device: 3 * 80 * 3072)  # a quarter would not hold
        tight = module()
        assert not isinstance(tight.train_dataloader().dataset, InMemory)
        assert not isinstance(tight.val_dataloader().dataset, InMemory)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vitlit: data source")]
    assert len(lines) == 2, lines  # one line per data module, however many loaders it builds
    assert lines[0].startswith("vitlit: data source: in memory on cpu (80 images take 0.2 MB as stored")
    assert lines[1].startswith("vitlit: data source: streamed by DataLoader workers (80 images") and "33.3%" in lines[1]


class _Blank(Dataset):
    """``n`` blank 32 px images: only their count (and the first one's channels) is read."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.zeros(3, 32, 32, dtype=torch.uint8), 0


class _FakeCIFAR224(ImageClassificationDataModule):
    """45,000 + 5,000 training images of CIFAR's 32 px in a 224 px recipe; nothing is decoded to decide."""

    def __init__(self, native: int | None, **kwargs) -> None:
        super().__init__(img_size=224, val_size=5000, **kwargs)
        self.native_size = native

    @property
    def class_names(self) -> list[str]:
        return [str(i) for i in range(100)]

    def train_dataset(self) -> Dataset:
        return _Blank(50_000)

    def test_dataset(self) -> Dataset:
        return _Blank(10_000)


def test_the_224_px_recipes_hold_cifar_in_memory_at_32_px(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42: on a 24 GB GPU, 50,000 CIFAR images are 154 MB at their own 32 px (7.5 GB at 224 px)."""
    monkeypatch.setattr(sources_module, "free_memory", lambda device: 24 * 2**30)
    for native, held in ((32, True), (None, False)):  # stored at 32 px; or, of many sizes, at 224 px
        data = _FakeCIFAR224(native)
        data.setup("fit")
        splits = [data.train_set, data.val_set]
        assert sources_module.keep_in_memory(splits, data.native_size, False, torch.device("cpu"), None) is held
        assert data.stored_size(train=True) == (native or 224)


def test_holding_the_images_in_memory_is_refused_where_they_cannot_fit(
    cifar_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36, class 4: --data.source memory grew until the OOM killer; it is refused before decoding."""
    monkeypatch.setattr(sources_module, "free_memory", lambda device: 80 * 3072)  # one copy fits, two do not
    dm = CIFARDataModule(data_dir=str(cifar_dir), download=False, val_size=16, batch_size=8, source="memory")
    dm.setup("fit")
    monkeypatch.setattr(sources_module, "InMemory", lambda *args: pytest.fail("decoded before the refusal"))
    with pytest.raises(ConfigError, match=r"--data.source memory.* 80 images .*0.2 MB.*--data.source auto"):
        dm.train_dataloader()


def test_crop_ranges_are_checked() -> None:
    for scale, ratio in (((0.5, 0.1), (0.75, 1.33)), ((0.0, 1.0), (0.75, 1.33)), ((0.1, 1.5), (1.0, 1.0)),
                         ((0.1, 1.0), (2.0, 1.0)), ((0.1, 1.0), (1e-300, 1e-300)),
                         ((0.1, 1.0), (1.0, 1e300))):  # fmt: skip  # the last two: hostile round 6, class 6
        with pytest.raises(ConfigError, match="is not a range"):
            _Data(crop="resized", crop_scale=scale, crop_ratio=ratio)
    assert math.isclose(_Data().crop_ratio[1], 4 / 3)


def _mixed_folder(root: Path) -> Path:
    """Class folders of images of many sizes and modes: RGB, grey, RGBA, palette, 16-bit grey; PNG, JPEG, BMP."""
    from PIL import Image

    rng = np.random.default_rng(0)
    modes = [("RGB", "png"), ("L", "jpg"), ("RGBA", "png"), ("P", "bmp"), ("I;16", "png")]
    for c, name in enumerate(("a", "b", "c")):
        (root / name).mkdir(parents=True)
        for i in range(8):
            w, h = (int(v) for v in rng.integers(20, 70, 2))
            mode, suffix = modes[(i + c) % len(modes)]
            pixels = rng.integers(0, 65535 if mode == "I;16" else 255, (h, w, 4 if mode == "RGBA" else 3))
            image = Image.fromarray(pixels.astype(np.uint8)).convert("RGB")
            if mode == "I;16":
                image = Image.fromarray(pixels[..., 0].astype(np.uint16))
            elif mode != "RGB":
                image = image.convert(mode)
            image.save(root / name / f"{i}.{suffix}")
    return root


def _folder_batches(
    root: Path, on_device: bool, workers: int, **options
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    from vitlit.data import ImageFolderDataModule

    seed_everything(5)
    return _seen(ImageFolderDataModule(root, img_size=16, batch_size=6, val_size=6, test_size=3, num_workers=workers,
                                       source="memory" if on_device else "workers", **options))  # fmt: skip


@pytest.mark.parametrize(
    "options",
    [{"crop": "resized", "crop_scale": (0.25, 1.0)}, {"crop": "resized", "store_size": 24, "augment": "randaugment"},
     {"crop": "pad", "crop_padding": 2}],
    ids=["resized", "resized-store24-randaugment", "pad"],
)  # fmt: skip
def test_images_of_many_sizes_and_modes_give_identical_batches_from_both_sources(options: dict, tmp_path: Path) -> None:
    """Issue 53: one geometry whatever the source. Both store each image at one size the same way (the shorter side
    resized to ``store_size``, the centre cropped); every crop, RandomResizedCrop included, is the device's."""
    root = _mixed_folder(tmp_path / "mixed")
    held = _folder_batches(root, True, 0, **options)
    assert held[0][1].shape == (6, 3, 16, 16) and {kind for kind, _, _ in held} == {"train", "val"}
    for workers in (0, 2):
        streamed = _folder_batches(root, False, workers, **options)
        assert len(streamed) == len(held)
        for (kind, images, targets), (kind_s, images_s, targets_s) in zip(held, streamed, strict=True):
            assert kind == kind_s and torch.equal(targets, targets_s) and torch.equal(images, images_s), workers


def test_the_streaming_module_stores_images_of_many_sizes_as_memory_does(tmp_path: Path) -> None:
    """Issue 53, under LitData: `prepare --format encoded` keeps the files; streamed, each is decoded at the stored
    size as the in-memory source stores it, and cropped on the device (the workers' RandomResizedCrop is gone)."""
    pytest.importorskip("litdata")
    from helpers.cli import run_cli

    from vitlit.data import ImageFolderDataModule
    from vitlit.data.streaming import StreamingDataModule

    root = _mixed_folder(tmp_path / "mixed")
    options = {"img_size": 16, "crop": "resized", "store_size": 20, "batch_size": 6, "num_workers": 0}
    run_cli("prepare", "--data", "ImageFolderDataModule", "--data.root", root, "--data.val_size", "6",
            "--data.test_size", "3", "--data.store_size", "20", "--output", tmp_path / "chunks", "--format",
            "encoded")  # fmt: skip
    stream = StreamingDataModule(str(tmp_path / "chunks"), **options)
    held = ImageFolderDataModule(root, val_size=6, test_size=3, source="memory", **options)
    for data in (stream, held):
        data.setup("fit")
    assert stream.device_transform(train=True).crop == "resized"  # the device crops, as for the images held in memory
    streamed = torch.cat([images for images, _ in stream.val_dataloader()])
    stored = held.val_dataloader().dataset.images
    # Evaluation stores at its own size (floor(img_size / crop_pct)), training at store_size, in either source.
    assert streamed.shape == stored.shape == (6, 3, 16, 16) and torch.equal(streamed, stored.cpu())
    assert stream.stored_size(train=True) == held.stored_size(train=True) == 20


@pytest.mark.part("regularize")
def test_turns_give_each_image_one_of_the_squares_eight_symmetries_in_a_few_kernels() -> None:
    """BatchAugment's turns (the small-data recipe's): every image turned and mirrored as a whole, batched."""
    from helpers.counting import Kernels

    from vitlit.regularize.batch_augment import random_turns

    torch.manual_seed(0)
    images = torch.randn(256, 3, 8, 8)
    turned = random_turns(images)
    symmetries = [lambda x, k=k, m=m: (x.flip(1) if m else x).rot90(k, dims=(1, 2)) for k in range(4) for m in (0, 1)]
    drawn = [
        next(i for i, f in enumerate(symmetries) if torch.equal(f(a), b)) for a, b in zip(images, turned, strict=True)
    ]
    assert set(drawn) == set(range(8))  # each image one symmetry of itself; all eight drawn in a batch of 256
    kernels = []
    for size in (8, 256):
        with Kernels() as counted:
            random_turns(torch.randn(size, 3, 8, 8))
        kernels.append(counted.total)
    assert kernels[0] == kernels[1] < 30, kernels  # the same kernels for any batch: no per-image work
