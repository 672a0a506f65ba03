"""Images per second of vitlit's one image pipeline from each source, and its cost against timm's loader.

Default: 20,000 random CIFAR-shaped images (the work does not depend on the pixel values), training batches of
``--batch-size``, crop (pad 4) + flip + normalise, and again with AutoAugment (the CIFAR-10 policy, batched), from
both sources of `vitlit.data.pipeline`: held in memory (``--data.source memory``: one uint8 tensor, a batch is one
gather) and streamed (``false``: ``--workers`` DataLoader workers decode each PIL image to uint8 and collate). Either
way the batch then goes through the data module's ``on_after_batch_transfer`` (the training device's half of the
pipeline), here on the CPU: the figures are the pipeline's own speed, before a GPU multiplies the in-memory one.

    python benchmarks/data_pipeline.py    # last lines: source ratio=<in memory / streamed>, and the same with AA

``--against-timm`` times the streamed source against timm's loader on the same real image files (scikit-learn's
digits written as a PNG folder at 32 px, the digits recipe's loader: batch 64, no workers): vitlit's
``ImageFolderDataModule`` training batches (decode, uint8 collate, then crop with padding 4 and normalise on the
batch) against timm's ``ImageDataset`` with ``create_transform(32, is_training=True, no_aug=True)`` (decode, resize,
centre crop, normalise per image; what timm's train.py feeds with ``--no-aug``) in the same DataLoader, alternating,
best of ``--repeats``. Last line: ``timm cost ratio=<vitlit ms per batch / timm ms per batch>`` (goal <= 1).

``--policy-device cuda`` times the batched AutoAugment alone on that device, at 32 and 224 px.

``--pipeline-device cuda`` times the training device's whole half at 224 px from CIFAR stored at 32 px, as the
224 px CIFAR recipes run it: RandomResizedCrop (the box resampled to 224 px), flip, TrivialAugmentWide and
normalisation, batched, through the data module's ``on_after_batch_transfer``. Beside the model's training images/s
at 224 px (``benchmarks/gpu.py``), it says whether the pipeline can keep up.

``--many-sizes N`` times the photo case: N JPEG files of 150-500 px a side (random shapes, three class folders) read
by ``ImageFolderDataModule`` at ``--img-size`` (224) with ``crop: resized`` and flips, from each source. Run it with
``PYTHONPATH`` at an older ``src`` to compare code (the option is ``on_device`` before 0.6.0; taken either way).
``--model vit_tiny_patch16_224`` adds that timm model's training step (forward, backward, AdamW) after each batch, in
the same process: what a whole fit on this machine sees, where the workers and the device half share its cores with
the model.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from vitlit.data import ImageClassificationDataModule
from vitlit.data.policies import BatchPolicy


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


class FakeCIFARData(ImageClassificationDataModule):
    """A data module over `FakeCIFAR`, shaped as vitlit's CIFAR one (32 px stored, its array taken as it is)."""

    native_size = 32

    def __init__(self, n: int, **kwargs: object) -> None:
        super().__init__(mean=[0.4914, 0.4822, 0.4465], std=[0.2470, 0.2435, 0.2616], **kwargs)
        self.images = FakeCIFAR(n)

    @property
    def class_names(self) -> list[str]:
        return [str(i) for i in range(10)]

    def train_dataset(self) -> Dataset:
        return self.images

    def test_dataset(self) -> Dataset:
        return self.images

    def uint8_images_of(self, dataset: FakeCIFAR) -> torch.Tensor:
        return torch.from_numpy(dataset.data).permute(0, 3, 1, 2)


def training(data: ImageClassificationDataModule) -> ImageClassificationDataModule:
    """``data`` as a Trainer's ``fit`` sees it: training batches, one process, the CPU."""
    data.trainer = SimpleNamespace(training=True, global_rank=0, world_size=1, num_devices=1, max_epochs=1,
                                   strategy=SimpleNamespace(root_device=torch.device("cpu")))  # fmt: skip
    data.setup("fit")
    return data


