"""The device-side data path: a whole split as one uint8 tensor on the training device, augmented batch by batch.

A CPU DataLoader with per-image PIL/tensor transforms delivers far fewer images per second than a small ViT on one
GPU consumes (benchmarks/RESULTS.md has the figures). Keeping the 50,000 training images on the GPU (150 MB as
uint8) and cropping, flipping and normalising whole batches there removes the worker processes and the bottleneck.
Random erasing and Mixup/CutMix already run on the device (`vitlit.fast.batch_augment`), after this.

Semantics match the per-image pipeline of `vitlit.data.transforms` (tested statistically): [resize] -> random crop
of ``img_size`` from the image zero-padded by ``crop_padding`` on each side (offsets uniform in 0..2*padding) ->
horizontal flip with probability 0.5 -> scale to [0, 1] -> normalise. Random numbers come from torch's default
generator of the device, whose state `vitlit.runs.callbacks.RNGStateCheckpoint` saves, so resume stays exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import Dataset
from torchvision.transforms import v2

from vitlit.data.images import PIL_MODES
from vitlit.data.transforms import ToNormalizedFloat, resize_steps
from vitlit.fast.policies import BatchPolicy


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
    n: int, padding: int, device: torch.device, among: int | None = None, at: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column offsets uniform in ``0..2 * padding``, as RandomCrop draws them for a padded image.

    With ``among``, the draws are made for ``among`` images and those of images ``at .. at + n`` returned: one DDP
    process's part of a batch shared by all (`DeviceLoader`).
    """
    dy, dx = torch.randint(0, 2 * padding + 1, (2, among or n), device=device)
    return dy[at : at + n], dx[at : at + n]


def random_crop(images: torch.Tensor, padding: int, among: int | None = None, at: int = 0) -> torch.Tensor:
    """Crop each image at its own random offset from the batch zero-padded by ``padding`` (RandomCrop semantics).

    Args:
        images: A batch of square images, shape (B, C, S, S), any dtype.
        padding: Zero padding on each side; offsets are uniform in ``0..2 * padding`` per image and axis.
        among: Draw for this many images, of which ``images`` are those from position ``at`` (`random_offsets`).
        at: See ``among``.
    """
    b, _, size, _ = images.shape
    dy, dx = random_offsets(b, padding, images.device, among, at)
    padded = F.pad(images, (padding, padding, padding, padding))
    return crop(padded, size, dy, dx, torch.arange(b, device=images.device))


