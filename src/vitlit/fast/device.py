"""The device-side data path: a whole split as one uint8 tensor on the training device, augmented batch by batch.

A CPU DataLoader with per-image PIL/tensor transforms delivers far fewer images per second than a small ViT on one
GPU consumes (benchmarks/RESULTS.md has the figures). Keeping the 50,000 training images on the GPU (150 MB as
uint8) and cropping, flipping and normalising whole batches there removes the worker processes and the bottleneck.
Random erasing and Mixup/CutMix already run on the device (`vitlit.fast.batch_augment`), after this.

Semantics match the per-image pipeline of `vitlit.data.transforms` (tested statistically): [resize] -> random crop
of ``img_size`` from the image zero-padded by ``crop_padding`` on each side (offsets uniform in 0..2*padding) ->
horizontal flip with probability 0.5 -> [policy] -> scale to [0, 1] -> normalise. The order of the images is the data
module's sampler's (`vitlit.data.ImageClassificationDataModule.sampler`, the DataLoader's too, DDP shards included).
Random numbers come from torch's default generator of the device, whose state
`vitlit.runs.resume.RNGStateCheckpoint` saves, so resume stays exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import Dataset, Sampler, SequentialSampler
from torchvision.transforms import v2
from torchvision.transforms.v2.functional import normalize, to_dtype

from vitlit.data.images import PIL_MODES
from vitlit.data.transforms import resize_steps

#: Every draw: one process's share of a step's random augmentation when it is the only process.
ALL = slice(None)


def decode_uint8(dataset: Dataset, img_size: int, in_chans: int, resize: bool) -> torch.Tensor:
    """Decode every image of ``dataset`` once into one (N, in_chans, H, W) uint8 tensor.

    Images are resized and centre-cropped to ``img_size`` as the per-image pipeline does (``resize``). PIL images
    are converted to the mode of ``in_chans`` channels (``L``, ``RGB``, ``RGBA``); tensors must have that many.

    Args:
        dataset: A data set of ``(PIL image or (C, H, W) uint8 tensor, class index)``, without transforms.
        img_size: Side of the images the model sees.
        in_chans: Channels the model takes.
        resize: Whether images must be resized to ``img_size`` (their stored size differs).
    """
    steps = [v2.ToImage()] + (resize_steps(img_size) if resize else [])
    decode = v2.Compose(steps)
    mode = PIL_MODES.get(in_chans)
    images = []
    for i in range(len(dataset)):
        image = dataset[i][0]
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


def random_offsets(
    n: int, padding: int, device: torch.device, among: int | None = None, share: slice = ALL
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column offsets uniform in ``0..2 * padding``, as RandomCrop draws them for a padded image.

    With ``among``, the draws are made for ``among`` images and those at ``share`` returned: one DDP process's part
    of a step shared by all (`DeviceLoader`).
    """
    dy, dx = torch.randint(0, 2 * padding + 1, (2, among or n), device=device)
    return dy[share], dx[share]


def random_crop(images: torch.Tensor, padding: int, among: int | None = None, share: slice = ALL) -> torch.Tensor:
    """Crop each image at its own random offset from the batch zero-padded by ``padding`` (RandomCrop semantics).

    Args:
        images: A batch of square images, shape (B, C, S, S), any dtype.
        padding: Zero padding on each side; offsets are uniform in ``0..2 * padding`` per image and axis.
        among: Draw for this many images, of which ``images`` are those at ``share`` (`random_offsets`).
        share: See ``among``.
    """
    b, _, size, _ = images.shape
    dy, dx = random_offsets(b, padding, images.device, among, share)
    padded = F.pad(images, (padding, padding, padding, padding))
    return crop(padded, size, dy, dx, torch.arange(b, device=images.device))


def random_flip(images: torch.Tensor, among: int | None = None, share: slice = ALL) -> torch.Tensor:
    """Mirror each image of a (B, C, H, W) batch left-right with probability 0.5 (``among``, ``share``: as crops)."""
    b = images.shape[0]
    flip = (torch.rand(among or b, device=images.device) < 0.5)[share]
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


