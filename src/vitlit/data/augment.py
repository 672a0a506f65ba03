"""The training device's half of vitlit's one image pipeline: resize, crop, flip, policy and normalise, in batches.

Every source hands over uint8 images of one size (`vitlit.data.sources`): held in memory, or decoded by DataLoader
workers. After a batch reaches the training device (`ImageClassificationDataModule.on_after_batch_transfer`),
`Augment` does the rest, one implementation of each step for every source:

    [RandomResizedCrop to img_size | resize to img_size] -> [pad-crop] -> [flip] -> [policy] -> scale to [0, 1]
    -> normalise

(random erasing and Mixup/CutMix, `--data.batch_augment`, follow on the normalised batch.) The crops, flips and
policies draw per image, for the whole batch at once, on the batch's device (the CPU on a machine without a GPU),
from torch's default generator there, whose state `vitlit.runs.resume.RNGStateCheckpoint` saves. Under DDP each
process draws for the whole step and takes its own images' share (``among``, ``share``), so that the processes
together draw exactly what one process would for the whole step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from jsonargparse.typing import restricted_number_type
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2.functional import center_crop, normalize, resize, to_dtype

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


def to_normalized_float(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 images as float32 scaled to [0, 1] and normalised per channel (torchvision's ToDtype and Normalize)."""
    return normalize(to_dtype(images, torch.float32, scale=True), list(mean), list(std), inplace=True)


def crop(padded: torch.Tensor, size: int, dy: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
    """Cut a ``size`` x ``size`` window at offset (``dy[i]``, ``dx[i]``) out of image ``i`` of ``padded``.

    The windows are a view of every possible crop (``unfold``); one indexing kernel copies the chosen ones.
    """
    windows = padded.unfold(2, size, 1).unfold(3, size, 1)  # (B, C, H - size + 1, W - size + 1, size, size)
    return windows[torch.arange(len(padded), device=padded.device), :, dy, dx]


def random_crop(images: torch.Tensor, padding: int, among: int | None = None, share: slice = ALL) -> torch.Tensor:
    """Crop each image at its own offset from the batch zero-padded by ``padding`` (torchvision's RandomCrop).

    Offsets are uniform in ``0..2 * padding`` per image and axis. With ``among``, the draws are made for ``among``
    images and those at ``share`` used: one DDP process's part of a step.
    """
    dy, dx = torch.randint(0, 2 * padding + 1, (2, among or len(images)), device=images.device)
    return crop(F.pad(images, (padding, padding, padding, padding)), images.shape[-1], dy[share], dx[share])


def random_flip(images: torch.Tensor, among: int | None = None, share: slice = ALL) -> torch.Tensor:
    """Mirror each image of a (B, C, H, W) batch left-right with probability 0.5 (``among``, ``share``: as crops)."""
    flip = (torch.rand(among or len(images), device=images.device) < 0.5)[share]
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


class Augment:
    """The device half of the pipeline for one split: uint8 batches of one stored size in, model inputs out.

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
        """Augment a (B, C, S, S) uint8 batch into normalised float32 (B, C, img_size, img_size).

        Args:
            images: The batch, on the training device.
            among: Draw the random augmentation for a batch of this many images, of which ``images`` are those at
                ``share`` (one DDP process's part of a step); ``None``: for ``images`` alone.
            share: See ``among``.
        """
        if self.crop == "resized":
            from vitlit.data.resized_crop import random_resized_crop  # runs with crop: resized only

            images = random_resized_crop(
                images, self.img_size, self.scale, self.ratio, self.interpolation, among, share
            )
        else:
            images = resize_uint8(images, self.img_size, self.crop_pct, self.interpolation)
        if self.crop == "pad" and self.crop_padding > 0:
            images = random_crop(images, self.crop_padding, among, share)
        if self.hflip:
            images = random_flip(images, among, share)
        if self.policy is not None:
            images = self.policy(images, among, share)
        return to_normalized_float(images, self.mean, self.std)


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
