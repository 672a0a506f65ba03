"""Where a split's uint8 images come from: held in memory on the training device, or streamed by DataLoader workers.

The two sources of vitlit's one image pipeline differ only in where the bytes come from; both hand DataLoader
batches of ``(uint8 images of one size, class indices)`` to the training device, where `vitlit.data.augment` does
everything else. The size is the one the images are stored at: their own where they all share one (a data module's
``native_size``: CIFAR's 32 px, also for a 224 px recipe), else the split's stored size (training's ``store_size``,
evaluation's ``floor(img_size / crop_pct)``: `vitlit.data.base.ImageClassificationDataModule.stored_size`).

- **In memory** (`InMemory`): the split decoded once into one (N, C, S, S) uint8 tensor on the training device (the
  data module's ``uint8_images_of`` hook takes it as it is, e.g. CIFAR's array); a batch is one indexing operation,
  no worker process touches it.
- **Streamed** (`Decode`, a DataLoader's per-image transform): workers decode each image and bring it to the stored
  size as the in-memory source stores it (resize of the shorter side and centre crop); images that share a size are
  decoded and nothing else. Every crop, RandomResizedCrop included, is the training device's, so both sources give the
  same batches whatever the images' sizes. Batches are collated as uint8: a quarter of float32's bytes to move.

``--data.source`` chooses (`keep_in_memory`): ``auto`` holds the splits in memory where their stored size fits in
a quarter of the device's free memory, and says which source it took.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image
from torch.utils.data import Dataset
from torchvision.transforms.v2.functional import pil_to_tensor

from vitlit.data.augment import Interpolation, resize_uint8
from vitlit.data.images import PIL_MODES
from vitlit.memory import free_memory

#: ``source: auto`` holds the images in memory when they take at most this share of the device's free memory: the
#: rest is for the model, its activations and the optimizer.
AUTO_DEVICE_FRACTION = 0.25


class Decode:
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
            image = pil_to_tensor(image if mode is None or image.mode == mode else image.convert(mode))
        if image.shape[0] != self.in_chans or image.dtype != torch.uint8:
            raise ValueError(f"an image of the data is {image.dtype} with {image.shape[0]} channels; vitlit reads "
                             f"uint8 images with in_chans={self.in_chans}.")  # fmt: skip
        return image if self.size is None else resize_uint8(image, self.size, interpolation=self.interpolation)


class TransformedSubset(Dataset):
    """A view of ``dataset`` at ``indices`` with a per-image transform: what the streamed source's workers do.

    The transform is the stored geometry only (`vitlit.data.sources.Decode`): every crop is the training device's.
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


class InMemory(Dataset):
    """A split as one uint8 tensor and its class indices, on the training device: a batch is one gather.

    DataLoader hands ``__getitems__`` a batch's indices at once (`whole_batch` keeps the result as it is).
    """

    def __init__(self, images: torch.Tensor, targets: torch.Tensor) -> None:
        self.images, self.targets = images, targets

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


def in_memory(
    split: TransformedSubset, images: torch.Tensor | None, targets: Sequence[int] | None, device: torch.device
) -> InMemory:
    """The items of ``split`` held on ``device``, decoded once.

    Args:
        split: A view of a data module's dataset.
        images: The whole dataset as one uint8 array, where the data module holds it so (its ``uint8_images_of``),
            taken as it is; ``None``: the split's items decoded here by its own `Decode`, as the workers do.
        targets: With ``images``, the class index of every item of the dataset; decoded items bring their own.
        device: The training device.
    """
    index, expected = torch.as_tensor(split.indices, dtype=torch.long), (len(split.dataset), split.transform.in_chans)
    if images is None:  # each item once, as a worker reads it: the image at the stored size, and its label
        rank_zero_info(f"vitlit: decoding {len(split)} images once to hold them in memory")
        items = [split[i] for i in range(len(split))]
        images, targets = torch.stack([image for image, _ in items]), torch.as_tensor([int(t) for _, t in items])
    elif images.dtype != torch.uint8 or images.ndim != 4 or images.shape[:2] != expected:
        raise ValueError(f"uint8_images_of returned {images.dtype} images of shape {tuple(images.shape)}; it must "
                         f"return uint8 of shape ({', '.join(map(str, expected))}, H, W).")  # fmt: skip
    else:
        images, targets = images[index], torch.as_tensor(targets, dtype=torch.long)[index]
    # Channels first in memory too (an array taken as it is may be channels last): every batch op runs faster so.
    return InMemory(images.to(device).contiguous(), targets.to(device))


def keep_in_memory(
    splits: Sequence[TransformedSubset], native_size: int | None, forced: bool, device: torch.device, trainer: Any
) -> bool:
    """``--data.source``: whether the splits are held in memory, decided once, on the first loader, in one line.

    ``true`` (``forced``) is refused where the images cannot fit at all; ``auto`` takes memory where they take at
    most `AUTO_DEVICE_FRACTION` of the device's free memory (on every DDP process), else the workers.

    Args:
        splits: The splits the run has set up; images of ``native_size`` where a split's `Decode` keeps their size.
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
        from vitlit.preflight import check_memory_source  # --data.source memory only

        return check_memory_source(size, need, free, device)
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
