"""What every vitlit data module shares: the data contract, the seeded validation split, the pipeline and loaders.

A subclass says what data it has through the hooks of `ImageClassificationDataModule` (its datasets, class names and,
optionally, cheaper ways to read targets, raw images and file names); everything else, and every common flag, lives
here once and reads the data only through those hooks. The forking guide walks through one subclass
(docs/your-data.md: "Fork it for your data").

Images take one way whatever their source: a source (`vitlit.data.pipeline`: in memory, or streamed by DataLoader
workers) hands over uint8 batches of one size, and `on_after_batch_transfer` runs the pipeline
(`vitlit.data.pipeline`: resize, crop, flip, policy, normalise; then ``batch_augment``) on the training device.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
from lightning.pytorch import LightningDataModule
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    Sampler,
    SequentialSampler,
    TensorDataset,
    WeightedRandomSampler,
)

import vitlit.data.pipeline as pipeline
from vitlit.config import Fraction, NonNegativeInt, PositiveFloat, PositiveInt, as_builtin
from vitlit.data.images import PredictFolder
from vitlit.data.pipeline import (
    Crop,
    DeviceTransform,
    Interpolation,
    Magnitude,
    Policy,
    TransformedSubset,
    channel_statistics,
    resized_side,
)
from vitlit.errors import ConfigError
from vitlit.optim import training_progress
from vitlit.text import shown

#: Normalisation statistics of ImageNet, the default of data modules that name none of their own.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@runtime_checkable
class BatchTransform(Protocol):
    """What ``--data.batch_augment`` takes: a transform of whole training batches on the training device.

    `vitlit.regularize.batch_augment.BatchAugment` (random erasing, Mixup/CutMix) is one. A transform that mixes
    images in pairs has a true ``mixes`` attribute, and the batch size must then be even.
    """

    def __call__(
        self, images: torch.Tensor, targets: torch.Tensor, progress: float, num_classes: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the augmented batch; ``progress`` is the fraction of the run done, targets may become soft."""


