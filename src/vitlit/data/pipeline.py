"""How batches reach the model: vitlit's one image pipeline, from a split's uint8 images to normalised model inputs.

Two halves, in the order a batch meets them:

1. **The source** hands DataLoader batches of ``(uint8 images of one size, class indices)`` to the training device.
   The size is the one the images are stored at: their own where they all share one (a data module's
   ``native_size``: CIFAR's 32 px, also for a 224 px recipe), else the split's stored size (training's
   ``store_size``, evaluation's ``floor(img_size / crop_pct)``: `ImageClassificationDataModule.stored_size`).

   - **In memory** (`InMemory`): the split decoded once into one (N, C, S, S) uint8 tensor on the training device
     (the data module's ``uint8_images_of`` hook takes it as it is, e.g. CIFAR's array); a batch is one indexing
     operation, no worker process touches it.
   - **Streamed** (`ToStoredImage`, a DataLoader's per-image transform): workers decode each image and bring it to the
     stored size as the in-memory source stores it (resize of the shorter side and centre crop); images that share
     a size are decoded and nothing else. Batches are collated as uint8: a quarter of float32's bytes to move.

   ``--data.source`` chooses (`keep_in_memory`): ``auto`` holds the splits in memory where their stored size fits
   in a quarter of the device's free memory, and says which source it took.

2. **The device half** (`DeviceTransform`, called by ``ImageClassificationDataModule.on_after_batch_transfer``) does the
   rest, one implementation of each step for every source, so both sources give the same batches:

       [RandomResizedCrop to img_size | resize to img_size] -> [pad-crop] -> [flip] -> [policy] -> scale to [0, 1]
       -> normalise

   (random erasing and Mixup/CutMix, ``--data.batch_augment``, follow on the normalised batch; the policies are
   `vitlit.data.policies`.) The crops, flips and policies draw per image, for the whole batch at once, on the
   batch's device (the CPU on a machine without a GPU), from torch's default generator there, whose state
   `vitlit.runs.checkpoint_io.RNGStateCheckpoint` saves. Under DDP each process draws for the whole step and takes
   its own images' share (``among``, ``share``), so that the processes together draw exactly what one process would
   for the whole step.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jsonargparse.typing import restricted_number_type
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image
from torch.utils.data import Dataset
from torchvision.ops import roi_align
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2.functional import center_crop, normalize, pil_to_tensor, resize, to_dtype

from vitlit.data.images import PIL_MODES, to_mode
from vitlit.errors import ConfigError

#: The training crop: ``pad`` (CIFAR's: a random ``img_size`` window of the image zero-padded by ``crop_padding``),
#: ``resized`` (RandomResizedCrop, the crop of timm's and DeiT's recipes) or ``none``.
Crop = Literal["pad", "resized", "none"]
#: How images are resampled (RandomResizedCrop's box, the evaluation resize): timm's ``interpolation``.
Interpolation = Literal["bilinear", "bicubic"]
#: Augmentation policies (`vitlit.data.policies`, torchvision's, batched), applied after the crop and the flip.
Policy = Literal["none", "trivialaugment", "randaugment", "autoaugment"]
#: A RandAugment magnitude: torchvision's 31 bins, 0 to 30.
Magnitude = restricted_number_type("Magnitude", int, [(">=", 0), ("<=", 30)])
#: Every draw: one process's share of a step's random augmentation when it is the only process.
ALL = slice(None)

#: ``source: auto`` holds the images in memory when they take at most this share of the device's free memory: the
#: rest is for the model, its activations and the optimizer.
AUTO_DEVICE_FRACTION = 0.25


# The one resize, which both halves use (and exports and servers).


def resized_side(size: int, crop_pct: float) -> int:
    """The side the shorter side is resized to before a ``size`` centre crop keeps ``crop_pct`` (timm's rule)."""
    return math.floor(size / crop_pct)


def resize_uint8(
    images: torch.Tensor, size: int, crop_pct: float = 1.0, interpolation: Interpolation = "bilinear"
) -> torch.Tensor:
    """uint8 images (one, or a batch) to ``size`` x ``size``: the shorter side resized, then the centre cropped.

    The shorter side goes to ``floor(size / crop_pct)`` (timm's evaluation resize; ``crop_pct`` 1: ``size``), with
    torchvision's antialiased resize on the uint8 tensor: the one resize of vitlit (the sources' stored geometry,
    this batched pipeline, exports and servers), so every path gives the same pixels.
    """
    side = resized_side(size, crop_pct)
    if min(images.shape[-2:]) != side:
        images = resize(images, [side], interpolation=InterpolationMode(interpolation), antialias=True)
    return images if images.shape[-2:] == (size, size) else center_crop(images, [size])


# 1. The source: a split's view and its per-image geometry; held in memory where it fits, else streamed.


class ToStoredImage:
    """A streamed image's per-image geometry: decoded to a uint8 tensor, then brought to the split's stored size.

    Args:
        in_chans: Channels of the result (a PIL image is converted to ``L``, ``RGB`` or ``RGBA``).
        size: The stored size: resize (shorter side) and centre crop to it; ``None`` keeps the image as it is.
        interpolation: How the resize resamples.
    """

    def __init__(self, in_chans: int, size: int | None, interpolation: Interpolation = "bilinear") -> None:
        self.in_chans, self.size, self.interpolation = in_chans, size, interpolation

    def __call__(self, image: Image.Image | torch.Tensor) -> torch.Tensor:
        """A (C, H, W) uint8 tensor of ``image``."""
        mode = PIL_MODES.get(self.in_chans)
        if isinstance(image, Image.Image):
            # A file's image is in this mode already (`open_image`); another data set's is converted as files are.
            image = pil_to_tensor(image if mode is None else to_mode(image, mode))
        if image.shape[0] != self.in_chans or image.dtype != torch.uint8:
            raise ValueError(f"an image of the data is {image.dtype} with {image.shape[0]} channels; vitlit reads "
                             f"uint8 images with in_chans={self.in_chans}.")  # fmt: skip
        return image if self.size is None else resize_uint8(image, self.size, interpolation=self.interpolation)


class TransformedSubset(Dataset):
    """A view of ``dataset`` at ``indices`` with a per-image transform: what the streamed source's workers do.

    The transform is the stored geometry only (`ToStoredImage`): every crop is the training device's.
    """

    def __init__(self, dataset: Dataset, indices: Sequence[int] | None, transform: Any) -> None:
        self.dataset = dataset
        self.indices = list(range(len(dataset))) if indices is None else list(indices)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image, target = self.dataset[self.indices[i]]
        return self.transform(image), target


def free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device``: CUDA's own count, or the host's available memory (Linux); ``None`` where unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu" or not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def keep_in_memory(
    splits: Sequence[TransformedSubset], native_size: int | None, forced: bool, device: torch.device, trainer: Any
) -> bool:
    """``--data.source``: whether the splits are held in memory, decided once, on the first loader, in one line.

    ``memory`` (``forced``) is refused where the images cannot fit at all; ``auto`` takes memory where they take at
    most `AUTO_DEVICE_FRACTION` of the device's free memory (on every DDP process), else the workers.

    Args:
        splits: The splits the run has set up; images of ``native_size`` where a split's `ToStoredImage` keeps
            their size.
        native_size: The side of images that all share one size, else ``None``.
        forced: ``--data.source memory``.
        device: The training device.
        trainer: The Trainer (its processes), or ``None``.
    """
    need = sum(len(s) * s.transform.in_chans * (s.transform.size or native_size) ** 2 for s in splits)
    if device.type == "cpu" and trainer is not None:
        need *= trainer.num_devices  # each process of this machine keeps its own copy in the same memory
    free = free_memory(device)
    size = f"{sum(len(s) for s in splits):,} images take {need / 2**20:,.1f} MB as stored"
    if forced:  # refused only where it cannot fit at all, before anything is decoded
        # In host memory the decoded images and the splits' copies both live, so a CPU needs twice the stored bytes.
        need *= 2 if device.type == "cpu" else 1
        if free is not None and need > free:
            raise ConfigError(f"--data.source memory: the {size} ({need / 2**30:,.1f} GB with copies), more than the "
                              f"{free / 2**30:,.1f} GB free on {device}; use --data.source auto (or workers), or a "
                              f"smaller --data.img_size.")  # fmt: skip
        return True
    fits = free is not None and need <= AUTO_DEVICE_FRACTION * free
    if trainer is not None and trainer.world_size > 1:
        # Every DDP process must take the same source (their batch counts may differ): memory only where it fits on
        # every device. All processes ask at once, for their first loader.
        fits = trainer.strategy.reduce_boolean_decision(fits, all=True)
    share = f"{need / free:.1%} of the {free / 2**30:,.1f} GB free on {device}" if free else "free memory unknown"
    where = f"in memory on {device}" if fits else "streamed by DataLoader workers"
    other = "workers" if fits else "memory"
    rank_zero_info(f"vitlit: data source: {where} ({size}, {share}); the other: --data.source {other}")
    return fits