def random_flip(images: torch.Tensor, among: int | None = None, at: int = 0) -> torch.Tensor:
    """Mirror each image of a (B, C, H, W) batch left-right with probability 0.5 (``among``/``at``: `random_crop`)."""
    b = images.shape[0]
    flip = (torch.rand(among or b, device=images.device) < 0.5)[at : at + b]
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
        policy: An augmentation policy applied to each uint8 batch after crop and flip (`vitlit.fast.policies`), as
            the per-image pipeline applies torchvision's after its crop and flip.
        rank: This process's index among ``world_size`` data-parallel processes (DDP's global rank).
        world_size: Number of processes sharing each epoch. In training, every process draws the same epoch order
            and the same random numbers (the seeds are equal), cuts the order into steps of ``world_size x
            batch_size`` images and takes its ``batch_size`` of each, augmented with its part of the draws for the
            whole step: the processes see disjoint images, as many steps each, and together exactly the batches of
            one process with ``world_size`` times the batch size (augmentations included). In evaluation each takes
            positions ``rank, rank + world_size, ...`` of the split, without repeats (shards may differ by one
            image), so every image is counted once.
        share_order: Under DDP, a function that returns the main process's value of its argument on every process
            (``trainer.strategy.broadcast``): each training epoch's order is then the main process's, so the
            shares stay disjoint even when the processes' seeds differ (``seed_everything: true`` under torchrun
            draws one per process). With equal seeds it changes nothing.
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
        policy: BatchPolicy | None = None,
        rank: int = 0,
        world_size: int = 1,
        share_order: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is not one of the {world_size} processes")
        self._resize = images.shape[-1] != img_size or images.shape[-2] != img_size
        # Crops of stored images come straight out of a copy padded once (56% more memory for CIFAR's 4 px);
        # images that are resized first are padded a batch at a time, after the resize.
        self._prepadded = crop_padding > 0 and not self._resize
        p = crop_padding
        self.images = F.pad(images, (p, p, p, p)) if self._prepadded else images
        self.targets = targets
        self.batch_size = batch_size
        self.img_size = img_size
        self._normalize = ToNormalizedFloat(mean, std, device=images.device)  # the per-image path's normalisation
        self.shuffle = shuffle
        self.crop_padding = crop_padding
        self.hflip = hflip
        self.sample_weights = sample_weights
        self.policy = policy
        self.rank = rank
        self.world_size = world_size
        self._training = shuffle or sample_weights is not None
        self.share_order = share_order
        self.drop_last = drop_last and self._usable() >= self._step()

    def _usable(self) -> int:
        """Images of the epoch order that are used: in training a multiple of ``world_size`` (equal shares)."""
        n = len(self.targets)
        if self._training:
            return n // self.world_size * self.world_size
        return len(range(self.rank, n, self.world_size))  # this process's evaluation shard

    def _step(self) -> int:
        """Images of the order per step: of all processes together in training, of this one in evaluation."""
        return self.batch_size * self.world_size if self._training else self.batch_size

    def __len__(self) -> int:
        n, step = self._usable(), self._step()
        return n // step if self.drop_last else math.ceil(n / step)

    def _order(self) -> torch.Tensor:
        """The epoch's order: all processes' in training (the same everywhere), this process's shard in evaluation."""
        n = len(self.targets)
        if self.sample_weights is not None:
            order = torch.multinomial(self.sample_weights, n, replacement=True)
        elif self.shuffle:
            order = torch.randperm(n)
        else:
            order = torch.arange(n)
        if self._training and self.share_order is not None and self.world_size > 1:
            order = self.share_order(order)  # a collective: every process starts its epoch here
        order = order[: self._usable()] if self._training else order[self.rank :: self.world_size]
        return order.to(self.images.device, non_blocking=True)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order, step = self._order(), self._step()
        for i in range(len(self)):
            index = order[i * step : (i + 1) * step]
            if self._training and self.world_size > 1:
                share = len(index) // self.world_size  # a multiple of world_size: an equal share each
                at = self.rank * share
                mine = index[at : at + share]
                yield self.transform(mine, among=len(index), at=at), self.targets[mine]
            else:
                yield self.transform(index), self.targets[index]

    def transform(self, index: torch.Tensor, among: int | None = None, at: int = 0) -> torch.Tensor:
        """The images ``index``, resized if needed, cropped, flipped, augmented, as normalised float32 on the device.

        Args:
            index: Positions of the images in the split.
            among: Draw the random augmentation for a batch of this many images, of which ``index`` are those from
                position ``at`` (one DDP process's share of a step); ``None``: for ``index`` alone.
            at: See ``among``.
        """
        n = len(index)
        if self._prepadded:
            dy, dx = random_offsets(n, self.crop_padding, self.images.device, among, at)
            images = crop(self.images, self.img_size, dy, dx, index)
        else:
            images = self.images[index]
            if self._resize:
                size = (self.img_size, self.img_size)
                images = F.interpolate(images.float(), size=size, mode="bilinear", antialias=True, align_corners=False)
                # Back to uint8, as torchvision's uint8 resize: the policies work on uint8 (bit operations).
                images = images.round_().clamp_(0, 255).to(torch.uint8)
            if self.crop_padding > 0:
                images = random_crop(images, self.crop_padding, among, at)
        if self.hflip:
            images = random_flip(images, among, at)
        if self.policy is not None:
            images = self.policy(images, among, at)
        return self._normalize(images)
