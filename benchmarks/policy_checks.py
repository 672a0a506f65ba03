"""Direct checks of what could make the two data paths learn differently with one weak RandAugment operation (issue 35).

Prints, for RandAugment with ``--num-ops`` operations at ``--magnitude`` (default 1 at 5 of 31 bins) on real digits:

1. each operation and sign, batched (`vitlit.fast.policies`) against torchvision's on the same images: the share of
   pixels that differ and the largest difference, in uint8 levels (the weak geometric operations round at .5);
2. the draws over ``--epochs`` epochs of the digits training split, on each path as a run makes them (the device
   loader with its sampler; the per-image DataLoader with torchvision's policy): how often each operation is drawn
   (chi-square against uniform), how often an image draws the same operation in two consecutive epochs (1/14 if
   independent), and whether an image's operation depends on its position in the batch (chi-square);
3. the order of the steps: the device path's normalised batch against the per-image pipeline's, image by image,
   with the policy off (they must be equal).

    python benchmarks/policy_checks.py            # last line: checks ok=<True|False>
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from collections import Counter
from pathlib import Path

import torch
from scipy.stats import chi2_contingency, chisquare
from torch.utils.data import RandomSampler
from torchvision.transforms import v2

from vitlit.data.digits import write_digits_folder
from vitlit.data.folder import ImageFolderDataModule
from vitlit.data.transforms import eval_transform
from vitlit.fast.device import DeviceLoader, decode_uint8
from vitlit.fast.policies import OP, OPS, BatchPolicy, apply_operations, magnitude_table

MEAN, STD = [0.5] * 3, [0.25] * 3


def operations(images: torch.Tensor, magnitude: int) -> list[tuple[str, float, int]]:
    """``(operation and sign, share of pixels that differ, largest difference)`` against torchvision's kernels."""
    policy, rows = v2.RandAugment(num_ops=1, magnitude=magnitude), []
    table = magnitude_table(BatchPolicy("randaugment").space, 31, 32, 32)
    for name in policy._AUGMENTATION_SPACE:
        signs = (1, -1) if policy._AUGMENTATION_SPACE[name][1] else (1,)
        for sign in signs:
            value = float(table[OP[name], magnitude]) * sign
            ours = apply_operations(images, torch.full((len(images),), OP[name]), torch.full((len(images),), value))
            apply = policy._apply_image_or_video_transform  # torchvision's kernel for one (operation, magnitude)
            nearest, fill = v2.InterpolationMode.NEAREST, {torch.Tensor: None}
            theirs = torch.stack([apply(image, name, value, nearest, fill) for image in images])
            diff = (ours.int() - theirs.int()).abs()
            rows.append((f"{name}{'-' if sign < 0 else ''}", float((diff > 0).float().mean()), int(diff.max())))
    return rows


def device_draws(images: torch.Tensor, epochs: int, magnitude: int, num_ops: int) -> list[list[int]]:
    """The operation each image drew in each epoch on the device path (image index -> op index), and positions."""
    policy, record = BatchPolicy("randaugment", num_ops, magnitude), []

    def recording(batch: torch.Tensor, among: int | None = None, share: slice = slice(None)) -> torch.Tensor:
        ops, _ = policy.draw(len(batch), batch.shape[-2], batch.shape[-1], batch.device)
        record.append(ops[0].tolist())
        return batch

    n = len(images)
    targets = torch.arange(n)  # the target names the image
    loader = DeviceLoader(images, targets, 64, sampler=RandomSampler(range(n)), img_size=32, mean=MEAN, std=STD,
                          drop_last=True, policy=recording)  # fmt: skip
    per_epoch = []
    for _ in range(epochs):
        record.clear()
        drawn = [-1] * n
        for (_, index), ops in zip(((b, t) for b, t in loader), record, strict=False):
            for i, op in zip(index.tolist(), ops, strict=True):
                drawn[i] = op
        per_epoch.append(drawn)
    return per_epoch


