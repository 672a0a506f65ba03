"""scikit-learn's digits: 1,797 real 8x8 images that ship with scikit-learn, small enough to learn on a CPU offline.

`DigitsDataModule` is the first run on a machine without a GPU or network (``configs/digits.yaml``): it writes the
images once as an image folder into a cache and reads them from there in the class-folder format
(`vitlit.data.folder.class_folders`), as `ImageFolderDataModule` reads any folder: an item table like it.
The tests, notebooks and benchmarks write their own copies with `write_digits_folder`. Needs scikit-learn
(``pip install -e ".[dev]"``), imported only where the digits are written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vitlit.data.folder import class_folders, no_test_folder
from vitlit.data.table import ItemTableDataModule, Scan
from vitlit.errors import ConfigError
from vitlit.text import say


def default_digits_root() -> Path:
    """Where `DigitsDataModule` keeps its images: ``$XDG_CACHE_HOME/vitlit/digits`` (``~/.cache/vitlit/digits``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vitlit" / "digits"


class DigitsDataModule(ItemTableDataModule):
    """scikit-learn's digits as 32 px images (1,348 train, of which 10% validation; 449 test), written on first use.

    Args:
        root: ``None``: the folder in the user's cache (`default_digits_root`), where the images are written on
            first use (whole or not at all: a process that starts meanwhile writes its own copy and keeps the
            first). A folder given here is read as it is (any class-folder layout), never written to: a mistyped
            path stops the run instead of filling a new folder with digits.
        **kwargs: The options of every item table (`vitlit.data.table.ItemTableDataModule`: ``bad_images``; then
            ``img_size``, ``batch_size``, ``val_size``, ...).
    """

    #: As `ImageFolderDataModule`'s: the files were found in the folder.
    found_in_root = True

    def __init__(self, root: str | Path | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if root is None:
            root = default_digits_root()
            if not complete_copy(root):  # the first run on this machine only
                write_once(root)
        self.root = Path(root).expanduser()

    def scan(self) -> Scan:
        """The copy's class folders (`vitlit.data.folder.class_folders`)."""
        return class_folders(self.root)

    def no_test_split(self) -> str:
        """Test and predict need ``root/test`` (a folder given as ``root`` may have none)."""
        return no_test_folder(self.root)


#: Images in scikit-learn's digits, and their classes: what a complete copy in the cache holds.
DIGITS_IMAGES, DIGITS_CLASSES = 1797, 10


def complete_copy(root: Path) -> bool:
    """Whether ``root`` holds every digit image in `write_digits_folder`'s layout (file names only: no decoding)."""
    classes = {p.name for p in root.glob("train/*") if p.is_dir()}
    return len(classes) == DIGITS_CLASSES and len(list(root.glob("*/*/*.png"))) == DIGITS_IMAGES


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
