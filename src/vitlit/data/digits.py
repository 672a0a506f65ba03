"""scikit-learn's digits: 1,797 real 8x8 images that ship with scikit-learn, small enough to learn on a CPU offline.

`DigitsDataModule` is the first run on a machine without a GPU or network (``configs/digits.yaml``): it writes the
images once as an image folder into a cache and reads them from there as `ImageFolderDataModule` reads any folder.
The tests, notebooks and benchmarks write their own copies with `write_digits_folder`. Needs scikit-learn
(``pip install -e ".[dev]"``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vitlit.data.folder import ImageFolderDataModule
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


def default_digits_root() -> Path:
    """Where `DigitsDataModule` keeps its images: ``$XDG_CACHE_HOME/vitlit/digits`` (``~/.cache/vitlit/digits``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vitlit" / "digits"


class DigitsDataModule(ImageFolderDataModule):
    """scikit-learn's digits as 32 px images (1,348 train, of which 10% validation; 449 test), written on first use.

    Args:
        root: ``None``: the folder in the user's cache (`default_digits_root`), where the images are written on
            first use (whole or not at all: a process that starts meanwhile writes its own copy and keeps the
            first). A folder given here is read as it is (any class-folder layout), never written to: a mistyped
            path stops the run instead of filling a new folder with digits.
        **kwargs: The options of `vitlit.data.ImageFolderDataModule` (``img_size``, ``batch_size``, ...).
    """

    def __init__(self, root: str | Path | None = None, **kwargs: Any) -> None:
        if root is None:
            root = default_digits_root()
            if root.exists() and not _complete(root):  # e.g. left half-written by an older version: train 2 classes?
                say(f"vitlit: the digits in {root} are incomplete; writing them again", error=True)
                stale = Path(tempfile.mkdtemp(prefix=f".{root.name}.stale.", dir=root.parent))
                os.rename(root, stale / root.name)  # out of the way at once: another process writes its own copy
                shutil.rmtree(stale, ignore_errors=True)
            if not root.exists():
                _write_once(root)
        super().__init__(root=root, **kwargs)


#: Images in scikit-learn's digits, and their classes: what a complete copy in the cache holds.
DIGITS_IMAGES, DIGITS_CLASSES = 1797, 10


def _complete(root: Path) -> bool:
    """Whether ``root`` holds every digit image in `write_digits_folder`'s layout (file names only: no decoding)."""
    classes = {p.name for p in root.glob("train/*") if p.is_dir()}
    return len(classes) == DIGITS_CLASSES and len(list(root.glob("*/*/*.png"))) == DIGITS_IMAGES


def _write_once(folder: Path) -> None:
    """Write the digits into a temporary folder beside ``folder`` and rename it: readers never see half a copy."""
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
