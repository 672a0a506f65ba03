"""scikit-learn's digits as an image folder: 1,797 real 8x8 images, small enough to learn on a CPU offline.

Used by the tests, the quick-start notebook and ``benchmarks/digits.py`` as a stand-in for CIFAR where it cannot be
downloaded. Needs scikit-learn (``pip install -e ".[dev]"``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def write_digits_folder(root: str | Path, size: int = 32, test_fraction: float = 0.25, seed: int = 0) -> Path:
    """Save the digits, upsampled to ``size`` px RGB, as ``root/{train,test}/<digit>/<index>.png``.

    The train/test split is a seeded permutation, so every caller with the same seed sees the same test images.

    Args:
        root: Folder to write into (created if missing).
        size: Side of the saved images in pixels (bilinear upsampling of the 8x8 originals).
        test_fraction: Fraction of the images held out in ``test/``.
        seed: Seed of the split.

    Returns:
        ``root``, ready for ``ImageFolderDataModule(root)``.
    """
    from sklearn.datasets import load_digits  # a dev dependency; only needed here

    root = Path(root)
    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.images))
    n_test = int(len(order) * test_fraction)
    for rank, i in enumerate(order):
        folder = root / ("test" if rank < n_test else "train") / str(digits.target[i])
        folder.mkdir(parents=True, exist_ok=True)
        pixels = (digits.images[i] * (255 / 16)).astype(np.uint8)  # the originals range over 0..16
        Image.fromarray(pixels).resize((size, size), Image.BILINEAR).convert("RGB").save(folder / f"{i}.png")
    return root
