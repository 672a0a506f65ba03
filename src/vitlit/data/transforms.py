"""Train and eval image pipelines of torchvision.transforms.v2, shared by every data module."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from jsonargparse.typing import restricted_number_type
from torchvision.transforms import v2

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
    """Resize (shorter side) and centre-crop to a square of ``img_size``: the geometry both pipelines start with.

    Both are no-ops for an image of that size already.
    """
    return [v2.Resize(img_size, antialias=True), v2.CenterCrop(img_size)]


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

    This is the classic CIFAR recipe (RandomCrop(32, padding=4) + flip), scaled with the image size. Geometry and
    the policy run on uint8 images, which is cheaper than on floats; the conversion to float comes last.

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
    steps: list[Any] = [v2.ToImage(), *(resize_steps(img_size) if resize else [])]
    if crop_padding > 0:
        steps.append(v2.RandomCrop(img_size, padding=crop_padding))
    if hflip:
        steps.append(v2.RandomHorizontalFlip())
    if policy is not None:
        steps.append(policy)
    return v2.Compose([*steps, *_to_normalized_float(mean, std)])


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
    return v2.Compose([v2.ToImage(), *(resize_steps(img_size) if resize else []), *_to_normalized_float(mean, std)])


def _to_normalized_float(mean: Sequence[float], std: Sequence[float]) -> list[v2.Transform]:
    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std)), v2.ToPureTensor()]


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