class DeviceLoader:
    """Batches of a split held on the training device; an iterable Lightning uses like a DataLoader.

    Args:
        images: All images of the split, (N, C, H, W) uint8, already on the training device.
        targets: Their class indices, (N,) int64, on the same device.
        batch_size: Images per batch.
        sampler: The order of the images each epoch (the data module's, which the DataLoader would take): shuffled,
            class-balanced or in order, and under DDP this process's shard. Lightning calls its ``set_epoch``.
            ``None``: in order.
        img_size: Side of the images handed to the model; batches of another size are resized (bilinear).
        mean: Per-channel normalisation mean.
        std: Per-channel standard deviation.
        drop_last: Leave out the last, incomplete batch.
        crop_padding: Random-crop padding in pixels; 0 disables the crop.
        hflip: Random horizontal flips.
        policy: An augmentation policy applied to each uint8 batch after crop and flip (`vitlit.fast.policies`), as
            the per-image pipeline applies torchvision's after its crop and flip.
    """

    def __init__(
        self,
        images: torch.Tensor,
        targets: torch.Tensor,
        batch_size: int,
        *,
        sampler: Sampler | None = None,
        img_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        drop_last: bool = False,
        crop_padding: int = 0,
        hflip: bool = False,
        policy: Callable[..., torch.Tensor] | None = None,
    ) -> None:
        self._resize = images.shape[-1] != img_size or images.shape[-2] != img_size
        # Crops of stored images come straight out of a copy padded once (56% more memory for CIFAR's 4 px);
        # images that are resized first are padded a batch at a time, after the resize.
        self._prepadded = crop_padding > 0 and not self._resize
        p = crop_padding
        self.images = F.pad(images, (p, p, p, p)) if self._prepadded else images
        sampler = SequentialSampler(range(len(targets))) if sampler is None else sampler
        self.targets, self.sampler, self.batch_size, self.img_size = targets, sampler, batch_size, img_size
        self.batch_sampler = None  # what Lightning reads, beside `sampler`, of anything that has a sampler
        self.mean, self.std = list(mean), list(std)
        self.crop_padding, self.hflip, self.policy = crop_padding, hflip, policy
        self.drop_last = drop_last and len(sampler) >= batch_size
        # Under DDP each process draws the random augmentation of the whole step and takes its part, the positions
        # its sampler took (rank, rank + world_size, ...): the processes together get exactly one process's draws
        # for world_size times the batch (with equal seeds, each would otherwise draw the same ones).
        self.rank, self.world_size = getattr(sampler, "rank", 0), getattr(sampler, "num_replicas", 1)

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.as_tensor(list(self.sampler), dtype=torch.long).to(self.images.device, non_blocking=True)
        for i in range(len(self)):
            index = order[i * self.batch_size : (i + 1) * self.batch_size]
            share = slice(self.rank, None, self.world_size)
            yield self.transform(index, len(index) * self.world_size, share), self.targets[index]

    def transform(self, index: torch.Tensor, among: int | None = None, share: slice = ALL) -> torch.Tensor:
        """The images ``index``, resized if needed, cropped, flipped, augmented, as normalised float32 on the device.

        Args:
            index: Positions of the images in the split.
            among: Draw the random augmentation for a batch of this many images, of which ``index`` are those at
                ``share`` (one DDP process's part of a step); ``None``: for ``index`` alone.
            share: See ``among``.
        """
        n = len(index)
        if self._prepadded:
            dy, dx = random_offsets(n, self.crop_padding, self.images.device, among, share)
            images = crop(self.images, self.img_size, dy, dx, index)
        else:
            images = self.images[index]
            if self._resize:
                size = (self.img_size, self.img_size)
                images = F.interpolate(images.float(), size=size, mode="bilinear", antialias=True, align_corners=False)
                # Back to uint8, as torchvision's uint8 resize: the policies work on uint8 (bit operations).
                images = images.round_().clamp_(0, 255).to(torch.uint8)
            if self.crop_padding > 0:
                images = random_crop(images, self.crop_padding, among, share)
        if self.hflip:
            images = random_flip(images, among, share)
        if self.policy is not None:
            images = self.policy(images, among, share)
        # torchvision's own kernels, as the per-image pipeline's ToDtype and Normalize: the same numbers, bit for bit.
        return normalize(to_dtype(images, torch.float32, scale=True), self.mean, self.std, inplace=True)