def images_per_second(
    data: ImageClassificationDataModule, epochs: int, device_half: bool = True, train: Callable | None = None
) -> float:
    """One warm-up pass (workers start, caches fill), then ``epochs`` timed passes through loader and pipeline.

    ``device_half=False`` times the loader alone (the workers' half), without ``on_after_batch_transfer``;
    ``train`` (`model_step`) is called on each batch the pipeline gives.
    """
    loader = data.train_dataloader()
    step = data.on_after_batch_transfer if device_half else (lambda batch, _: batch)
    train = train or (lambda batch: None)
    for batch in loader:
        train(step(batch, 0))
    count, start = 0, time.perf_counter()
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            batch = step(batch, 0)
            train(batch)
            count += len(batch[0])
    return count / (time.perf_counter() - start)


def model_step(name: str, img_size: int, num_classes: int) -> Callable[[tuple[torch.Tensor, torch.Tensor]], None]:
    """One training step of timm's ``name`` on a batch (forward, cross-entropy, backward, AdamW), on the CPU."""
    import timm

    model = timm.create_model(name, img_size=img_size, num_classes=num_classes)
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        torch.nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def device_rate(step: Callable[[], object], device: str, batch_size: int, steps: int = 20) -> float:
    """Images/s of ``step`` (one batch of ``batch_size``) after three warm-up calls, synchronised on CUDA."""
    for _ in range(3):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    return steps * batch_size / (time.perf_counter() - start)


def policy_alone(device: str, size: int, batch_size: int) -> float:
    """Images/s of `BatchPolicy` (AutoAugment) alone on ``device`` at ``size`` px: the policy's own ceiling."""
    images = torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, device=device)
    policy = BatchPolicy("autoaugment")
    return device_rate(lambda: policy(images), device, batch_size)


def pipeline_alone(device: str, batch_size: int) -> float:
    """Images/s of the device half at 224 px (resized crop, flip, TrivialAugmentWide) of 32 px images on ``device``."""
    data = FakeCIFARData(n=64, img_size=224, crop="resized", augment="trivialaugment", val_size=16)
    data.trainer = SimpleNamespace(training=True, global_rank=0, world_size=1)
    batch = (torch.randint(0, 256, (batch_size, 3, 32, 32), dtype=torch.uint8, device=device),
             torch.zeros(batch_size, dtype=torch.long, device=device))  # fmt: skip
    images, _ = data.on_after_batch_transfer(batch, 0)
    assert images.shape == (batch_size, 3, 224, 224) and images.dtype == torch.float32
    return device_rate(lambda: data.on_after_batch_transfer(batch, 0), device, batch_size)


def ms_per_batch(batches: object, step: object = None) -> float:
    """Milliseconds per batch of one pass (no workers: the pipeline's own cost in this process)."""
    start, count = time.perf_counter(), 0
    for batch in batches:
        if step is not None:
            step(batch, 0)
        count += 1
    return (time.perf_counter() - start) * 1000 / count


def against_timm(repeats: int) -> tuple[float, float]:
    """Best ms per 64-image batch of vitlit's streamed training batches and timm's loader on the same digits files."""
    import tempfile

    from timm.data import ImageDataset, create_transform

    from vitlit.data import ImageFolderDataModule
    from vitlit.data.digits import write_digits_folder

    with tempfile.TemporaryDirectory() as folder:
        write_digits_folder(folder)
        data = training(ImageFolderDataModule(root=folder, batch_size=64, num_workers=0, hflip=False, source="workers"))
        ours = data.train_dataloader()
        theirs_set = ImageDataset(str(Path(folder) / "train"))
        theirs_set.transform = create_transform(32, is_training=True, no_aug=True, mean=data.mean, std=data.std)
        theirs = DataLoader(theirs_set, batch_size=64, shuffle=True, drop_last=True, num_workers=0)
        times: dict[str, list[float]] = {"vitlit": [], "timm": []}
        for _ in range(repeats):  # alternating, so that both see the same machine
            times["vitlit"].append(ms_per_batch(ours, data.on_after_batch_transfer))
            times["timm"].append(ms_per_batch(theirs))
    return min(times["vitlit"]), min(times["timm"])


