"""Images per second of the two CIFAR training pipelines on the same CPU: per-image DataLoader vs batched on-device.

The per-image path is what ``--data.on_device false`` runs: torchvision's CIFAR item (a PIL image), then
RandomCrop(32, padding 4) + flip + ToDtype + Normalize per image, collated by a DataLoader with worker processes.
The batched path is ``--data.on_device true``: all images as one uint8 tensor, cropped, flipped and normalised a
batch at a time (`vitlit.fast.device`); here it runs on the CPU too, so the figure is the pipeline's own speed-up,
before a GPU multiplies it. Random CIFAR-shaped images stand in for the real files (the work does not depend on
the pixel values).

The policy case repeats both with AutoAugment (the CIFAR-10 policy) on top: torchvision's per image in the
DataLoader's workers, `vitlit.fast.policies.BatchPolicy` on whole batches (each image its own draw).

    python benchmarks/data_pipeline.py    # last lines: data speedup=<batched/per-image>, policy speedup=<same, AA>

Goals (issue 16): data speedup >= 20, policy speedup >= 10 on two CPU cores.

``--against-timm`` instead times the per-image path against timm's on the same real image files (scikit-learn's
digits written as a PNG folder at 32 px, the digits recipe's loader: batch 64, no workers): vitlit's
``ImageFolderDataModule`` training loader (decode, crop with padding 4, normalise) against timm's ``ImageDataset``
with ``create_transform(32, is_training=True, no_aug=True)`` (decode, resize, centre crop, normalise; what timm's
train.py feeds with ``--no-aug``) in the same DataLoader, alternating, best of ``--repeats``. Last line:
``timm cost ratio=<vitlit ms per batch / timm ms per batch>`` (goal <= 1).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, RandomSampler

from vitlit.data.base import TransformedSubset
from vitlit.data.transforms import policy_transform, train_transform
from vitlit.fast.device import DeviceLoader
from vitlit.fast.policies import BatchPolicy

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


def policy_alone(device: str, size: int, batch_size: int, steps: int = 20) -> float:
    """Images/s of `BatchPolicy` (AutoAugment) alone on ``device`` at ``size`` px: the policy's own ceiling."""
    images = torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, device=device)
    policy = BatchPolicy("autoaugment")
    for _ in range(3):
        policy(images)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        policy(images)
    if device == "cuda":
        torch.cuda.synchronize()
    return steps * batch_size / (time.perf_counter() - start)


def ms_per_batch(loader: DataLoader) -> float:
    """Milliseconds per batch of one pass over ``loader`` (no workers: the pipeline's own cost in this process)."""
    start, batches = time.perf_counter(), 0
    for _ in loader:
        batches += 1
    return (time.perf_counter() - start) * 1000 / batches


def against_timm(repeats: int) -> tuple[float, float]:
    """Best ms per 64-image batch of vitlit's and timm's per-image training pipelines on the same digits files."""
    import tempfile

    from timm.data import ImageDataset, create_transform

    from vitlit.data import ImageFolderDataModule
    from vitlit.data.digits import write_digits_folder

    with tempfile.TemporaryDirectory() as folder:
        write_digits_folder(folder)
        data = ImageFolderDataModule(root=folder, batch_size=64, num_workers=0, hflip=False, on_device=False)
        data.setup("fit")
        ours = data.train_dataloader()
        theirs_set = ImageDataset(str(Path(folder) / "train"))
        theirs_set.transform = create_transform(32, is_training=True, no_aug=True, mean=data.mean, std=data.std)
        theirs = DataLoader(theirs_set, batch_size=64, shuffle=True, drop_last=True, num_workers=0)
        times: dict[str, list[float]] = {"vitlit": [], "timm": []}
        for _ in range(repeats):  # alternating, so that both see the same machine
            times["vitlit"].append(ms_per_batch(ours))
            times["timm"].append(ms_per_batch(theirs))
    return min(times["vitlit"]), min(times["timm"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="DataLoader workers (per-image)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--policy-device", help="only time the batched AutoAugment on this device, 32 and 224 px")
    parser.add_argument("--against-timm", action="store_true", help="only time the per-image path against timm's")
    parser.add_argument("--repeats", type=int, default=5, help="--against-timm: passes over the data per pipeline")
    args = parser.parse_args()
    if args.against_timm:
        ours, theirs = against_timm(args.repeats)
        print(f"per-image training batch of 64, digits PNG files at 32 px: vitlit {ours:.2f} ms, timm {theirs:.2f} ms")
        print(f"timm cost ratio={ours / theirs:.2f}")
        return
    if args.policy_device:
        for size in (32, 224):
            rate = policy_alone(args.policy_device, size, args.batch_size)
            print(f"AutoAugment on {args.policy_device}, batch {args.batch_size}, {size} px: {rate:,.0f} img/s")
        return

    source = FakeCIFAR(args.images)
    # As CIFARDataModule.uint8_images_of takes torchvision's array: channels first, no decoding.
    images = torch.from_numpy(source.data).permute(0, 3, 1, 2).contiguous()
    targets = torch.tensor(source.targets)
    speeds = {}
    for policy in (None, "autoaugment"):
        transform = train_transform(
            32, MEAN, STD, resize=False, crop_padding=4, hflip=True, policy=policy and policy_transform(policy)
        )
        per_image = DataLoader(
            TransformedSubset(source, None, transform),
            batch_size=args.batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=args.workers,
            persistent_workers=args.workers > 0,
        )
        batched = DeviceLoader(
            images, targets, args.batch_size, img_size=32, mean=MEAN, std=STD, sampler=RandomSampler(targets),
            drop_last=True, crop_padding=4, hflip=True, policy=policy and BatchPolicy(policy),
        )  # fmt: skip
        fast = images_per_second(batched, args.epochs)  # first, while no worker process of the other is alive
        speeds[policy] = (images_per_second(per_image, args.epochs), fast)
        del per_image  # its persistent workers end here
    print(f"cpu threads={torch.get_num_threads()} workers={args.workers} images={args.images}")
    for policy, (slow, fast) in speeds.items():
        label = f" + {policy}" if policy else ""
        print(f"per-image DataLoader{label}: {slow:,.0f} img/s")
        print(f"batched on-device{label}:    {fast:,.0f} img/s")
    print(f"data speedup={speeds[None][1] / speeds[None][0]:.1f}")
    print(f"policy speedup={speeds['autoaugment'][1] / speeds['autoaugment'][0]:.1f}")


if __name__ == "__main__":
    main()