def per_image_draws(data: ImageFolderDataModule, epochs: int, magnitude: int) -> list[list[int]]:
    """The operation each image drew in each epoch through the per-image DataLoader and torchvision's policy."""
    chosen: list[int] = []
    original = v2.RandAugment._get_random_item

    def recording(self: v2.RandAugment, dct: dict) -> tuple:
        key, value = original(self, dct)
        chosen.append(OP[key])
        return key, value

    v2.RandAugment._get_random_item = recording
    try:
        split = data.train_set
        n = len(split)
        per_epoch = []
        for _ in range(epochs):
            chosen.clear()
            order = list(RandomSampler(split))
            drawn = [-1] * n
            for i in order[: n // 64 * 64]:  # drop_last, as the training loader
                split[i]
                drawn[i] = chosen[-1]
            per_epoch.append(drawn)
    finally:
        v2.RandAugment._get_random_item = original
    return per_epoch


def summarize(name: str, per_epoch: list[list[int]], space: int) -> bool:
    drawn = [op for epoch in per_epoch for op in epoch if op >= 0]
    counts = Counter(drawn)
    uniform = chisquare([counts.get(op, 0) for op in sorted(counts)]).pvalue
    pairs = [(a, b) for x, y in itertools.pairwise(per_epoch) for a, b in zip(x, y, strict=True) if min(a, b) >= 0]
    repeats = [a == b for a, b in pairs]
    repeat = sum(repeats) / len(repeats)
    # An image's operation against the next epoch's: a contingency table (independent draws: no association).
    table = torch.zeros(len(OPS), len(OPS))
    for a, b in pairs:
        table[a, b] += 1
    table = table[table.sum(1) > 0][:, table.sum(0) > 0]
    association = chi2_contingency(table.numpy()).pvalue
    print(f"{name}: {len(counts)} operations drawn {len(drawn)} times, uniform p={uniform:.3f}; the same operation "
          f"in consecutive epochs {repeat:.4f} (independent: {1 / space:.4f}); epoch-to-epoch association "
          f"p={association:.3f}")  # fmt: skip
    return uniform > 0.001 and association > 0.001 and abs(repeat - 1 / space) < 0.02


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--magnitude", type=int, default=5)
    parser.add_argument("--num-ops", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = write_digits_folder(Path(tmp) / "digits", test_fraction=0.2, seed=1, val_fraction=0.08)
        policy = v2.RandAugment(num_ops=args.num_ops, magnitude=args.magnitude)
        data = ImageFolderDataModule(root, num_workers=0, augment="randaugment", crop_padding=0, hflip=False,
                                     randaugment_num_ops=args.num_ops, randaugment_magnitude=args.magnitude,
                                     on_device=False, mean=MEAN, std=STD)  # fmt: skip
        data.setup("fit")
        images = decode_uint8(data.train_set.dataset, 32, 3, resize=True)
        ok = True
        print("| operation | pixels that differ | largest difference (levels) |\n| --- | --- | --- |")
        for name, share, largest in operations(images[:256], args.magnitude):
            print(f"| {name} | {share:.5f} | {largest} |")
            ok &= share < 0.002  # a level of rounding on a few pixels at most
        space = len(policy._AUGMENTATION_SPACE)
        ok &= summarize("device path", device_draws(images, args.epochs, args.magnitude, args.num_ops), space)
        ok &= summarize("per-image path", per_image_draws(data, args.epochs, args.magnitude), space)
        plain = DeviceLoader(images[:128], torch.zeros(128, dtype=torch.long), 128, img_size=32, mean=MEAN, std=STD)
        batch = next(iter(plain))[0]
        reference = torch.stack([eval_transform(32, MEAN, STD, resize=False)(i) for i in images[:128]])
        equal = torch.equal(batch, reference)
        print(f"normalised batch equals the per-image pipeline image by image: {equal}")
        ok &= equal
    print(f"checks ok={ok}")


if __name__ == "__main__":
    main()
