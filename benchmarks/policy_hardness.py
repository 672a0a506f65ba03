"""Do trained models find the batched policy's images harder than torchvision's own? (issue 25, a diagnosis)

Training on the device path with AutoAugment ends with a higher training loss than on the per-image path
(`policy_parity.py` records both). If the batched policy (`vitlit.fast.policies.BatchPolicy`) and torchvision's
policy give images from one distribution, a fixed model's loss on them is the same up to sampling noise. Here each
checkpoint classifies the same real digits augmented many times over by each, with nothing else in the way (no
crop, no flip): the mean loss and accuracy per policy implementation, their paired difference with its standard
error over the repetitions, and with ``--per-sub-policy`` the same for each of AutoAugment's 25 sub-policies on its
own (the one that differs is named by its row). ``--pipeline`` compares the two whole training pipelines instead:
the device loader (`vitlit.fast.device.DeviceLoader`: crop, policy, normalisation on the batch) against
torchvision's per-image transform (`vitlit.data.transforms.train_transform`), as the digits recipe configures them.

    python benchmarks/policy_hardness.py CKPT [CKPT ...] --policy autoaugment --repeats 20
    python benchmarks/policy_hardness.py CKPT --per-sub-policy --repeats 6
    python benchmarks/policy_hardness.py CKPT [CKPT ...] --pipeline --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from vitlit.data.digits import write_digits_folder
from vitlit.data.images import ImageFiles, image_files
from vitlit.data.transforms import eval_transform, policy_transform, train_transform
from vitlit.fast.device import DeviceLoader, decode_uint8
from vitlit.fast.policies import BatchPolicy
from vitlit.trained import load_classifier


def digits(root: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The training images of policy_parity.py's split as (N, 3, 32, 32) uint8 (decoded as the device path does)."""
    folder = write_digits_folder(root, test_fraction=0.2, seed=7) / "train"
    files = ImageFiles([(str(p), int(p.parent.name)) for p in image_files(folder)], [str(d) for d in range(10)])
    return decode_uint8(files, 32, 3, resize=False), torch.tensor(files.targets)


def only_sub_policy(batched: BatchPolicy, torchvision_policy: torch.nn.Module, row: int) -> None:
    """Make both implementations of AutoAugment draw sub-policy ``row`` for every image."""
    for name in ("sub_ops", "sub_probs", "sub_bins"):
        table = getattr(batched, name)
        setattr(batched, name, table[row].expand_as(table).clone())
    batched._on_device.clear()
    torchvision_policy._policies = [torchvision_policy._policies[row]]


def _normalize(card):
    """uint8 (B, C, H, W) batches to the model's normalised floats, as the evaluation pipeline does each image."""
    transform = eval_transform(32, card.mean, card.std, resize=False)
    return lambda images: torch.stack([transform(image) for image in images])


@torch.no_grad()
def loss_and_accuracy(net: torch.nn.Module, normalize, images: torch.Tensor, labels: torch.Tensor):
    """Mean cross-entropy and accuracy of ``net`` on a batch (uint8, or already normalised with ``normalize=None``)."""
    logits = torch.cat([net(normalize(chunk) if normalize else chunk) for chunk in images.split(512)])
    return float(F.cross_entropy(logits, labels)), float((logits.argmax(1) == labels).float().mean())


def compare(
    net, card, images, labels, policy: str, repeats: int, row: int | None, pipeline: bool = False
) -> dict[str, float]:
    """Loss and accuracy under each implementation, ``repeats`` fresh augmentations of every image each."""
    normalize = _normalize(card)
    batched, per_image = BatchPolicy(policy, num_ops=1, magnitude=5), policy_transform(policy, 1, 5)
    if row is not None:
        only_sub_policy(batched, per_image, row)
    if pipeline:  # the digits recipe's training pipelines: 4 px crop padding, no flip, the policy, normalisation
        loader = DeviceLoader(images, labels, 256, img_size=32, mean=card.mean, std=card.std, crop_padding=4,
                              policy=batched)  # fmt: skip
        transform = train_transform(32, card.mean, card.std, resize=False, crop_padding=4, hflip=False,
                                    policy=per_image)  # fmt: skip
    losses = {"batched": [], "torchvision": []}
    accs = {"batched": [], "torchvision": []}
    for _ in range(repeats):
        if pipeline:
            pairs = (
                ("batched", torch.cat([batch for batch, _ in loader]), None),
                ("torchvision", torch.stack([transform(image) for image in images]), None),
            )
        else:
            pairs = (
                ("batched", batched(images), normalize),
                ("torchvision", torch.stack([per_image(image) for image in images]), normalize),
            )
        for name, augmented, norm in pairs:
            loss, acc = loss_and_accuracy(net, norm, augmented, labels)
            losses[name].append(loss)
            accs[name].append(acc)
    diffs = [b - t for b, t in zip(losses["batched"], losses["torchvision"], strict=True)]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    return {
        "loss_batched": statistics.mean(losses["batched"]),
        "loss_torchvision": statistics.mean(losses["torchvision"]),
        "acc_batched": statistics.mean(accs["batched"]),
        "acc_torchvision": statistics.mean(accs["torchvision"]),
        "diff": statistics.mean(diffs),
        "se": se,
    }


def main() -> None:
    """Print the comparison per checkpoint (and per sub-policy)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--policy", default="autoaugment", choices=["autoaugment", "randaugment", "trivialaugment"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--per-sub-policy", action="store_true", help="AutoAugment: each of its 25 rows on its own")
    parser.add_argument("--pipeline", action="store_true", help="the whole training pipelines, not the policies alone")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        images, labels = digits(Path(tmp) / "digits")
    print(f"{len(images)} training digits, {args.repeats} augmentations each per implementation; loss = cross-entropy")
    rows = range(25) if args.per_sub_policy else [None]
    for ckpt in args.checkpoints:
        net, card = load_classifier(ckpt)
        plain = loss_and_accuracy(net, _normalize(card), images, labels)
        print(f"\n{ckpt}: without augmentation loss {plain[0]:.4f}, accuracy {plain[1]:.4f}")
        print("| sub-policy | loss batched | loss torchvision | batched - torchvision (SE) | acc batched | acc tv |")
        print("| --- | --- | --- | --- | --- | --- |")
        for row in rows:
            r = compare(net, card, images, labels, args.policy, args.repeats, row, args.pipeline)
            name = "all" if row is None else str(row)
            print(f"| {name} | {r['loss_batched']:.4f} | {r['loss_torchvision']:.4f} | {r['diff']:+.4f} "
                  f"({r['se']:.4f}) | {r['acc_batched']:.4f} | {r['acc_torchvision']:.4f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
