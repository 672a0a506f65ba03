"""scikit-learn's digits: 1,797 real 8x8 images that ship with scikit-learn, small enough to learn on a CPU offline.

`DigitsDataModule` is the first run on a machine without a GPU or network (``configs/digits.yaml``): it writes the
images once as an image folder into a cache and reads them from there in the class-folder format
(`vitlit.data.folder.class_folders`), as `ImageFolderDataModule` reads any folder: an item table like it.
The tests, notebooks and benchmarks write their own copies with `write_digits_folder`
(`vitlit.data.digits_writer`, also importable from here). Needs scikit-learn
(``pip install -e ".[dev]"``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vitlit.data.folder import class_folders, no_test_folder
from vitlit.data.table import ItemTableDataModule, Scan


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
            if not complete_copy(root):
                from vitlit.data.digits_writer import write_once  # the first run on this machine only

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


def __getattr__(name: str) -> Any:
    """`write_digits_folder` lives in `vitlit.data.digits_writer`, loaded where digits are written (PEP 562)."""
    if name == "write_digits_folder":
        from vitlit.data.digits_writer import write_digits_folder

        return write_digits_folder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