class ImageClassificationDataModule(LightningDataModule, ABC):
    """Base class of vitlit's data modules: the data contract, loaders, seeded validation split and transforms.

    **The contract.** A subclass implements `class_names` and `train_dataset` (and `test_dataset`, `val_dataset` where
    the data has its own validation split): datasets of ``(image, class index)`` without transforms, the image a
    PIL image or a ``(C, H, W)`` uint8 tensor with ``in_chans`` channels. Three optional hooks make it faster:
    `targets_of` (class indices without decoding, for ``class_balanced``), `uint8_images_of` (all images as one
    uint8 tensor, to hold them in memory without decoding) and `files_of` (file names, for ``predictions.csv``);
    ``native_size`` says that every image has that size (stored so, resized on the device), ``default_mean``/
    ``default_std`` give the data's statistics. Nothing else of a dataset is read.

    The options come in groups, in this order in the signature, ``--help`` and the saved config: the images the model
    sees (``img_size`` to ``crop_pct``: linked to the model's inputs), the splits (``val_size``, ``test_size``,
    ``seed``), the batches and where their bytes come from (``batch_size`` to ``persistent_workers``), training
    augmentation (``crop`` to ``batch_augment``) and ``predict_dir``. Flags stay flat (``--data.num_workers``), as in
    Lightning's data modules and timm's ``train.py``.

    Args:
        img_size: Side of the square images fed to the model; linked to ``model.img_size`` by the CLI.
        in_chans: Channels of the images (1 grey, 3 RGB, 4 RGBA or any count a data module delivers); linked to
            ``model.in_chans``. Pretrained weights are adapted by timm (their patch embedding).
        mean: Per-channel normalisation mean, one value per channel; ``None`` uses the data's own statistics, or
            with pretrained weights those the weights were trained with (timm's pretrained config).
        std: Per-channel normalisation standard deviation; ``None`` as for ``mean``.
        interpolation: How images are resampled, ``bilinear`` or ``bicubic``: RandomResizedCrop's box and every
            resize to ``img_size``. ``None``: with pretrained weights the interpolation they were trained with
            (timm's pretrained config), else ``bilinear``.
        crop_pct: Evaluation's centre crop (timm's ``crop_pct``): validation, test, predict, exports and servers
            resize the shorter side to ``floor(img_size / crop_pct)`` and keep the centre ``img_size`` square.
            ``None``: with pretrained weights the weights' own (0.9 for the AugReg ViTs), else 1.0 (the whole
            image).
        val_size: Validation images carved from the training set when the data has no validation split of its own:
            a count (int) or a fraction (float in (0, 1)); a data set may set its own default (CIFAR: 5000). The
            test split is never used for validation.
        test_size: Test images held out of the training set, seeded, where the data has no test split of its own (a
            subclass that gives no ``test_dataset``, class folders without ``train/``, a Hugging Face data set
            without one): a count (int) or a fraction (float in (0, 1)); said in one line when it happens.
        seed: Seed of the train/validation split (independent of ``seed_everything``, so the split never changes).
        batch_size: Images per batch (per device); the effective batch also counts
            ``trainer.accumulate_grad_batches``.
        class_balanced: Draw training images with probability inversely proportional to their class's frequency
            (with replacement, one epoch = as many draws as images), for class-imbalanced data.
        source: Where the uint8 images come from (`vitlit.data.pipeline`): ``memory`` holds every split as one uint8
            tensor on the training device (no worker processes), ``workers`` streams them through ``num_workers``
            DataLoader workers, ``auto`` holds them where they fit, at their stored size, in a quarter of the device's
            free memory, and says which it took. The batches are the same either way (only the bytes' way differs).
        store_size: The side images of many sizes are stored at (the shorter side resized, the centre cropped) by
            either source, and every training crop is taken from on the training device: ``None`` stores them at
            ``img_size``. Larger gives ``crop: resized`` finer detail to crop from (e.g. 37 for ``img_size`` 32,
            timm's 0.875 crop), at ``(store_size / img_size)^2`` the memory. Images that share one size
            (``native_size``, CIFAR's) are stored as they are.
        num_workers: DataLoader worker processes (0 loads in the main process); capped at the CPU cores available.
        pin_memory: Pin host memory for faster copies to the GPU (ignored when no GPU is present).
        persistent_workers: Keep workers alive between epochs; restarting them costs seconds per short epoch.
        crop: The training crop: ``pad`` (CIFAR's: a random ``img_size`` window of the image zero-padded by
            ``crop_padding``), ``resized`` (RandomResizedCrop as in timm's and DeiT's recipes: a box of
            ``crop_scale`` of the area and ``crop_ratio`` aspect, resized to ``img_size``) or ``none``.
        crop_padding: ``crop: pad``: padding in pixels on each side; ``None`` means ``img_size // 8`` (4 at 32 px),
            0 disables the crop.
        crop_scale: ``crop: resized``: the range of the box's share of the image's area (timm's ``--scale``).
        crop_ratio: ``crop: resized``: the range of the box's aspect ratio, width / height (timm's ``--ratio``).
        hflip: Random horizontal flips in training.
        augment: Augmentation policy after crop and flip, torchvision's drawn per image on whole batches: ``none``,
            ``trivialaugment`` (TrivialAugmentWide), ``randaugment`` or ``autoaugment`` (the CIFAR-10 policy). 1 or 3
            channels.
        randaugment_num_ops: RandAugment: operations per image.
        randaugment_magnitude: RandAugment: magnitude of each operation, 0 to 30 (9 in DeiT's recipe).
        batch_augment: A transform of whole training batches on the training device (`BatchTransform`, given like
            the model's optimizer: ``class_path`` and ``init_args``), e.g.
            `vitlit.regularize.batch_augment.BatchAugment` for random erasing and Mixup/CutMix; ``None`` for none.
        predict_dir: A folder of images for ``predict`` to classify instead of the test split: any layout, nested
            folders included, no class folders needed; files that cannot be read are named and left out.
    """

    #: Normalisation statistics of the data, used when ``mean``/``std`` are not given; a subclass overrides them
    #: (class attributes, or properties that depend on its arguments). Read when needed, never in ``__init__``.
    default_mean: Sequence[float] = IMAGENET_MEAN
    default_std: Sequence[float] = IMAGENET_STD
    #: Side of the stored images when they all share one; at that ``img_size`` nothing is resized.
    native_size: int | None = None
    #: What the parts read off a data module, declared here once. ``skipped``: the images ``--data.bad_images skip``
    #: left out (`vitlit.data.images.BadImage`; the item table fills it, `vitlit.runs.records.SkippedImages` lists it);
    #: ``resumes_in_place``: a stream resumed mid-epoch goes on from where it stopped (LitData's), so a resume skips
    #: no batches of its own (`vitlit.runs.checkpoint_io`); ``description``: the data in the run card's words (the
    #: format and its folder; ``None``: the class), so that a test of other data is not recorded as the run's.
    skipped: Sequence[Any] = ()
    resumes_in_place: bool = False
    description: str | None = None

    def __init__(
        self,
        *,
        # The images the model sees (linked to the model's inputs)
        img_size: PositiveInt = 32,
        in_chans: PositiveInt = 3,
        mean: list[float] | None = None,
        std: list[PositiveFloat] | None = None,
        interpolation: Interpolation | None = None,
        crop_pct: Fraction | None = None,
        # The splits, where the data has none of its own
        val_size: int | float = 0.1,
        test_size: int | float = 0.1,
        seed: int = 42,
        # The batches, and where their bytes come from
        batch_size: PositiveInt = 128,
        class_balanced: bool = False,
        source: Literal["auto", "memory", "workers"] = "auto",
        store_size: PositiveInt | None = None,
        num_workers: NonNegativeInt = 4,
        pin_memory: bool = True,
        persistent_workers: bool = True,
        # Training augmentation, on the training device
        crop: Crop = "pad",
        crop_padding: NonNegativeInt | None = None,
        crop_scale: tuple[PositiveFloat, PositiveFloat] = (0.08, 1.0),
        crop_ratio: tuple[PositiveFloat, PositiveFloat] = (0.75, 1.3333333333333333),
        hflip: bool = True,
        augment: Policy = "none",
        randaugment_num_ops: PositiveInt = 2,
        randaugment_magnitude: Magnitude = 9,
        batch_augment: BatchTransform | None = None,
        # What predict classifies instead of the test split
        predict_dir: str | Path | None = None,
    ) -> None:
        super().__init__()
        # Checked here, not by a constrained type: jsonargparse dumps a union of an int and a float type wrongly
        # (0.1 as 0, or 5000 as 5000.0), which would change the saved config.
        for name, size in (("val_size", val_size), ("test_size", test_size)):
            if (isinstance(size, float) and not 0.0 < size < 1.0) or (isinstance(size, int) and size < 1):
                raise ConfigError(
                    f"{name}={size} is neither a count (1 or more) nor a fraction in (0, 1); use e.g. 5000 or 0.1."
                )
        for name, values in (("mean", mean), ("std", std)):
            if values is not None and len(values) != in_chans:
                raise ConfigError(
                    f"{name}={list(values)} has {len(values)} value(s) but the images have {in_chans} channel(s); "
                    f"give one per channel, e.g. --data.{name} [{','.join(['0.5'] * in_chans)}]."
                )
        if augment != "none" and in_chans not in (1, 3):  # torchvision's colour operations
            raise ConfigError(f"augment={augment!r} needs 1 or 3 channels (torchvision's colour operations), but "
                              f"in_chans={in_chans}; pass --data.augment none.")  # fmt: skip
        scale, ratio = tuple(crop_scale), tuple(crop_ratio)
        # Past 1:100 no box of the scale fits an image, and every draw would fall back to the centre crop.
        if not 0 < scale[0] <= scale[1] <= 1 or not 0.01 <= ratio[0] <= ratio[1] <= 100:
            raise ConfigError(f"crop_scale={list(scale)} or crop_ratio={list(ratio)} is not a range [low, high] with "
                              f"0 < low <= high (<= 1 for the scale, 0.01 to 100 for the ratio); e.g. [0.08, 1.0] and "
                              f"[0.75, 1.333].")  # fmt: skip
        # The images the model sees
        self.img_size, self.in_chans = as_builtin(img_size), as_builtin(in_chans)
        self._mean = None if mean is None else tuple(float(v) for v in mean)
        self._std = None if std is None else tuple(float(v) for v in std)
        self.interpolation: Interpolation = interpolation or "bilinear"  # the CLI fills a pretrained model's in
        self.crop_pct = 1.0 if crop_pct is None else float(crop_pct)
        # The splits
        self.val_size, self.test_size, self.seed = as_builtin(val_size), as_builtin(test_size), as_builtin(seed)
        # The batches
        self.batch_size, self.class_balanced, self.source = as_builtin(batch_size), class_balanced, source
        self.store_size = None if store_size is None else as_builtin(store_size)
        self.num_workers = as_builtin(num_workers)
        self.pin_memory, self.persistent_workers = pin_memory, persistent_workers
        # Training augmentation
        self.crop = crop
        self.crop_padding = self.img_size // 8 if crop_padding is None else int(crop_padding)
        self.crop_scale, self.crop_ratio = tuple(crop_scale), tuple(crop_ratio)
        self.hflip, self.augment = hflip, augment
        self.randaugment_num_ops = as_builtin(randaugment_num_ops)
        self.randaugment_magnitude = as_builtin(randaugment_magnitude)
        self.batch_augment = batch_augment
        self._in_memory: bool | None = None  # decided at the first loader (`vitlit.data.pipeline.keep_in_memory`)
        self._held: dict[int, pipeline.InMemory] = {}  # each split held in memory, by the split's identity
        self._resumed_epoch = 0  # the epoch a resumed run's first training batch comes from (`load_state_dict`)
        # The device half of the pipeline (`device_transform`), by split kind: training (True) and evaluation.
        self._device_transforms: dict[bool, DeviceTransform] = {}
        self.predict_dir = None if predict_dir is None else Path(predict_dir).expanduser()
        self._predict_folder = None
        if self.predict_dir is not None:  # its files found now, before any work starts
            self._predict_folder = PredictFolder(self.predict_dir, self.in_chans)
        self.train_set: TransformedSubset | None = None
        self._said_test_split = False  # `held_out_split` says the held-out split once, for fit and test alike
        self.val_set: TransformedSubset | None = None
        self.test_set: TransformedSubset | None = None
        self.predict_set: TransformedSubset | None = None

    # -- the contract: what a subclass provides ------------------------------------------------------------------

    @property
    @abstractmethod
    def class_names(self) -> list[str]:
        """Name of each class in index order; must be known after ``__init__``.

        Linked to ``model.class_names`` (checkpoints keep them, predictions are labelled with them), and its length
        is ``num_classes``.
        """

    @abstractmethod
    def train_dataset(self) -> Dataset:
        """The training images: a dataset of ``(PIL image or (C, H, W) uint8 tensor, class index)``, no transforms."""

    def val_dataset(self) -> Dataset | None:
        """A separate validation set, or ``None`` to carve one from the training set (the default)."""
        return None

    def test_dataset(self) -> Dataset:
        """The held-out test images, used by ``test`` (and by ``predict`` without ``predict_dir``) only.

        Without an override, `setup` holds ``test_size`` of the training images out for it (`held_out_split`),
        seeded: a new format is then ``class_names`` and ``train_dataset`` alone. (`setup` then views those items of
        the training set itself, so that its hooks, ``targets_of`` and ``uint8_images_of``, serve the test split too.)
        A subclass that lists its items before the run starts may hold the split out of them itself, with
        `held_out_split`, and give it here (the item table: `vitlit.data.table.Scan.hold_out_test`).
        """

    def predict_dataset(self) -> Dataset:
        """What ``predict`` classifies: the images of ``predict_dir``, else the test split.

        Unreadable files of the folder are named, one line each, and left out; its items have the class index -1.
        """
        if self._predict_folder is None:
            return self._own_test_dataset()
        speak = self.trainer is None or self.trainer.is_global_zero
        return self._predict_folder.readable(resized_side(self.img_size, self.crop_pct), speak)

    def targets_of(self, dataset: Dataset) -> Sequence[int]:
        """The class index of every item of ``dataset``, ideally without decoding an image.

        The default reads a ``targets`` attribute (torchvision's CIFAR, MNIST and ImageFolder keep one) or a
        ``TensorDataset``'s last tensor, and otherwise decodes every item once. Override it for data that stores its
        labels elsewhere (SVHN: ``labels``).
        """
        targets = dataset.tensors[-1] if isinstance(dataset, TensorDataset) else getattr(dataset, "targets", None)
        if targets is not None and len(targets) == len(dataset):
            values = torch.as_tensor(targets).flatten()  # one conversion, not one per item
            if values.is_floating_point() and not torch.equal(values, values.round()):  # .long() takes 1.7 for 1
                item = int((values != values.round()).nonzero()[0])
                raise ConfigError(f"item {item} of {type(self).__name__}'s {type(dataset).__name__} has the label "
                                  f"{values[item].item():.6g} ({values.dtype}), not a class index; give it integer "
                                  f"targets.")  # fmt: skip
            return values.long().tolist()
        return [int(dataset[i][1]) for i in range(len(dataset))]

    def uint8_images_of(self, dataset: Dataset) -> torch.Tensor | None:
        """All images of ``dataset`` as one (N, in_chans, H, W) uint8 tensor, to hold in memory; ``None`` decodes.

        The default takes a ``TensorDataset``'s uint8 images as they are. Override it where the data already sits in
        one array otherwise (CIFAR, SVHN): taking it costs nothing, while decoding runs every image through PIL once
        (seconds to minutes for a large folder). Set ``native_size`` to the images' size: they are then held at it
        and resized on the device, batch by batch; without it they are brought to the split's stored size once, as
        the workers bring each image.
        """
        images = dataset.tensors[0] if isinstance(dataset, TensorDataset) else None
        return images if images is not None and images.dtype == torch.uint8 and images.ndim == 4 else None

    def files_of(self, dataset: Dataset) -> Sequence[str] | None:
        """The file each item of ``dataset`` was read from, for ``predictions.csv``; ``None`` where there are none.

        The default reads ImageFolder's ``samples`` (``(path, class index)`` pairs), which `ImageFiles` keeps too.
        """
        samples = getattr(dataset, "samples", None)
        return None if samples is None else [str(path) for path, _ in samples]

    # -- derived from the contract -------------------------------------------------------------------------------

    @property
    def num_classes(self) -> int:
        """Number of classes (``len(class_names)``); linked to ``model.num_classes`` by the CLI."""
        return len(self.class_names)

    @property
    def mean(self) -> list[float]:
        """The normalisation mean in use: ``--data.mean``, else the data's ``default_mean`` fitted to ``in_chans``.

        A list (linked into the model's hyperparameters, which are saved as plain YAML).
        """
        return list(self._mean or channel_statistics(self.default_mean, self.in_chans, "mean"))

    @property
    def std(self) -> list[float]:
        """The normalisation standard deviation in use (as `mean`)."""
        return list(self._std or channel_statistics(self.default_std, self.in_chans, "std"))

    def split_targets(self, subset: TransformedSubset) -> list[int]:
        """Class index of every item of one of this module's splits, through `targets_of`."""
        targets = self.targets_of(subset.dataset)
        return [targets[i] for i in subset.indices]

    def predicting_dir(self) -> bool:
        """Whether this is a ``predict`` of ``predict_dir``: then no data set needs to be downloaded."""
        return self.predict_dir is not None and self.trainer is not None and self.trainer.predicting

    @property
    def has_test_split(self) -> bool:
        """Whether there is a test split for ``test`` and ``predict`` (a data module without one overrides this)."""
        return True

    def is_predict_dir_images(self, dataset: Dataset | None) -> bool:
        """Whether ``dataset`` is ``predict_dir``'s images (vitlit's own, not one of the subclass's datasets)."""
        return self._predict_folder is not None and dataset is self._predict_folder.images

    def stored_size(self, train: bool) -> int:
        """The side a split's images are handed over at by either source: ``native_size`` where they share one.

        Else training splits are stored at ``store_size`` (``None``: ``img_size``) for the device's crops, evaluation
        splits at ``floor(img_size / crop_pct)``, timm's resize before the centre crop, as exports and servers resize.
        """
        if self.native_size:
            return self.native_size
        return self.store_size or self.img_size if train else resized_side(self.img_size, self.crop_pct)

    def resolved(self) -> dict[str, Any]:
        """What the run took where its options leave a choice (the run card's ``resolved``, once the loaders exist).

        The source taken (``source: auto`` chooses) and the workers used (after the cap at the cores), the stored
        sizes, and the normalisation and evaluation geometry in use: given (a pretrained model's, filled in by the
        CLI) or the data's.
        """
        memory, sizes = bool(self._in_memory), {"train": self.stored_size(True), "eval": self.stored_size(False)}
        return {"source": "memory" if memory else "workers", "source_option": self.source, "stored_size": sizes,
                "workers": 0 if memory else self.workers, "mean": self.mean, "std": self.std,
                "statistics": "given" if self._mean else "ImageNet's" if tuple(self.default_mean) == IMAGENET_MEAN
                else "the data's own", "crop_pct": self.crop_pct,
                "interpolation": self.interpolation}  # fmt: skip

    # -- shared machinery ----------------------------------------------------------------------------------------

    def _view(self, dataset: Dataset, indices: Sequence[int] | None, train: bool = False) -> TransformedSubset:
        """Items ``indices`` of ``dataset``, decoded at the split's stored size (what the streamed source's workers do).

        ``predict_dir``'s files may have any size: they are stored as evaluation stores images of many sizes.
        """
        if self.is_predict_dir_images(dataset):
            size = resized_side(self.img_size, self.crop_pct)
        else:  # images that share one size are kept as they are
            size = None if self.native_size else self.stored_size(train)
        return TransformedSubset(dataset, indices, pipeline.ToStoredImage(self.in_chans, size, self.interpolation))

    def held_out_split(self, n: int, said: str | None = None) -> tuple[list[int], list[int]]:
        """The seeded (training, test) indices of ``n`` training items where the test split is held out of them.

        The one place a test split is made: by `setup` where ``test_dataset`` is not overridden, or by a subclass
        that lists its items before the run starts (the item table). A split that leaves either side empty is refused
        in one line; the split is said once, in one line, with ``said`` (what holds the items) or the class's name.
        """
        keep, held = split_indices(n, self.test_size, self.seed, "test_size")
        if not self._said_test_split:
            self._said_test_split = True
            rank_zero_info(f"vitlit: {said or type(self).__name__} has no test split: {len(held):,} of {n:,} images "
                           f"held out for test (--data.test_size {self.test_size}, seed {self.seed})")  # fmt: skip
        return keep, held

    def setup(self, stage: str) -> None:
        """Build the datasets that ``stage`` needs; idempotent, so a fit followed by a test reuses the split.

        Where the subclass gives no ``test_dataset``, the test split is held out of ``train_dataset()`` here
        (`held_out_split`); validation, where it gives no ``val_dataset``, is carved from what training keeps.
        """
        held_out = type(self).test_dataset is ImageClassificationDataModule.test_dataset
        if stage in ("fit", "validate") and self.val_set is None:
            dataset, val_dataset = self.train_dataset(), self.val_dataset()
            if len(dataset):  # the first image's kind and channels (a PIL image's bands, a tensor's first axis)
                image, name = dataset[0][0], type(self).__name__
                if isinstance(image, torch.Tensor) and image.dtype != torch.uint8:  # torchvision's ToTensor: floats
                    raise ConfigError(f"the images of {name} are {image.dtype} tensors, but vitlit reads uint8 images "
                                      f"(0-255) and scales them itself; drop ToTensor, or return "
                                      f"(image * 255).round().to(torch.uint8).")  # fmt: skip
                channels = len(image.getbands()) if hasattr(image, "getbands") else int(image.shape[0])
                last = image.shape[-1] if isinstance(image, torch.Tensor) and image.ndim == 3 else None  # NumPy's
                if channels != self.in_chans and last == self.in_chans:
                    raise ConfigError(f"the images of {name} are {tuple(image.shape)}, channels last; vitlit reads "
                                      f"(C, H, W): return image.permute(2, 0, 1).")  # fmt: skip
                if channels != self.in_chans:
                    raise ConfigError(f"the images of {name} have {channels} channel(s) but in_chans="
                                      f"{self.in_chans}; pass --data.in_chans {channels}.")  # fmt: skip
            self._check_labels(dataset)
            pool = self.held_out_split(len(dataset))[0] if held_out else None  # None: every item
            if val_dataset is None:
                pool = pool or list(range(len(dataset)))
                parts = split_indices(len(pool), self.val_size, self.seed)
                rank_zero_info(f"vitlit: {type(self).__name__} has no validation split: {len(parts[1]):,} of "
                               f"{len(pool):,} training images carved for it (--data.val_size {self.val_size}, seed "
                               f"{self.seed})")  # fmt: skip
                self.train_set = self._view(dataset, [pool[i] for i in parts[0]], train=True)
                self.val_set = self._view(dataset, [pool[i] for i in parts[1]])
            else:
                self._check_labels(val_dataset, "validation")
                self.train_set, self.val_set = self._view(dataset, pool, train=True), self._view(val_dataset, None)
        if stage == "test" and self.test_set is None:
            test = None if held_out else self._check_labels(self._own_test_dataset(), "test")
            self.test_set = self._held_out_test() if test is None else self._view(test, None)
        if stage == "predict" and self.predict_set is None:
            of_test = held_out and self.predict_dir is None  # predict classifies the test split
            self.predict_set = self._held_out_test() if of_test else self._view(self.predict_dataset(), None)

    def _own_test_dataset(self) -> Dataset:
        """The subclass's ``test_dataset()``; ``None`` (the base's, through ``super()``) is refused in one line.

        Whether a fit holds a test split out of training is decided by the override alone: a ``None`` here would
        test on images the fit trained or validated on.
        """
        dataset = self.test_dataset()
        if dataset is None:
            raise ConfigError(f"{type(self).__name__}.test_dataset() returned None, but a data module that overrides "
                              f"it holds no test split out of training; return a dataset, or remove the override to "
                              f"hold one out (--data.test_size).")  # fmt: skip
        return dataset

    def _held_out_test(self) -> TransformedSubset:
        """The test split `setup` holds out of the training set (`held_out_split`)."""
        return self._view(dataset := self.train_dataset(), self.held_out_split(len(dataset))[1])

    def _check_labels(self, dataset: Dataset, split: str = "training") -> Dataset:
        """Return ``dataset``, or refuse a label that is no class index (``targets_of``), naming the item.

        Only where the labels are read without decoding an image (a ``targets`` attribute, a ``TensorDataset``, or
        the subclass's own ``targets_of``); elsewhere the loss meets a bad label in training.
        """
        own = type(self).targets_of is not ImageClassificationDataModule.targets_of
        if getattr(dataset, "targets", None) is None and not isinstance(dataset, TensorDataset) and not own:
            return dataset
        n, targets = self.num_classes, self.targets_of(dataset)  # once: a table's class list is read from its scan
        bad = next(((i, t) for i, t in enumerate(targets) if not 0 <= t < n), None)
        if bad is not None and bad[1] == -1 and split == "test":  # -1: an unlabelled row, the Hugging Face hub's mark
            # A test split may be unlabelled: fit never reads it, and predict classifies it; test has nothing to score.
            unlabelled, files = sum(t == -1 for t in targets), self.files_of(dataset)
            if unlabelled == len(targets):
                raise ConfigError(f"{type(self).__name__}: the test split has no labels (its {len(targets):,} rows "
                                  f"are unlabelled, -1); test scores labelled images: label them, or classify them "
                                  f"with predict, which reads this split.")  # fmt: skip
            raise ConfigError(f"{type(self).__name__}: {shown(files[bad[0]]) if files else f'item {bad[0]}'} of the "
                              f"test split has no label (-1), as {unlabelled:,} of its {len(targets):,} rows; test "
                              f"scores labelled images: label them or leave them out (predict reads the split as it "
                              f"is).")  # fmt: skip
        if bad is not None:
            item, label = bad
            raise ConfigError(f"{split} item {item} of {type(self).__name__} has the label {label}, but its {n} "
                              f"class_names take the indices 0 to {n - 1}; correct the labels or name every class in "
                              f"class_names.")  # fmt: skip
        return dataset

    def train_dataloader(self) -> Any:
        """Shuffled training batches; of an even size under Mixup/CutMix, which mix them in pairs."""
        # Here, not in `_loader`: a subclass's own loader (the stream's) is refused too. Evaluation never mixes.
        if getattr(self.batch_augment, "mixes", False) and self.batch_size % 2:
            raise ConfigError(f"batch_size={self.batch_size} is odd, but Mixup/CutMix mix training images in pairs; "
                              f"use an even size.")  # fmt: skip
        return self._loader(self.train_set, train=True)

    def val_dataloader(self) -> Any:
        """Validation batches in a fixed order."""
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> Any:
        """Test batches in a fixed order."""
        return self._loader(self.test_set, train=False)

    def predict_dataloader(self) -> Any:
        """``predict_dir``'s images, or the test split, in order."""
        return self._loader(self.predict_set, train=False)

    def _loader(self, split: TransformedSubset | None, train: bool) -> DataLoader:
        """A DataLoader of ``split``'s uint8 batches from the `source` taken, in the sampler's order."""
        if split is None:
            raise RuntimeError("setup() must run before the loaders are requested; the Trainer does this for you.")
        sampler = self.sampler(split, train)
        # Full training batches only: Mixup pairs images, and one odd-sized step would recompile a compiled model.
        # A split smaller than one batch is one partial batch, of an even size under Mixup (its odd image left out).
        batch_size = self.batch_size
        if train and len(sampler) < batch_size and getattr(self.batch_augment, "mixes", False):
            if len(sampler) < 2:
                raise ConfigError(f"the training split has {len(sampler)} image per process, but Mixup/CutMix mix "
                                  f"images in pairs; add images, or pass --data.batch_augment null.")  # fmt: skip
            batch_size = len(sampler) // 2 * 2
        device = None  # where in-memory images are held: the training device (the CPU outside a Trainer)
        if self.source != "workers":
            device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        if self._in_memory is None:
            splits = [s for s in (self.train_set, self.val_set, self.test_set, self.predict_set) if s is not None]
            self._in_memory = self.source != "workers" and pipeline.keep_in_memory(
                splits, self.native_size, self.source == "memory", device, self.trainer
            )
        if self._in_memory:
            if id(split) not in self._held:  # decoded once per split: a batch size search rebuilds the loaders
                images = None if self.is_predict_dir_images(split.dataset) else self.uint8_images_of(split.dataset)
                targets = None if images is None else self.targets_of(split.dataset)  # decoded items bring their own
                self._held[id(split)] = pipeline.InMemory(split, images, targets, device)
            dataset, workers, collate = self._held[id(split)], 0, pipeline.whole_batch
        else:
            dataset, workers, collate = split, self.workers, None
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=train and len(sampler) >= batch_size,
            num_workers=workers,
            collate_fn=collate,
            pin_memory=self.pin_memory and torch.cuda.is_available() and not self._in_memory,
            persistent_workers=self.persistent_workers and workers > 0,
            # The loader's own random numbers (its workers' seeds) are not drawn from the global generator, whose
            # draws are the pipeline's: both sources then draw the same augmentation for the same seed.
            generator=torch.Generator().manual_seed(self.run_seed()),
        )

    def sampler(self, split: TransformedSubset, train: bool) -> Sampler:
        """The order of a split's items, whatever the source: shuffled or in order, under DDP this process's shard.

        Training draws a shuffled order from the run's seed and the epoch (a ``DistributedSampler``, also in one
        process: every process draws the same order and takes its own part, and a resumed run draws what the
        stopped one would have), or with ``class_balanced`` a class-balanced one; evaluation goes in order.
        Lightning's evaluation shards repeat images to even out the processes, so an accuracy would count some
        twice; here each process takes every ``world_size``-th image (`UnrepeatedDistributedSampler`), which counts
        each exactly once.
        """
        rank, world_size = self.rank_and_world_size()
        if not train:
            if world_size == 1:
                return SequentialSampler(split)
            return UnrepeatedDistributedSampler(split, num_replicas=world_size, rank=rank, shuffle=False)
        shard = {"num_replicas": world_size, "rank": rank, "seed": self.run_seed(), "drop_last": True}
        if self.class_balanced:
            balanced = class_balanced_sampler(self.split_targets(split))
            if world_size == 1:
                return balanced
            sampler = DistributedSamplerWrapper(balanced, **shard)
        else:
            sampler = DistributedSampler(split, **shard)
        # Lightning makes the first loader's iterator before it sets the epoch, and workers draw their first batches
        # then: a resumed run would start with epoch 0's order. It starts with the epoch it resumes instead.
        current = getattr(self.trainer, "current_epoch", 0)  # no trainer, or a benchmark's stand-in: 0
        sampler.set_epoch(max(self._resumed_epoch, current))
        return sampler

    def state_dict(self) -> dict[str, Any]:
        """The epoch a run resumed from this checkpoint trains first: the next, where this one's batches are done."""
        trainer = self.trainer
        if trainer is None or trainer.state.fn != "fit":
            return {}
        done = trainer.fit_loop.epoch_loop.batch_progress.current.completed >= trainer.num_training_batches
        return {"train_epoch": trainer.current_epoch + int(done)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep the epoch a resumed run trains first, for the first training sampler (`sampler`)."""
        self._resumed_epoch = int(state_dict.get("train_epoch", 0))

    def run_seed(self) -> int:
        """The run's seed (``seed_everything``), which every source's training order follows; else ``seed``."""
        return int(os.environ.get("PL_GLOBAL_SEED", self.seed))

    def rank_and_world_size(self) -> tuple[int, int]:
        """This process's global rank and the number of data-parallel processes (``(0, 1)`` outside a Trainer)."""
        return (0, 1) if self.trainer is None else (self.trainer.global_rank, self.trainer.world_size)

    @property
    def workers(self) -> int:
        """``num_workers``, but no more than this process may use CPU cores (a recipe's 8 on a 2-core laptop is 2)."""
        return min(self.num_workers, cpu_cores())

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Run the pipeline on a uint8 batch on the training device; training batches then get ``batch_augment``.

        Under DDP, a training batch is this process's share of the step (positions ``rank``, ``rank + world_size``,
        ... of the sampler's order): its random augmentation is drawn for the whole step and this share taken, so
        the processes together draw what one process would for the whole step.
        """
        if not isinstance(batch, (list, tuple)) or len(batch) != 2 or getattr(batch[0], "dtype", None) != torch.uint8:
            return batch  # e.g. the model summary's example input
        images, targets = batch
        train = self.trainer is not None and self.trainer.training
        if train:  # this process's share of the step's draws
            rank, world_size = self.trainer.global_rank, self.trainer.world_size
            among, share = len(images) * world_size, slice(rank, None, world_size)
        else:
            among, share = None, slice(None)
        images = self.device_transform(train)(images, among, share)
        if train and self.batch_augment is not None:
            images, targets = self.batch_augment(images, targets, training_progress(self.trainer), self.num_classes)
        # The model's input dtype (bf16-true, 64-true): Lightning converts a batch before the transfer, as uint8.
        precision = getattr(self.trainer, "precision_plugin", None)  # none outside a Trainer (a benchmark's stand-in)
        if precision is not None:
            images = precision.convert_input(images)
        return images, targets

    def device_transform(self, train: bool) -> DeviceTransform:
        """The device half of the pipeline for training (``train``) or evaluation batches (`vitlit.data.pipeline`)."""
        if train not in self._device_transforms:
            policy = None
            if train and self.augment != "none":
                from vitlit.data.policies import BatchPolicy  # runs that augment with a policy only

                policy = BatchPolicy(self.augment, self.randaugment_num_ops, self.randaugment_magnitude)
            crop = self.crop if train else "none"
            self._device_transforms[train] = DeviceTransform(
                self.img_size, self.mean, self.std, crop=crop, crop_pct=1.0 if train else self.crop_pct,
                crop_padding=self.crop_padding, scale=self.crop_scale, ratio=self.crop_ratio,
                interpolation=self.interpolation, hflip=self.hflip and train, policy=policy,
            )  # fmt: skip
        return self._device_transforms[train]


def cpu_cores() -> int:
    """The CPU cores this process may use (its affinity), which caps ``--data.num_workers``."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def class_balance_weights(targets: Sequence[int]) -> torch.Tensor:
    """Weight 1 / (its class's count) per image, so every class is drawn equally often on average."""
    counts = Counter(targets)
    return torch.tensor([1.0 / counts[t] for t in targets], dtype=torch.double)


def class_balanced_sampler(targets: Sequence[int]) -> WeightedRandomSampler:
    """Draw as many images as the split holds, with replacement, by `class_balance_weights`."""
    return WeightedRandomSampler(class_balance_weights(targets), num_samples=len(targets), replacement=True)


def carved_count(n: int, size: int | float, flag: str = "val_size") -> int:
    """Return how many of ``n`` training images a carved split of ``size`` takes, or raise if it would leave none.

    Args:
        n: Number of training images available.
        size: Number of images carved out (int) or their fraction of ``n`` (float in (0, 1)).
        flag: The data module's option that asked: ``val_size`` (validation), or ``test_size`` (a held-out test split).

    Raises:
        ConfigError: If the split would leave no training or no carved images.
    """
    carved = round(n * size) if isinstance(size, float) else size
    if not 1 <= carved < n:  # with fewer than 2 images, no choice helps: "between 1 and 0" is no advice
        fix = f"choose --data.{flag} between 1 and {n - 1} (or a fraction such as 0.1)" if n > 1 else "give more images"
        raise ConfigError(f"{flag}={size} asks for {carved} of the {n} training images for "
                          f"{'validation' if flag == 'val_size' else 'test'}; {fix}.")  # fmt: skip
    return carved


def split_indices(n: int, size: int | float, seed: int, flag: str = "val_size") -> tuple[list[int], list[int]]:
    """Carve a seeded subset (validation, or a test split) out of ``n`` training images.

    Args:
        n: Number of training images available.
        size: Number of images carved out (int) or their fraction of ``n`` (float in (0, 1)).
        seed: Seed of the permutation; the same seed gives the same split on every machine.
        flag: The option that asked, named by the refusal (`carved_count`).

    Returns:
        ``(kept_indices, carved_indices)``, disjoint and together covering ``range(n)``.
    """
    carved = carved_count(n, size, flag)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return order[carved:], order[:carved]