class InMemory(Dataset):
    """A split as one uint8 tensor and its class indices, on the training device: a batch is one gather.

    DataLoader hands ``__getitems__`` a batch's indices at once (`whole_batch` keeps the result as it is).

    Args:
        split: A view of a data module's dataset, decoded here once.
        images: The whole dataset as one uint8 array, where the data module holds it so (its ``uint8_images_of``),
            taken as it is (brought to the split's stored size where its images do not share one, as the workers
            bring each image); ``None``: the split's items decoded here by its own `ToStoredImage`.
        targets: With ``images``, the class index of every item of the dataset; decoded items bring their own.
        device: The training device.
    """

    def __init__(
        self, split: TransformedSubset, images: torch.Tensor | None, targets: Sequence[int] | None, device: torch.device
    ) -> None:
        index = torch.as_tensor(split.indices, dtype=torch.long)
        expected = (len(split.dataset), split.transform.in_chans)  # what an array taken as it is must hold
        if images is None:  # each item once, as a worker reads it: the image at the stored size, and its label
            rank_zero_info(f"vitlit: decoding {len(split)} images once to hold them in memory")
            items = [split[i] for i in range(len(split))]
            images, targets = torch.stack([image for image, _ in items]), torch.as_tensor([int(t) for _, t in items])
        elif images.dtype != torch.uint8 or images.ndim != 4 or images.shape[:2] != expected:
            raise ValueError(f"uint8_images_of returned {images.dtype} images of shape {tuple(images.shape)}; it must "
                             f"return uint8 of shape ({', '.join(map(str, expected))}, H, W).")  # fmt: skip
        else:
            images, targets = images[index], torch.as_tensor(targets, dtype=torch.long)[index]
            size = split.transform.size  # the split's stored size, where the images do not share one (`native_size`)
            if size is not None and images.shape[-2:] != (size, size):  # stored as the workers store each image
                parts = images.split(1024)  # a part at a time: the resize's own buffers stay small
                images = torch.cat([resize_uint8(p, size, interpolation=split.transform.interpolation) for p in parts])
        # Channels first in memory too (an array taken as it is may be channels last): every batch op runs faster so.
        self.images, self.targets = images.to(device).contiguous(), targets.to(device)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i], self.targets[i]

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long)
        if self.images.is_cuda:  # pinned, so that the copy does not wait for the GPU's queue
            index = index.pin_memory()
        index = index.to(self.images.device, non_blocking=True)
        return self.images.index_select(0, index), self.targets[index]  # index_select: [index] is slower on CPUs


