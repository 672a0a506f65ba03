"""What the start-up check of an image folder costs, against one training epoch over the same folder.

Writes ``--images`` random 32x32 PNG files into 10 class folders (CIFAR's shape and count by default), then times:
listing them (`vitlit.data.images.image_files`), checking each file's header and ending (`image_problem`, what the
item table of ImageFolderDataModule does before training), and one epoch of the training DataLoader over the folder
(decode, crop, flip, normalise; ``--workers`` processes, batch 128). The figure is the check's share of that epoch.

    python benchmarks/image_scan.py                  # 50,000 images; last line: scan fraction=<check / epoch>
    python benchmarks/image_scan.py --images 2000    # quick
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from vitlit.data import ImageFolderDataModule
from vitlit.data.images import image_files, image_problem


def write_folder(root: Path, images: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(images):
        folder = root / "train" / f"class_{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_folder(root, args.images)
        start = time.perf_counter()
        files = [p for class_dir in sorted((root / "train").iterdir()) for p in image_files(class_dir)]
        listed = time.perf_counter() - start
        start = time.perf_counter()
        bad = [f for f in files if image_problem(f) is not None]
        checked = time.perf_counter() - start
        assert not bad and len(files) == args.images
        data = ImageFolderDataModule(
            root, img_size=32, batch_size=128, num_workers=args.workers, val_size=0.1, persistent_workers=False
        )
        data.setup("fit")
        start = time.perf_counter()
        seen = sum(len(images) for images, _ in data.train_dataloader())
        epoch = time.perf_counter() - start
    print(f"images={args.images} listing {listed:.2f} s, check {checked:.2f} s ({args.images / checked:,.0f} files/s)")
    print(f"training epoch ({seen:,} images, {args.workers} workers) {epoch:.2f} s")
    print(f"scan fraction={checked / epoch:.3f}")


if __name__ == "__main__":
    main()
