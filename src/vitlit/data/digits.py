"""scikit-learn's digits: 1,797 real 8x8 images that ship with scikit-learn, small enough to learn on a CPU offline.

`DigitsDataModule` is the first run on a machine without a GPU or network (``configs/digits.yaml``): it writes the
images once as an image folder into a cache and reads them from there as `ImageFolderDataModule` reads any folder.
The tests, notebooks and benchmarks write their own copies with `write_digits_folder`
(`vitlit.data.digits_writer`, also importable from here). Needs scikit-learn
(``pip install -e ".[dev]"``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from vitlit.data.folder import ImageFolderDataModule
from vitlit.text import say


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
                from vitlit.data.digits_writer import write_once  # the first run on this machine only

                write_once(root)
        super().__init__(root=root, **kwargs)


#: Images in scikit-learn's digits, and their classes: what a complete copy in the cache holds.
DIGITS_IMAGES, DIGITS_CLASSES = 1797, 10


def _complete(root: Path) -> bool:
    """Whether ``root`` holds every digit image in `write_digits_folder`'s layout (file names only: no decoding)."""
    classes = {p.name for p in root.glob("train/*") if p.is_dir()}
    return len(classes) == DIGITS_CLASSES and len(list(root.glob("*/*/*.png"))) == DIGITS_IMAGES


def __getattr__(name: str) -> Any:
    """`write_digits_folder` lives in `vitlit.data.digits_writer`, loaded where digits are written (PEP 562)."""
    if name == "write_digits_folder":
        from vitlit.data.digits_writer import write_digits_folder

        return write_digits_folder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
