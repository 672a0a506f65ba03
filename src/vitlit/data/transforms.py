"""Train and eval image pipelines (torchvision.transforms.v2), shared by every data module.

Geometry runs on uint8 tensors and the conversion to float comes last, which is cheaper than augmenting floats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from jsonargparse.typing import restricted_number_type
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from vitlit.errors import ConfigError

#: Per-image augmentation policies (torchvision.transforms.v2), applied after crop and flip.
Policy = Literal["none", "trivialaugment", "randaugment", "autoaugment"]
POLICIES: tuple[str, ...] = Policy.__args__
#: RandAugment magnitudes run from 0 to num_magnitude_bins - 1 (torchvision's default of 31 bins).
RANDAUGMENT_MAX_MAGNITUDE = 30
#: A RandAugment magnitude, checked by the parser.
Magnitude = restricted_number_type("Magnitude", int, [(">=", 0), ("<=", RANDAUGMENT_MAX_MAGNITUDE)])


def policy_transform(policy: Policy, num_ops: int = 2, magnitude: int = 9) -> v2.Transform | None:
    """Return the augmentation policy as a transform, or ``None`` for ``"none"``.

    Args:
        policy: ``trivialaugment`` (TrivialAugmentWide, no parameters), ``randaugment`` (RandAugment with
            ``num_ops`` and ``magnitude``), ``autoaugment`` (AutoAugment's learned CIFAR-10 policy) or ``none``.
        num_ops: RandAugment: operations per image.
        magnitude: RandAugment: strength of each operation, 0 to 30.
    """
    if policy == "none":
        return None
    if policy == "trivialaugment":
        return v2.TrivialAugmentWide()
    if policy == "randaugment":
        return v2.RandAugment(num_ops=num_ops, magnitude=magnitude)
    if policy == "autoaugment":
        return v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10)
    raise ValueError(f"unknown policy {policy!r}")  # callers validate first; this guards direct use


def resize_steps(img_size: int) -> list[v2.Transform]:
    """Resize (shorter side) and centre-crop to a square of ``img_size``: the geometry both pipelines start with."""
    # Shorter side to img_size, then a centred square: works for any aspect ratio, a no-op crop for square images.
    return [v2.Resize(img_size, antialias=True), v2.CenterCrop(img_size)]


class ToUint8Image:
    """A PIL image (or a uint8 tensor, passed as it is) as a (C, H, W) uint8 tensor: `v2.ToImage` without its wrapper.

    torchvision's transform class wraps its kernel in the pytree machinery of transforms v2, which costs as much as
    the conversion itself on a small image; the kernel alone is what the per-image pipeline needs
    (``benchmarks/data_pipeline.py --against-timm`` measures the pipeline).
    """

    def __call__(self, image: Image.Image | torch.Tensor) -> torch.Tensor:
        if isinstance(image, Image.Image):
            return F.pil_to_tensor(image)
        return F.to_image(image).as_subclass(torch.Tensor)

    def __repr__(self) -> str:
        return "ToUint8Image()"


class ResizeIfNeeded:
    """`resize_steps`, for the images that are not ``img_size`` x ``img_size`` already; the others pass untouched.

    An image folder may hold images of the model's size, or not, or both: the data module cannot know without
    opening every file, and torchvision's Resize and CenterCrop cost a visible share of the per-image pipeline even
    when they change nothing.
    """

    def __init__(self, img_size: int) -> None:
        self.img_size = img_size
        self.resize = v2.Compose(resize_steps(img_size))

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if tuple(image.shape[-2:]) == (self.img_size, self.img_size):
            return image
        return self.resize(image)

    def __repr__(self) -> str:
        return f"ResizeIfNeeded({self.img_size})"


class PaddedRandomCrop:
    """torchvision's ``RandomCrop(size, padding)`` with zero fill, drawing the same numbers, without padding the image.

    torchvision pads the whole image and then crops it, through its transform dispatch; this copies the part of the
    image that the crop window covers into a zero image. The offsets are drawn
    exactly as torchvision draws them (top, then left, uniform over the padded image), so with the same seed the
    output is torchvision's, pixel for pixel (tested).

    Args:
        size: Side of the square crop.
        padding: Zero padding on each side of the image.
    """

    def __init__(self, size: int, padding: int) -> None:
        self.size = size
        self.padding = padding

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        p, size = self.padding, self.size
        padded_height, padded_width = height + 2 * p, width + 2 * p
        if padded_height < size or padded_width < size:
            raise ValueError(f"a {size} px crop does not fit into a {height}x{width} image padded by {p}.")
        top = int(torch.randint(0, padded_height - size + 1, size=())) if padded_height > size else 0
        left = int(torch.randint(0, padded_width - size + 1, size=())) if padded_width > size else 0
        y, x = top - p, left - p  # the window's corner in the unpadded image
        out = image.new_zeros((*image.shape[:-2], size, size))
        y0, y1, x0, x1 = max(y, 0), min(y + size, height), max(x, 0), min(x + size, width)
        if y0 < y1 and x0 < x1:
            out[..., y0 - y : y1 - y, x0 - x : x1 - x] = image[..., y0:y1, x0:x1]
        return out

    def __repr__(self) -> str:
        return f"PaddedRandomCrop({self.size}, padding={self.padding})"


class ToNormalizedFloat:
    """uint8 to normalised float32 in one multiply and one add: ``ToDtype(float32, scale=True)`` and ``Normalize``.

    Works on one (C, H, W) image or a (B, C, H, W) batch; the device data path (`vitlit.fast.device`) uses it too.

    Args:
        mean: Per-channel mean (of the 0..1 values).
        std: Per-channel standard deviation.
        device: Where the images are.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], device: torch.device | None = None) -> None:
        self.mean, self.std = list(mean), list(std)
        std_ = torch.tensor(self.std, dtype=torch.float32, device=device).view(-1, 1, 1)
        self._scale = 1.0 / (255.0 * std_)
        self._shift = -torch.tensor(self.mean, dtype=torch.float32, device=device).view(-1, 1, 1) / std_

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        # A new float tensor (also for float input, which stays untouched), then in place: on a CPU batch this was
        # faster than addcmul's broadcast.
        return image.as_subclass(torch.Tensor).to(torch.float32, copy=True).mul_(self._scale).add_(self._shift)

    def __repr__(self) -> str:
        return f"ToNormalizedFloat(mean={self.mean}, std={self.std})"


