"""The device-side data path: a whole split as one uint8 tensor on the training device, augmented batch by batch.

A CPU DataLoader with per-image PIL/tensor transforms delivers a few thousand CIFAR images per second per core; a
small ViT on one GPU consumes tens of thousands. Keeping the 50,000 training images on the GPU (150 MB as uint8) and
cropping, flipping and normalising whole batches there removes the worker processes and the bottleneck. Random
erasing and Mixup/CutMix already run on the device (`vitlit.data.batch_augment`), after this.

Semantics match the per-image pipeline of `vitlit.data.transforms` (tested statistically): [resize] -> random crop
of ``img_size`` from the image zero-padded by ``crop_padding`` on each side (offsets uniform in 0..2*padding) ->
horizontal flip with probability 0.5 -> scale to [0, 1] -> normalise. Random numbers come from torch's default
generator of the device, whose state `vitlit.callbacks.RNGStateCheckpoint` saves, so resume stays exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import Dataset
from torchvision.transforms import v2

from vitlit.data.transforms import resize_steps

#: PIL mode of each channel count that image files hold.
PIL_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def decode_uint8(source: Dataset, img_size: int, in_chans: int, resize: bool) -> torch.Tensor:
    """Decode every image of ``source`` once into one (N, in_chans, H, W) uint8 tensor.

    Images are resized and centre-cropped to ``img_size`` as the per-image pipeline does (``resize``). PIL images
    are converted to the mode of ``in_chans`` channels (``L``, ``RGB``, ``RGBA``); tensors must have that many.

    Args:
        source: A data set of ``(PIL image or (C, H, W) uint8 tensor, class index)``, without transforms.
        img_size: Side of the images the model sees.
        in_chans: Channels the model takes.
        resize: Whether images must be resized to ``img_size`` (their stored size differs).
    """
    steps = [v2.ToImage()] + (resize_steps(img_size) if resize else [])
    decode = v2.Compose(steps)
    mode = PIL_MODES.get(in_chans)
    images = []
    for i in range(len(source)):
        image = source[i][0]
        if isinstance(image, Image.Image) and mode is not None and image.mode != mode:
            image = image.convert(mode)
        tensor = decode(image).as_subclass(torch.Tensor)
        if tensor.shape[0] != in_chans:
            raise ValueError(f"image {i} of the data has {tensor.shape[0]} channels, but in_chans={in_chans}.")
        images.append(tensor)
    return torch.stack(images)


def crop(padded: torch.Tensor, size: int, dy: torch.Tensor, dx: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Cut a ``size`` x ``size`` window at offset (``dy``, ``dx``) out of each image ``index`` of ``padded``.

    The windows are a view of every possible crop (``unfold``); one indexing kernel copies the chosen ones, with no
    per-batch padding or copy of the rest of the data set.

    Args:
        padded: Images of shape (N, C, H, W), H and W at least ``size``.
        size: Side of the crops.
        dy: Row offset of each crop, shape (B,), in ``0..H - size``.
        dx: Column offset of each crop, shape (B,), in ``0..W - size``.
        index: Which image of ``padded`` each crop comes from, shape (B,).

    Returns:
        The crops, shape (B, C, size, size).
    """
    windows = padded.unfold(2, size, 1).unfold(3, size, 1)  # (N, C, H - size + 1, W - size + 1, size, size)
    return windows[index, :, dy, dx]


