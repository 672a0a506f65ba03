"""What every vitlit data module shares: the seeded validation split, the transforms and the loaders.

A subclass only says where its images come from (`_train_source`, `_val_source`, `_test_source`), how many classes
there are, and its normalisation statistics. Everything else, and every common flag, lives here once.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

from vitlit.data.batch_augment import BatchAugment
from vitlit.data.device import DeviceLoader, images_as_uint8
from vitlit.data.transforms import (
    POLICIES,
    RANDAUGMENT_MAX_MAGNITUDE,
    Policy,
    eval_transform,
    policy_transform,
    train_transform,
)
from vitlit.errors import ConfigError


class TransformedSubset(Dataset):
    """A view of ``source`` at ``indices`` with its own transform.

    The train and validation parts of one split share the decoded images but need different pipelines, which
    ``torch.utils.data.Subset`` cannot express.
    """

    def __init__(self, source: Dataset, indices: Sequence[int] | None, transform: Any) -> None:
        self.source = source
        self.indices = list(range(len(source))) if indices is None else list(indices)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def targets(self) -> list[int]:
        """Class index of every item, without loading images (torchvision datasets keep ``targets``)."""
        return [self.source.targets[i] for i in self.indices]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image, target = self.source[self.indices[i]]
        return self.transform(image), target


def validation_count(n: int, val_size: int | float) -> int:
    """Return how many of ``n`` training images ``val_size`` asks for, or raise if the split would leave none.

    Args:
        n: Number of training images available.
        val_size: Number of validation images (int) or their fraction of ``n`` (float in (0, 1)).

    Raises:
        ConfigError: If the split would leave no training or no validation images.
    """
    n_val = round(n * val_size) if isinstance(val_size, float) else val_size
    if not 1 <= n_val < n:
        raise ConfigError(
            f"val_size={val_size} asks for {n_val} of the {n} training images for validation; "
            f"choose --data.val_size between 1 and {n - 1} (or a fraction such as 0.1)."
        )
    return n_val


def split_indices(n: int, val_size: int | float, seed: int) -> tuple[list[int], list[int]]:
    """Carve a seeded validation subset out of ``n`` training images.

    Args:
        n: Number of training images available.
        val_size: Number of validation images (int) or their fraction of ``n`` (float in (0, 1)).
        seed: Seed of the permutation; the same seed gives the same split on every machine.

    Returns:
        ``(train_indices, val_indices)``, disjoint and together covering ``range(n)``.
    """
    n_val = validation_count(n, val_size)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return order[n_val:], order[:n_val]


class ImageClassificationDataModule(LightningDataModule, ABC):
    """Base class of vitlit's data modules: loaders, seeded validation split and train/eval transforms.

    Args:
        img_size: Side of the square images fed to the model; linked to ``model.img_size`` by the CLI.
        batch_size: Images per batch (per device); the effective batch also counts
            ``trainer.accumulate_grad_batches``.
        val_size: Validation images carved from the training set when the data has no validation split of its own:
            a count (int) or a fraction (float in (0, 1)). The test split is never used for validation.
        num_workers: DataLoader worker processes (0 loads in the main process); capped at the CPU cores available.
        pin_memory: Pin host memory for faster copies to the GPU (ignored when no GPU is present).
        persistent_workers: Keep workers alive between epochs; restarting them costs seconds per short epoch.
        seed: Seed of the train/validation split (independent of ``seed_everything``, so the split never changes).
        mean: Per-channel normalisation mean; ``None`` uses the data set's own statistics.
        std: Per-channel normalisation standard deviation; ``None`` uses the data set's own statistics.
        crop_padding: Padding of the training random crop in pixels; ``None`` means ``img_size // 8`` (4 at 32 px),
            0 disables the crop.
        hflip: Random horizontal flips in training.
        augment: Per-image augmentation policy after crop and flip: ``none``, ``trivialaugment``
            (TrivialAugmentWide), ``randaugment`` or ``autoaugment`` (the CIFAR-10 policy).
        randaugment_num_ops: RandAugment: operations per image.
        randaugment_magnitude: RandAugment: magnitude of each operation, 0 to 30 (9 in DeiT's recipe).
        random_erasing: Probability of erasing a random rectangle of each training image (on the batch, after
            normalisation; 0.25 in DeiT's recipe). 0 disables it.
        random_erasing_end: Erasing probability at the end of training, reached linearly from ``random_erasing``
            (e.g. 0.4 -> 0.2); ``None`` keeps it constant.
        mixup_alpha: Mixup's Beta(alpha, alpha) parameter (0.8 in DeiT's recipe); 0 disables Mixup. Targets become
            class probabilities; the model's label smoothing still applies once.
        cutmix_alpha: CutMix's Beta(alpha, alpha) parameter (1.0 in DeiT's recipe); 0 disables CutMix.
        mixup_prob: Probability that a batch is mixed at all (Mixup or CutMix).
        mixup_switch_prob: With both enabled, probability that a mixed batch uses CutMix rather than Mixup.
        class_balanced: Draw training images with probability inversely proportional to their class's frequency
            (with replacement, one epoch = as many draws as images), for class-imbalanced data.
        on_device: Keep every split as one uint8 tensor on the training device and crop, flip and normalise whole
            batches there (`vitlit.data.device`): no worker processes, no CPU bottleneck; for data that fits in
            device memory (CIFAR: 150 MB). Per-image policies (``augment``) need the DataLoader path (false).
    """

    #: Normalisation statistics used when ``mean``/``std`` are not given.
    default_mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    default_std: tuple[float, float, float] = (0.229, 0.224, 0.225)

    def __init__(
        self,
        img_size: int = 32,
        batch_size: int = 128,
        val_size: int | float = 5000,
        num_workers: int = 4,
        pin_memory: bool = True,
        persistent_workers: bool = True,
        seed: int = 42,
        mean: list[float] | None = None,
        std: list[float] | None = None,
        crop_padding: int | None = None,
        hflip: bool = True,
        augment: Policy = "none",
        randaugment_num_ops: int = 2,
        randaugment_magnitude: int = 9,
        random_erasing: float = 0.0,
        random_erasing_end: float | None = None,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        mixup_prob: float = 1.0,
        mixup_switch_prob: float = 0.5,
        class_balanced: bool = False,
        on_device: bool = False,
    ) -> None:
        super().__init__()
        for name, value, low in (
            ("img_size", img_size, 1),
            ("batch_size", batch_size, 1),
            ("num_workers", num_workers, 0),
        ):
            if value < low:
                raise ConfigError(f"{name}={value} is below {low}; pass --data.{name} {low} or more.")
        if isinstance(val_size, float) and not 0.0 < val_size < 1.0:
            raise ConfigError(f"val_size={val_size} is a fraction outside (0, 1); use e.g. 0.1, or a whole count.")
        if crop_padding is not None and crop_padding < 0:
            raise ConfigError(f"crop_padding={crop_padding} is negative; use 0 to disable the random crop.")
        for name, values in (("mean", mean), ("std", std)):
            if values is not None and len(values) != 3:
                raise ConfigError(
                    f"{name}={list(values)} has {len(values)} value(s) but the images have 3 channels; give one per "
                    f"channel, e.g. --data.{name} [0.5,0.5,0.5]."
                )
        if std is not None and min(std) <= 0:
            raise ConfigError(f"std={list(std)} has a value <= 0; every channel needs a positive standard deviation.")
        _check_augmentation(
            augment,
            randaugment_num_ops,
            randaugment_magnitude,
            random_erasing,
            random_erasing_end,
            mixup_alpha,
            cutmix_alpha,
            mixup_prob,
            mixup_switch_prob,
            batch_size,
        )
        if on_device and augment != "none":
            raise ConfigError(
                f"augment={augment!r} is a per-image policy, which the batched on_device path does not run; "
                f"pass --data.on_device false for it, or --data.augment none."
            )
        self.img_size = img_size
        self.batch_size = batch_size
        self.val_size = val_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers
        self.seed = seed
        self.mean = tuple(mean) if mean is not None else self.default_mean
        self.std = tuple(std) if std is not None else self.default_std
        self.crop_padding = img_size // 8 if crop_padding is None else crop_padding
        self.hflip = hflip
        self.augment = augment
        self.randaugment_num_ops = randaugment_num_ops
        self.randaugment_magnitude = randaugment_magnitude
        self.random_erasing = random_erasing
        self.random_erasing_end = random_erasing_end
        self.mixup_alpha = mixup_alpha
        self.cutmix_alpha = cutmix_alpha
        self.mixup_prob = mixup_prob
        self.mixup_switch_prob = mixup_switch_prob
        self.class_balanced = class_balanced
        self.on_device = on_device
        self._uint8_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.batch_augment: BatchAugment | None = None
        self._total_steps: float | None = None
        self.classes: list[str] | None = None
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    # -- what a subclass provides -------------------------------------------------------------------------------

    @property
    @abstractmethod
    def num_classes(self) -> int:
        """Number of classes; linked to ``model.num_classes`` by the CLI, so it must be known after ``__init__``."""

    @property
    def class_names(self) -> list[str]:
        """Name of each class in index order; linked to ``model.class_names``, which checkpoints keep.

        A subclass sets ``self.classes`` in ``__init__``; without it the classes are named by their index.
        """
        return list(self.classes) if self.classes is not None else [str(i) for i in range(self.num_classes)]

    @abstractmethod
    def _train_source(self) -> Dataset:
        """The training images as a dataset of ``(PIL image, class index)``, without transforms."""

    def _val_source(self) -> Dataset | None:
        """A separate validation set, or ``None`` to carve one from the training set (the default)."""
        return None

    @abstractmethod
    def _test_source(self) -> Dataset:
        """The held-out test images, used by ``test`` and ``predict`` only."""

    def _needs_resize(self) -> bool:
        """Whether stored images must be resized to ``img_size``; subclasses with a fixed native size refine this."""
        return True

    # -- shared machinery ----------------------------------------------------------------------------------------

    def train_transform(self) -> Any:
        """The training pipeline for this module's settings."""
        return train_transform(
            self.img_size,
            self.mean,
            self.std,
            resize=self._needs_resize(),
            crop_padding=self.crop_padding,
            hflip=self.hflip,
            policy=policy_transform(self.augment, self.randaugment_num_ops, self.randaugment_magnitude),
        )

    def eval_transform(self) -> Any:
        """The deterministic pipeline for validation, test and predict."""
        return eval_transform(self.img_size, self.mean, self.std, resize=self._needs_resize())

    def setup(self, stage: str) -> None:
        """Build the datasets that ``stage`` needs; idempotent, so a fit followed by a test reuses the split."""
        if stage in ("fit", "validate") and self.val_set is None:
            source = self._train_source()
            val_source = self._val_source()
            if val_source is None:
                train_idx, val_idx = split_indices(len(source), self.val_size, self.seed)
                self.train_set = TransformedSubset(source, train_idx, self.train_transform())
                self.val_set = TransformedSubset(source, val_idx, self.eval_transform())
            else:
                self.train_set = TransformedSubset(source, None, self.train_transform())
                self.val_set = TransformedSubset(val_source, None, self.eval_transform())
        if stage == "fit" and self.batch_augment is None:
            augment = BatchAugment(
                self.num_classes,
                erasing=self.random_erasing,
                erasing_end=self.random_erasing_end,
                mixup_alpha=self.mixup_alpha,
                cutmix_alpha=self.cutmix_alpha,
                mixup_prob=self.mixup_prob,
                switch_prob=self.mixup_switch_prob,
            )
            self.batch_augment = augment if augment.active else None
        if stage in ("test", "predict") and self.test_set is None:
            self.test_set = TransformedSubset(self._test_source(), None, self.eval_transform())

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Apply the batch augmentations (erasing, Mixup/CutMix) to training batches, on the training device."""
        if self.batch_augment is None or self.trainer is None or not self.trainer.training:
            return batch
        if not isinstance(batch, (list, tuple)) or len(batch) != 2:  # e.g. the model summary's example input
            return batch
        images, targets = batch
        return self.batch_augment(images, targets, self._progress())

    def _progress(self) -> float:
        """Fraction of the run's optimizer steps done (0 when the run's length is unbounded)."""
        if self._total_steps is None:
            self._total_steps = self.trainer.estimated_stepping_batches
        return 0.0 if math.isinf(self._total_steps) else self.trainer.global_step / max(1.0, self._total_steps)

    def _loader(self, dataset: Dataset | None, train: bool) -> DataLoader | DeviceLoader:
        if dataset is None:
            raise RuntimeError("setup() must run before the loaders are requested; the Trainer does this for you.")
        if self.on_device:
            return self._device_loader(dataset, train)
        sampler = _class_balanced_sampler(dataset) if train and self.class_balanced else None
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=train and sampler is None,
            sampler=sampler,
            # Full training batches only: Mixup pairs images, and one odd-sized step would recompile a compiled
            # model. Data sets smaller than one batch keep their single partial batch.
            drop_last=train and len(dataset) >= self.batch_size,
            num_workers=self.workers,
            pin_memory=self.pin_memory and torch.cuda.is_available(),
            persistent_workers=self.persistent_workers and self.workers > 0,
        )

    @property
    def workers(self) -> int:
        """``num_workers``, but no more than this process may use CPU cores (a recipe's 8 on a 2-core laptop is 2)."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return min(self.num_workers, cores)

    def _device_loader(self, dataset: TransformedSubset, train: bool) -> DeviceLoader:
        """The split as a DeviceLoader; train and validation share one decoded copy of their source."""
        device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        key = id(dataset.source)
        if key not in self._uint8_cache:
            self._uint8_cache[key] = images_as_uint8(dataset.source, self.img_size, self._needs_resize())
        all_images, all_targets = self._uint8_cache[key]
        index = torch.as_tensor(dataset.indices, dtype=torch.long)
        images, targets = all_images[index].to(device), all_targets[index].to(device)
        weights = _class_balance_weights(dataset) if train and self.class_balanced else None
        return DeviceLoader(
            images,
            targets,
            self.batch_size,
            img_size=self.img_size,
            mean=self.mean,
            std=self.std,
            shuffle=train,
            drop_last=train,
            crop_padding=self.crop_padding if train else 0,
            hflip=self.hflip and train,
            sample_weights=weights,
        )

    def train_dataloader(self) -> DataLoader | DeviceLoader:
        """Shuffled training batches."""
        return self._loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader | DeviceLoader:
        """Validation batches in a fixed order."""
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> DataLoader | DeviceLoader:
        """Test batches in a fixed order."""
        return self._loader(self.test_set, train=False)

    def predict_dataloader(self) -> DataLoader | DeviceLoader:
        """The test split, in order, for ``predict``."""
        return self._loader(self.test_set, train=False)


def _class_balance_weights(dataset: Dataset) -> torch.Tensor:
    """Weight 1 / (its class's count) per image, so every class is drawn equally often on average."""
    targets = dataset.targets
    counts = Counter(targets)
    return torch.tensor([1.0 / counts[t] for t in targets], dtype=torch.double)


def _class_balanced_sampler(dataset: Dataset) -> WeightedRandomSampler:
    """Draw as many images as the split holds, with replacement, by `_class_balance_weights`."""
    return WeightedRandomSampler(_class_balance_weights(dataset), num_samples=len(dataset), replacement=True)


def _check_augmentation(
    augment: str,
    num_ops: int,
    magnitude: int,
    erasing: float,
    erasing_end: float | None,
    mixup_alpha: float,
    cutmix_alpha: float,
    mixup_prob: float,
    switch_prob: float,
    batch_size: int,
) -> None:
    """Reject augmentation settings that cannot work, naming the flag and its valid range."""
    if augment not in POLICIES:
        raise ConfigError(f"augment={augment!r} is not known; use one of {', '.join(POLICIES)}.")
    if num_ops < 1:
        raise ConfigError(f"randaugment_num_ops={num_ops} must be at least 1.")
    if not 0 <= magnitude <= RANDAUGMENT_MAX_MAGNITUDE:
        raise ConfigError(
            f"randaugment_magnitude={magnitude} is outside 0..{RANDAUGMENT_MAX_MAGNITUDE}; 9 is DeiT's value."
        )
    for name, value in (
        ("random_erasing", erasing),
        ("random_erasing_end", erasing_end),
        ("mixup_prob", mixup_prob),
        ("mixup_switch_prob", switch_prob),
    ):
        if value is not None and not 0.0 <= value <= 1.0:
            raise ConfigError(f"{name}={value} is a probability outside [0, 1].")
    for name, value in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
        if value < 0:
            raise ConfigError(f"{name}={value} is negative; use 0 to disable it, or e.g. 0.8 (Mixup), 1.0 (CutMix).")
    if (mixup_alpha > 0 or cutmix_alpha > 0) and batch_size % 2:
        raise ConfigError(f"batch_size={batch_size} is odd, but Mixup/CutMix mix images in pairs; use an even size.")