def train_transform(
    img_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    *,
    resize: bool,
    crop_padding: int,
    hflip: bool,
    policy: v2.Transform | None = None,
) -> v2.Compose:
    """Build the training pipeline: [resize] -> random crop with padding -> [flip] -> [policy] -> normalise.

    This is the classic CIFAR recipe (RandomCrop(32, padding=4) + flip), scaled with the image size.

    Args:
        img_size: Side of the square output image.
        mean: Per-channel mean used for normalisation.
        std: Per-channel standard deviation used for normalisation.
        resize: Resize (shorter side) and centre-crop to ``img_size`` first; needed when the stored images differ.
        crop_padding: Zero padding on each side before the random ``img_size`` crop; 0 disables the crop.
        hflip: Flip horizontally with probability 0.5 (turn off for data that is not mirror-symmetric, e.g. digits).
        policy: An augmentation policy on the uint8 image (`policy_transform`), or ``None``.

    Returns:
        A transform from a PIL image (or uint8 tensor) to a normalised float tensor of shape (C, img_size, img_size).
    """
    steps: list[Any] = [ToUint8Image()]
    if resize:
        steps.append(ResizeIfNeeded(img_size))
    if crop_padding > 0:
        steps.append(PaddedRandomCrop(img_size, crop_padding))
    if hflip:
        steps.append(v2.RandomHorizontalFlip())
    if policy is not None:
        steps.append(policy)
    return v2.Compose([*steps, ToNormalizedFloat(mean, std)])


def eval_transform(img_size: int, mean: Sequence[float], std: Sequence[float], *, resize: bool) -> v2.Compose:
    """Build the deterministic validation/test/predict pipeline: [resize] -> normalise.

    Args:
        img_size: Side of the square output image.
        mean: Per-channel mean used for normalisation.
        std: Per-channel standard deviation used for normalisation.
        resize: Resize (shorter side) and centre-crop to ``img_size`` first.

    Returns:
        A transform from a PIL image (or uint8 tensor) to a normalised float tensor of shape (C, img_size, img_size).
    """
    steps = [ToUint8Image()] + ([ResizeIfNeeded(img_size)] if resize else [])
    return v2.Compose([*steps, ToNormalizedFloat(mean, std)])


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