def random_offsets(n: int, padding: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column offsets uniform in ``0..2 * padding``, as RandomCrop draws them for a padded image."""
    return tuple(torch.randint(0, 2 * padding + 1, (2, n), device=device))


def random_crop(images: torch.Tensor, padding: int) -> torch.Tensor:
    """Crop each image at its own random offset from the batch zero-padded by ``padding`` (RandomCrop semantics).

    Args:
        images: A batch of square images, shape (B, C, S, S), any dtype.
        padding: Zero padding on each side; offsets are uniform in ``0..2 * padding`` per image and axis.
    """
    b, _, size, _ = images.shape
    dy, dx = random_offsets(b, padding, images.device)
    padded = F.pad(images, (padding, padding, padding, padding))
    return crop(padded, size, dy, dx, torch.arange(b, device=images.device))


def random_flip(images: torch.Tensor) -> torch.Tensor:
    """Mirror each image of a (B, C, H, W) batch left-right with probability 0.5."""
    flip = torch.rand(images.shape[0], device=images.device) < 0.5
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


class DeviceLoader:
    """Batches of a split held on the training device; an iterable Lightning uses like a DataLoader.

    Args:
        images: All images of the split, (N, C, H, W) uint8, already on the training device.
        targets: Their class indices, (N,) int64, on the same device.
        batch_size: Images per batch.
        img_size: Side of the images handed to the model; batches of another size are resized (bilinear).
        mean: Per-channel normalisation mean.
        std: Per-channel normalisation standard deviation.
        shuffle: Draw a new random order every epoch (torch's default CPU generator).
        drop_last: Leave out the last, incomplete batch.
        crop_padding: Random-crop padding in pixels; 0 disables the crop.
        hflip: Random horizontal flips.
        sample_weights: Draw ``N`` images with replacement with these weights each epoch instead (class balancing).
        policy: An augmentation policy applied to each uint8 batch after crop and flip (`vitlit.data.policies`), as
            the per-image pipeline applies torchvision's after its crop and flip.
    """

    def __init__(
        self,
        images: torch.Tensor,
        targets: torch.Tensor,
        batch_size: int,
        *,
        img_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        shuffle: bool = False,
        drop_last: bool = False,
        crop_padding: int = 0,
        hflip: bool = False,
        sample_weights: torch.Tensor | None = None,
        policy: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self._resize = images.shape[-1] != img_size or images.shape[-2] != img_size
        # Crops of stored images come straight out of a copy padded once (56% more memory for CIFAR's 4 px);
        # images that are resized first are padded a batch at a time, after the resize.
        self._prepadded = crop_padding > 0 and not self._resize
        p = crop_padding
        self.images = F.pad(images, (p, p, p, p)) if self._prepadded else images
        self.targets = targets
        self.batch_size = batch_size
        self.img_size = img_size
        # Normalisation folded into one multiply-add on the 0..255 values.
        scale = 1.0 / (255.0 * torch.tensor(std, dtype=torch.float32, device=images.device))
        self._scale = scale.view(1, -1, 1, 1)
        self._shift = (-torch.tensor(mean, dtype=torch.float32, device=images.device) * 255.0 * scale).view(1, -1, 1, 1)
        self.shuffle = shuffle
        self.drop_last = drop_last and len(targets) >= batch_size
        self.crop_padding = crop_padding
        self.hflip = hflip
        self.sample_weights = sample_weights
        self.policy = policy

    def __len__(self) -> int:
        n = len(self.targets)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _order(self) -> torch.Tensor:
        n = len(self.targets)
        if self.sample_weights is not None:
            order = torch.multinomial(self.sample_weights, n, replacement=True)
        elif self.shuffle:
            order = torch.randperm(n)
        else:
            order = torch.arange(n)
        return order.to(self.images.device, non_blocking=True)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = self._order()
        for i in range(len(self)):
            index = order[i * self.batch_size : (i + 1) * self.batch_size]
            yield self.transform(index), self.targets[index]

    def transform(self, index: torch.Tensor) -> torch.Tensor:
        """The images ``index``, resized if needed, cropped, flipped, augmented, as normalised float32 on the device."""
        if self._prepadded:
            dy, dx = random_offsets(len(index), self.crop_padding, self.images.device)
            images = crop(self.images, self.img_size, dy, dx, index)
        else:
            images = self.images[index]
            if self._resize:
                size = (self.img_size, self.img_size)
                images = F.interpolate(images.float(), size=size, mode="bilinear", antialias=True, align_corners=False)
                images = images.round_().clamp_(0, 255)  # as torchvision's uint8 resize
            if self.crop_padding > 0:
                images = random_crop(images, self.crop_padding)
        if self.hflip:
            images = random_flip(images)
        if self.policy is not None:
            images = self.policy(images)
        return images.float().mul_(self._scale).add_(self._shift)
