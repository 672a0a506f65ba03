"""``--data.on_device``: the splits as uint8 tensors on the training device, batched there (`vitlit.fast.device`).

A data module asks its ``loader`` for each split's loader before it builds a per-image DataLoader (see
`vitlit.data.base.SplitLoader`); `OnDevice` answers with a `DeviceLoader` where the images fit, else with ``None``
and the data module falls back to the DataLoader. `DeviceData`, a callback that ``vitlit/defaults.yaml`` lists, gives
every data module with ``on_device`` true or auto an `OnDevice`. The batched policies (`vitlit.fast.policies`) are
imported by the runs that augment with one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import Dataset, Sampler

from vitlit.data.base import ImageClassificationDataModule
from vitlit.errors import ConfigError
from vitlit.fast.device import DeviceLoader, decode_uint8
from vitlit.memory import free_memory

if TYPE_CHECKING:
    from vitlit.data.base import TransformedSubset

#: ``use: auto`` keeps the images on the training device when they take at most this share of its free memory: the
#: rest is for the model, its activations and the optimizer.
AUTO_DEVICE_FRACTION = 0.25


class DeviceData(Callback):
    """Give the run's data module an `OnDevice` loader, for its ``on_device`` (``true`` or ``auto``).

    Listed in ``vitlit/defaults.yaml``; the data module's own flag decides, so nothing here is configured.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        data = trainer.datamodule
        if isinstance(data, ImageClassificationDataModule) and data.loader is None and data.on_device is not False:
            data.loader = OnDevice(data.on_device)


class OnDevice:
    """Keep every split as one uint8 tensor on the training device; crop, flip, augment and normalise whole batches.

    No worker processes and no CPU bottleneck: the policies of ``--data.augment`` run batched
    (`vitlit.fast.policies`), with torchvision's operations, magnitudes and signs per image.

    Args:
        use: ``auto`` takes this path when the decoded images take at most a quarter of the device's free memory
            (`AUTO_DEVICE_FRACTION`), else the per-image DataLoader, and says which in one line; ``true``/``false``
            force one path.
    """

    def __init__(self, use: bool | Literal["auto"] = "auto") -> None:
        self.use = use
        self._decided: bool | None = False if use is False else None  # true: checked against free memory too
        self._uint8: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # per dataset: its decoded copy

    def make(
        self, data: ImageClassificationDataModule, split: TransformedSubset, sampler: Sampler, train: bool
    ) -> DeviceLoader | None:
        """The split's DeviceLoader in ``sampler``'s order, or ``None`` when the per-image DataLoader is to be used."""
        if not self.applies(data):
            return None
        device = data.trainer.strategy.root_device if data.trainer is not None else torch.device("cpu")
        all_images, all_targets = self._uint8_of(data, split.dataset)
        index = torch.as_tensor(split.indices, dtype=torch.long)
        policy = None
        if train and data.augment != "none":
            from vitlit.fast.policies import BatchPolicy  # only runs that augment need it

            policy = BatchPolicy(data.augment, data.randaugment_num_ops, data.randaugment_magnitude)
        return DeviceLoader(
            all_images[index].to(device),
            all_targets[index].to(device),
            data.batch_size,
            sampler=sampler,
            img_size=data.img_size,
            mean=data.mean,
            std=data.std,
            drop_last=train,
            crop_padding=data.crop_padding if train else 0,
            hflip=data.hflip and train,
            policy=policy,
        )

    def applies(self, data: ImageClassificationDataModule) -> bool:
        """Whether the loaders keep the images on the device (``use``; ``auto`` decides on first use)."""
        if self._decided is None:
            fits = self._fits(data)
            if data.trainer is not None and data.trainer.world_size > 1:
                # Every DDP process must take the same path (the two give different batch counts): the device path
                # only where it fits on every device. All processes ask at once, for their first loader.
                everywhere = data.trainer.strategy.reduce_boolean_decision(fits, all=True)
                if fits and not everywhere:
                    rank_zero_info("vitlit: data path: DataLoader after all: another process's device has too little "
                                   "free memory")  # fmt: skip
                fits = everywhere
            self._decided = fits
        return self._decided

    def _fits(self, data: ImageClassificationDataModule) -> bool:
        """``use: auto``: the device path if the decoded images fit in `AUTO_DEVICE_FRACTION` of free memory."""
        device = data.trainer.strategy.root_device if data.trainer is not None else torch.device("cpu")
        splits = (data.train_set, data.val_set, data.test_set, data.predict_set)
        datasets = {id(split.dataset): split.dataset for split in splits if split is not None}
        images = sum(len(dataset) for dataset in datasets.values())
        side = data.native_size or data.img_size  # stored size (resized per batch), else decoded at img_size
        need = images * data.in_chans * side * side
        if device.type == "cpu" and data.trainer is not None:
            need *= data.trainer.num_devices  # each process of this machine keeps its own copy in the same memory
        free = free_memory(device)
        size = f"{images:,} images of {data.in_chans}x{side}x{side} take {need / 2**20:,.1f} MB"
        if self.use is True:  # forced: refused only where it cannot fit at all, before anything is decoded
            need *= 2 if device.type == "cpu" else 1  # in host memory, the decoded images and the splits' copies
            if free is not None and need > free:
                raise ConfigError(
                    f"--data.on_device true: the {size} ({need / 2**30:,.1f} GB with copies), more than the "
                    f"{free / 2**30:,.1f} GB free on {device}; use --data.on_device auto (or false), or a smaller "
                    f"--data.img_size."
                )
            return True
        if free is None:
            rank_zero_info(f"vitlit: data path: DataLoader ({device.type} does not report its free memory; {size}); "
                           f"--data.on_device true puts them on the device")  # fmt: skip
            return False
        fits = need <= AUTO_DEVICE_FRACTION * free
        share = f"{need / free:.1%} of the {free / 2**30:,.1f} GB free on {device}"
        if fits:
            rank_zero_info(f"vitlit: data path: on the device ({size}, {share}); --data.on_device false for the "
                           f"per-image DataLoader")  # fmt: skip
        else:
            rank_zero_info(f"vitlit: data path: DataLoader ({size}, {share}, more than the {AUTO_DEVICE_FRACTION:.0%} "
                           f"--data.on_device auto allows); --data.on_device true forces the device path")  # fmt: skip
        return fits

    def _uint8_of(self, data: ImageClassificationDataModule, dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
        """``dataset`` as (N, C, H, W) uint8 images and (N,) class indices, once per dataset (train and val share)."""
        key = id(dataset)
        if key not in self._uint8:
            # The hook knows the data module's own datasets only; predict_dir's files are decoded here.
            images = None if data.is_predict_folder(dataset) else data.uint8_images_of(dataset)
            if images is None:
                rank_zero_info(f"vitlit: decoding {len(dataset)} images once for the device path")
                images = decode_uint8(dataset, data.img_size, data.in_chans, data.needs_resize(dataset))
            elif images.dtype != torch.uint8 or images.ndim != 4 or images.shape[:2] != (len(dataset), data.in_chans):
                raise ValueError(
                    f"{type(data).__name__}.uint8_images_of returned {images.dtype} images of shape "
                    f"{tuple(images.shape)}; it must return uint8 of shape ({len(dataset)}, {data.in_chans}, H, W)."
                )
            targets = torch.as_tensor(data.targets_of(dataset), dtype=torch.long)
            self._uint8[key] = (images, targets)
        return self._uint8[key]
