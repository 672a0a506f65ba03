"""Writing scikit-learn's digits as an image folder, loaded where digits are written.

Once per machine for `vitlit.data.digits.DigitsDataModule`'s cache, and for the tests, notebooks and benchmarks' own
copies.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from vitlit.errors import ConfigError
from vitlit.text import say


def write_digits_folder(
    root: str | Path, size: int = 32, test_fraction: float = 0.25, seed: int = 0, val_fraction: float = 0.0
) -> Path:
    """Save the digits, upsampled to ``size`` px RGB, as ``root/{train,val,test}/<digit>/<index>.png``.

    The split is a seeded permutation, so every caller with the same seed sees the same test images.

    Args:
        root: Folder to write into (created if missing).
        size: Side of the saved images in pixels (bilinear upsampling of the 8x8 originals).
        test_fraction: Fraction of the images held out in ``test/``.
        seed: Seed of the split.
        val_fraction: Fraction of the images written to ``val/`` (0: none; the data module then carves its own).

    Returns:
        ``root``, ready for ``ImageFolderDataModule(root)``.
    """
    try:
        from sklearn.datasets import load_digits  # a dev dependency; only needed here
    except ImportError:
        msg = "the digits come with scikit-learn, which is not installed: pip install scikit-learn."
        raise ConfigError(msg) from None

    root = Path(root)
    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.images))
    n_test = int(len(order) * test_fraction)
    n_val = int(len(order) * val_fraction)
    for rank, i in enumerate(order):
        split = "test" if rank < n_test else "val" if rank < n_test + n_val else "train"
        folder = root / split / str(digits.target[i])
        folder.mkdir(parents=True, exist_ok=True)
        pixels = (digits.images[i] * (255 / 16)).astype(np.uint8)  # the originals range over 0..16
        Image.fromarray(pixels).resize((size, size), Image.BILINEAR).convert("RGB").save(folder / f"{i}.png")
    return root


def write_once(folder: Path) -> None:
    """Write the digits into a temporary folder beside ``folder`` and rename it: readers never see half a copy.

    A ``folder`` that exists but is incomplete (left half-written by an older version) is said, moved out of the way
    at once (another process then writes its own copy) and written again.
    """
    from vitlit.data.digits import complete_copy

    if folder.exists() and not complete_copy(folder):  # not another process's copy, just renamed into place
        say(f"vitlit: the digits in {folder} are incomplete; writing them again", error=True)
        stale = Path(tempfile.mkdtemp(prefix=f".{folder.name}.stale.", dir=folder.parent))
        os.rename(folder, stale / folder.name)
        shutil.rmtree(stale, ignore_errors=True)
    if folder.exists():
        return
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError as err:
        raise ConfigError(
            f"the digits cannot be written into {folder} ({err.strerror}); set XDG_CACHE_HOME to a folder you can "
            f"write, or give --data.root a folder written with vitlit.data.digits.write_digits_folder."
        ) from None
    try:
        write_digits_folder(tmp)
        tmp.chmod(0o755)  # mkdtemp's folder is the owner's alone; a cache of public images need not be
        os.rename(tmp, folder)  # fails if another process's copy got there first: then that one is used
    except OSError:
        if not folder.exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