def whole_batch(batch: Any) -> Any:
    """The collate function of `InMemory`: its ``__getitems__`` returns the batch already made."""
    return batch


# 2. The device half: `DeviceTransform` and its steps, in the order it takes them.


class DeviceTransform:
    """The device half of the pipeline, for training or evaluation: uint8 batches of one size in, model inputs out.

    Args:
        img_size: Side of the images the model sees.
        mean: Per-channel normalisation mean.
        std: Per-channel normalisation standard deviation.
        crop: The training crop (`Crop`); ``none`` for evaluation.
        crop_pct: The share of the resized image the centre crop keeps (timm's evaluation ``crop_pct``).
        crop_padding: ``pad``: zero padding on each side (0: no crop).
        scale: ``resized``: the range of the box's share of the image's area.
        ratio: ``resized``: the range of the box's aspect ratio (width / height).
        interpolation: How the box (``resized``) or the image (otherwise) is resampled.
        hflip: Mirror half of the images left-right.
        policy: A batched augmentation policy (`vitlit.data.policies.BatchPolicy`) on the uint8 batch, or ``None``.
    """

    def __init__(
        self,
        img_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        crop: Crop = "none",
        crop_pct: float = 1.0,
        crop_padding: int = 0,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        interpolation: Interpolation = "bilinear",
        hflip: bool = False,
        policy: Callable[..., torch.Tensor] | None = None,
    ) -> None:
        self.img_size, self.mean, self.std = img_size, list(mean), list(std)
        self.crop, self.crop_pct, self.crop_padding = crop, crop_pct, crop_padding
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        self.interpolation, self.hflip, self.policy = interpolation, hflip, policy

    def __call__(self, images: torch.Tensor, among: int | None = None, share: slice = ALL) -> torch.Tensor:
        """Turn a (B, C, S, S) uint8 batch into normalised float32 (B, C, img_size, img_size).

        Args:
            images: The batch, on the training device.
            among: Draw the random augmentation for a batch of this many images, of which ``images`` are those at
                ``share`` (one DDP process's part of a step); ``None``: for ``images`` alone.
            share: See ``among``.
        """
        if self.crop == "resized":
            images = random_resized_crop(
                images, self.img_size, self.scale, self.ratio, self.interpolation, among, share
            )
        elif images.shape[-2:] != (self.img_size, self.img_size) or self.crop_pct != 1:  # else nothing to resize
            images = resize_uint8(images, self.img_size, self.crop_pct, self.interpolation)
        if self.crop == "pad" and self.crop_padding > 0:
            images = random_crop(images, self.crop_padding, among, share)
        if self.hflip:
            images = random_flip(images, among, share)
        if self.policy is not None:
            images = self.policy(images, among, share)
        # To float32 in [0, 1], then normalised per channel (torchvision's ToDtype and Normalize).
        return normalize(to_dtype(images, torch.float32, scale=True), self.mean, self.std, inplace=True)


