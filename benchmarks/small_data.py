"""A few hundred images, from scratch: the recipes' test accuracy over seeds on small data sets made here.

Data sets: digits subsets (scikit-learn's 8x8 digits as vitlit writes them, ``--sizes`` training images drawn
per class evenly, seed 0; the full test split of 449 images) and the first-hour shapes set (`tests/helpers/shapes.py`,
450 images of 3 classes; 45 held out for test). Each run is a fresh process (benchmarks/learning_margins.py), one
torch thread; the figure is the test accuracy of the run's best checkpoint (by val/acc).

    python benchmarks/small_data.py --recipes digits own_images_scratch   # digits 300 and 500, shapes; seeds 0-4
    python benchmarks/small_data.py --recipes cnn own_images_scratch+turns --data shapes   # against a plain CNN
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from helpers.shapes import write_shapes  # noqa: E402
from learning_margins import run_once  # noqa: E402
from torch import nn  # noqa: E402

from vitlit.model import ViTClassifier  # noqa: E402

SCRATCH = ROOT / "configs" / "own_images_scratch.yaml"
TURNS = ["--data.batch_augment", "vitlit.regularize.batch_augment.BatchAugment", "--data.batch_augment.turns", "true"]
#: recipe -> (config, flags for these data sets). Digits are not mirror-symmetric: no flips or turns for them.
RECIPES = {
    "digits": (ROOT / "configs" / "digits.yaml", ["--data", "ImageFolderDataModule"]),
    "own_images_scratch": (SCRATCH, []),
    # The baseline a ViT-family recipe should not lose to: a plain 3-layer CNN, 60 epochs, flips and 90-degree turns
    # (the recipe's optimizer, schedule and loss), without the recipe's RandomResizedCrop, and with it.
    "cnn": (SCRATCH, ["--model", "small_data.PlainCNN", "--trainer.max_epochs", "60", *TURNS, "--data.crop", "none"]),
    "cnn+resized_crop": (SCRATCH, ["--model", "small_data.PlainCNN", "--trainer.max_epochs", "60", *TURNS]),
    "own_images_scratch+turns": (SCRATCH, TURNS),
    "own_images_scratch+turns-crop": (SCRATCH, [*TURNS, "--data.crop", "none"]),
    "own_images_scratch+turns+grey": (SCRATCH, [*TURNS, "--data.in_chans", "1"]),
}


class PlainCNN(ViTClassifier):
    """A plain CNN in vitlit's training loop: three conv-BN-ReLU-max-pool stages (32, 64, 128 channels), a global
    average pool and a linear head; everything else (loss, optimizer, schedule, data) is the recipe's."""

    def _create_net(self) -> nn.Module:
        stages, channels = [], self.hparams.in_chans
        for width in (32, 64, 128):
            stages += [nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2)]
            channels = width
        head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, self.hparams.num_classes)]
        return nn.Sequential(*stages, *head)


def digits_subset(digits: Path, out: Path, size: int) -> Path:
    """``out`` with ``size`` of ``digits``' training images (evenly over the classes) and all its test images."""
    classes = sorted(p.name for p in (digits / "train").iterdir())
    rng = random.Random(0)
    for i, name in enumerate(classes):
        files = sorted((digits / "train" / name).iterdir())
        take = size // len(classes) + (i < size % len(classes))
        (out / "train" / name).mkdir(parents=True)
        for f in rng.sample(files, take):
            shutil.copy(f, out / "train" / name / f.name)
    shutil.copytree(digits / "test", out / "test")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", nargs="+", default=["digits", "own_images_scratch"], choices=list(RECIPES))
    parser.add_argument("--data", nargs="+", default=["digits300", "digits500", "shapes"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    from vitlit.data.digits import write_digits_folder

    # The runs import `PlainCNN` from this file.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])

    with tempfile.TemporaryDirectory(prefix="vitlit-small-") as tmp:
        work = Path(tmp)
        digits = write_digits_folder(work / "digits")
        for data in args.data:
            folder = (write_shapes(work / data) if data == "shapes"
                      else digits_subset(digits, work / data, int(data.removeprefix("digits"))))  # fmt: skip
            for recipe in args.recipes:
                config, flags = RECIPES[recipe]
                flags = [*flags, *(["--data.hflip", "false"] if data.startswith("digits") else [])]
                if data.startswith("digits") and "turns" in " ".join(flags):
                    continue  # a turned 6 is a 9
                values, seconds = [], []
                for seed in args.seeds:
                    result = run_once(flags, "test_acc", seed, 1, "avx2", work / f"{data}-{recipe}", folder, config)
                    values.append(result["test_acc"])
                    seconds.append(result["seconds"])
                    print(f"{data} {recipe} seed={seed} test_acc={result['test_acc']:.4f} best_val_acc="
                          f"{result['best_val_acc']:.3f} seconds={result['seconds']:.0f}", flush=True)  # fmt: skip
                print(f"== {data} {recipe}: test_acc min={min(values):.3f} mean={statistics.mean(values):.3f} "
                      f"max={max(values):.3f} over seeds {args.seeds}; {statistics.mean(seconds):.0f} s a run",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
