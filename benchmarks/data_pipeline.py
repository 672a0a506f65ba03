"""Images per second of the two CIFAR training pipelines on the same CPU: per-image DataLoader vs batched on-device.

The per-image path is what ``--data.on_device false`` runs: torchvision's CIFAR item (a PIL image), then
RandomCrop(32, padding 4) + flip + ToDtype + Normalize per image, collated by a DataLoader with worker processes.
The batched path is ``--data.on_device true``: all images as one uint8 tensor, cropped, flipped and normalised a
batch at a time (`vitlit.data.device`); here it runs on the CPU too, so the figure is the pipeline's own speed-up,
before a GPU multiplies it. Random CIFAR-shaped images stand in for the real files (the work does not depend on
the pixel values).

    python benchmarks/data_pipeline.py          # last line: data speedup=<batched/per-image>
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from vitlit.data.base import TransformedSubset
from vitlit.data.device import DeviceLoader
from vitlit.data.transforms import train_transform

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class FakeCIFAR(Dataset):
    """torchvision's CIFAR10 item semantics (uint8 ``data`` array, PIL image per item) on random pixels."""

    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(0)
        self.data = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        self.targets = rng.integers(0, 10, n).tolist()

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        return Image.fromarray(self.data[i]), self.targets[i]


def images_per_second(loader: object, epochs: int) -> float:
    """Iterate ``loader`` once to warm up (workers start, caches fill), then time ``epochs`` full passes."""
    for _ in loader:
        pass
    count, start = 0, time.perf_counter()
    for _ in range(epochs):
        for images, _ in loader:
            count += len(images)
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="DataLoader workers (per-image)")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    source = FakeCIFAR(args.images)
    transform = train_transform(32, MEAN, STD, resize=False, crop_padding=4, hflip=True)
    per_image = DataLoader(
        TransformedSubset(source, None, transform),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    # As CIFARDataModule.source_uint8 takes torchvision's array: channels first, no decoding.
    images = torch.from_numpy(source.data).permute(0, 3, 1, 2).contiguous()
    targets = torch.tensor(source.targets)
    batched = DeviceLoader(
        images, targets, args.batch_size, img_size=32, mean=MEAN, std=STD, shuffle=True, drop_last=True,
        crop_padding=4, hflip=True,
    )  # fmt: skip
    slow = images_per_second(per_image, args.epochs)
    fast = images_per_second(batched, args.epochs)
    print(f"cpu threads={torch.get_num_threads()} workers={args.workers} images={args.images}")
    print(f"per-image DataLoader: {slow:,.0f} img/s")
    print(f"batched on-device:    {fast:,.0f} img/s")
    print(f"data speedup={fast / slow:.1f}")


if __name__ == "__main__":
    main()