def many_sizes(
    n: int, img_size: int, batch_size: int, workers: int, epochs: int, model: str | None = None
) -> dict[str, float]:
    """Images/s of training batches of ``n`` JPEGs of many sizes at ``img_size`` px, from memory and from workers.

    With ``model``, each batch also trains that timm model (`model_step`), and the loader alone is not timed.
    """
    import tempfile

    from vitlit.data import ImageFolderDataModule

    rng, speeds = np.random.default_rng(0), {}
    with tempfile.TemporaryDirectory() as folder:
        for i in range(n):
            side = rng.integers(150, 501, 2)
            path = Path(folder) / "train" / f"c{i % 3}" / f"{i}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (side[0], side[1], 3), dtype=np.uint8)).save(path, quality=90)
        for source, on_device in (("memory", True), ("workers", False)):
            common = {"root": folder, "img_size": img_size, "batch_size": batch_size, "crop": "resized",
                      "num_workers": workers, "val_size": 0.05}  # fmt: skip
            try:
                data = ImageFolderDataModule(source=source, **common)
            except TypeError:  # vitlit before 0.6.0
                data = ImageFolderDataModule(on_device=on_device, **common)
            train = None if model is None else model_step(model, img_size, 3)
            speeds[source] = images_per_second(training(data), epochs, train=train)
            # The workers' half alone: what a GPU's fast device half leaves as the limit.
            if source == "workers" and model is None:
                speeds["workers, loader alone"] = images_per_second(data, epochs, device_half=False)
            del data
    return speeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="DataLoader workers (streamed)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--policy-device", help="only time the batched AutoAugment on this device, 32 and 224 px")
    parser.add_argument("--pipeline-device", help="only time the device half at 224 px from 32 px on this device")
    parser.add_argument("--against-timm", action="store_true", help="only time the streamed source against timm's")
    parser.add_argument("--repeats", type=int, default=5, help="--against-timm: passes over the data per pipeline")
    parser.add_argument("--many-sizes", type=int, default=0, help="only time N JPEGs of many sizes from each source")
    parser.add_argument("--img-size", type=int, default=224, help="--many-sizes: the model's input size")
    parser.add_argument("--model", help="--many-sizes: also train this timm model on each batch")
    args = parser.parse_args()
    if args.many_sizes:
        speeds = many_sizes(args.many_sizes, args.img_size, args.batch_size, args.workers, args.epochs, args.model)
        trained = f", each batch training {args.model}" if args.model else ""
        print(f"{args.many_sizes} JPEGs of 150-500 px at {args.img_size} px, crop resized, batch {args.batch_size}"
              f"{trained}")  # fmt: skip
        for source, rate in speeds.items():
            print(f"{source}: {rate:,.{0 if rate >= 100 else 1}f} img/s")
        return
    if args.against_timm:
        ours, theirs = against_timm(args.repeats)
        print(f"training batch of 64, digits PNG files at 32 px: vitlit {ours:.2f} ms, timm {theirs:.2f} ms")
        print(f"timm cost ratio={ours / theirs:.2f}")
        return
    if args.pipeline_device:
        rate = pipeline_alone(args.pipeline_device, args.batch_size)
        print(f"224 px pipeline from 32 px (resized crop, flip, TrivialAugmentWide, normalise) on "
              f"{args.pipeline_device}, batch {args.batch_size}: {rate:,.0f} img/s")  # fmt: skip
        return
    if args.policy_device:
        for size in (32, 224):
            rate = policy_alone(args.policy_device, size, args.batch_size)
            print(f"AutoAugment on {args.policy_device}, batch {args.batch_size}, {size} px: {rate:,.0f} img/s")
        return
    speeds = {}
    for policy in ("none", "autoaugment"):
        common = {"n": args.images, "batch_size": args.batch_size, "val_size": 16, "augment": policy, "crop_padding": 4}
        held = images_per_second(training(FakeCIFARData(source="memory", **common)), args.epochs)
        streamed = FakeCIFARData(source="workers", num_workers=args.workers, **common)
        speeds[policy] = (images_per_second(training(streamed), args.epochs), held)
        del streamed  # its persistent workers end here
    print(f"cpu threads={torch.get_num_threads()} workers={args.workers} images={args.images}")
    for policy, (streamed, held) in speeds.items():
        label = "" if policy == "none" else f" + {policy}"
        print(f"streamed by {args.workers} workers{label}: {streamed:,.0f} img/s")
        print(f"held in memory{label}: {held:,.0f} img/s")
    print(f"source ratio={speeds['none'][1] / speeds['none'][0]:.1f}")
    print(f"source ratio with autoaugment={speeds['autoaugment'][1] / speeds['autoaugment'][0]:.1f}")


if __name__ == "__main__":
    main()