def resized_crop_boxes(
    n: int, height: int, width: int, scale: Sequence[float], ratio: Sequence[float], device: torch.device
) -> torch.Tensor:
    """Boxes ``(top, left, height, width)`` of RandomResizedCrop for ``n`` images, drawn at once: an (n, 4) tensor.

    Per image as torchvision's ``RandomResizedCrop.get_params``: up to 10 attempts draw an area fraction uniform in
    ``scale`` and a log-uniform aspect ratio in ``ratio``; the first box that fits is placed uniformly; where none
    fits, the centre crop of the image clamped to ``ratio``.
    """
    attempts = 10
    area = torch.empty(n, attempts, device=device).uniform_(*scale) * (height * width)
    aspect = torch.empty(n, attempts, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1])).exp_()
    w, h = (area * aspect).sqrt_().round_(), (area / aspect).sqrt_().round_()
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.int().argmax(dim=1, keepdim=True)  # the first attempt that fits (0 if none does)
    h, w, found = h.gather(1, first)[:, 0], w.gather(1, first)[:, 0], fits.any(dim=1)
    # torchvision's fallback: the whole image, clamped to the ratio range, centred.
    in_ratio = width / height
    fall_w = width if in_ratio <= max(ratio) else round(height * max(ratio))
    fall_h = height if in_ratio >= min(ratio) else round(width / min(ratio))
    h, w = torch.where(found, h, float(fall_h)), torch.where(found, w, float(fall_w))
    top = torch.where(found, (torch.rand(n, device=device) * (height - h + 1)).floor_(), (height - h) // 2)
    left = torch.where(found, (torch.rand(n, device=device) * (width - w + 1)).floor_(), (width - w) // 2)
    return torch.stack([top, left, h, w], dim=1)


def random_resized_crop(
    images: torch.Tensor,
    size: int,
    scale: Sequence[float],
    ratio: Sequence[float],
    interpolation: Interpolation = "bilinear",
    among: int | None = None,
    share: slice = ALL,
) -> torch.Tensor:
    """RandomResizedCrop of a uint8 batch: each image its own box (`resized_crop_boxes`), resampled to ``size``.

    ``bilinear`` resamples with ``torchvision.ops.roi_align``, which averages several samples per output pixel where
    the box shrinks (``sampling_ratio`` adaptive), so it does not alias as plain bilinear sampling would; ``bicubic``
    with ``grid_sample``. Both sample pixel centres as a resize with ``align_corners=False`` does.
    """
    b, _, height, width = images.shape
    top, left, h, w = resized_crop_boxes(among or b, height, width, scale, ratio, images.device)[share].unbind(1)
    x = images.float()
    if interpolation == "bilinear":
        boxes = torch.stack([torch.arange(b, device=x.device, dtype=x.dtype), left, top, left + w, top + h], dim=1)
        out = roi_align(x, boxes, output_size=size, spatial_scale=1.0, sampling_ratio=-1, aligned=True)
    else:  # the box in grid_sample's [-1, 1] coordinates of the whole image (align_corners=False)
        theta = torch.zeros(b, 2, 3, device=x.device)
        theta[:, 0, 0], theta[:, 0, 2] = w / width, (2 * left + w) / width - 1
        theta[:, 1, 1], theta[:, 1, 2] = h / height, (2 * top + h) / height - 1
        grid = F.affine_grid(theta, [b, x.shape[1], size, size], align_corners=False)
        out = F.grid_sample(x, grid, mode="bicubic", padding_mode="border", align_corners=False)
    return out.round_().clamp_(0, 255).to(torch.uint8)  # uint8 again, as the policies after it take


def random_crop(images: torch.Tensor, padding: int, among: int | None = None, share: slice = ALL) -> torch.Tensor:
    """Crop each image at its own offset from the batch zero-padded by ``padding`` (torchvision's RandomCrop).

    Offsets are uniform in ``0..2 * padding`` per image and axis. With ``among``, the draws are made for ``among``
    images and those at ``share`` used: one DDP process's part of a step. The windows are a view of every possible
    crop (``unfold``); one indexing kernel copies the chosen ones.
    """
    dy, dx = torch.randint(0, 2 * padding + 1, (2, among or len(images)), device=images.device)
    size = images.shape[-1]
    padded = F.pad(images, (padding, padding, padding, padding))
    windows = padded.unfold(2, size, 1).unfold(3, size, 1)  # (B, C, H + 2 * padding - size + 1, ..., size, size)
    return windows[torch.arange(len(padded), device=padded.device), :, dy[share], dx[share]]


def random_flip(images: torch.Tensor, among: int | None = None, share: slice = ALL) -> torch.Tensor:
    """Mirror each image of a (B, C, H, W) batch left-right with probability 0.5 (``among``, ``share``: as crops)."""
    flip = (torch.rand(among or len(images), device=images.device) < 0.5)[share]
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


# The normalisation's statistics, fitted to the images' channels (the data module's and a pretrained model's).


def channel_statistics(values: Sequence[float], in_chans: int, name: str) -> tuple[float, ...]:
    """Fit per-channel statistics to ``in_chans`` channels: as they are, or averaged into one for grey images.

    Args:
        values: Statistics of some channel count (a data set's defaults, or a pretrained model's).
        in_chans: Channels of the images.
        name: ``mean`` or ``std``, for the message.

    Raises:
        ConfigError: If the counts differ otherwise; the user must then give one value per channel.
    """
    if len(values) == in_chans:
        return tuple(values)
    if in_chans == 1:  # grey images: the average of the colour channels' statistics, as grey is their average
        return (sum(values) / len(values),)
    raise ConfigError(
        f"in_chans={in_chans}, but the default {name} has {len(values)} values; give {in_chans} with --data.{name} "
        f"(e.g. [{', '.join(['0.5'] * in_chans)}]), or correct --data.in_chans."
    )
