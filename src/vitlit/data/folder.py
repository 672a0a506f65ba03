"""Any image data set laid out in class folders: ``root/{train,val,test}/<class>/<image>``, or ``root/<class>/<image>``.

This is the module to fork vitlit for new data: ``--data ImageFolderDataModule --data.root <dir>``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vitlit.data.images import IMAGE_SUFFIXES, image_files
from vitlit.data.table import SPLITS, ItemTableDataModule, Scan
from vitlit.errors import ConfigError

#: The other spellings of the split folders that downloads use (case aside), by the split they mean.
_SPELLINGS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val", "dev": "val",
              "test": "test", "testing": "test"}  # fmt: skip


def _class_dirs(split_dir: Path) -> list[Path]:
    return sorted(p for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def _refuse_misspelt(folder: Path) -> None:
    """Refuse a folder of the root named as a split in another spelling (``Train/``, ``validation/``, ``dev/``).

    It would be a class of the flat layout, or left out beside ``train/``. A case-insensitive file system's ``Train/``
    is ``train/`` itself, and passes.
    """
    split = _SPELLINGS.get(folder.name.casefold())
    canonical = folder.parent / split if split else folder
    if split and folder.name != split and not (canonical.is_dir() and os.path.samefile(folder, canonical)):
        raise ConfigError(f"{folder} is named as the {split} split in another spelling, which vitlit does not "
                          f"read as a split; rename it to {split}/ (the split folders are train/, val/ and "
                          f"test/).")  # fmt: skip


class ImageFolderDataModule(ItemTableDataModule):
    """Images in class folders: ``root/train/<class>/*.png|jpg`` plus optional ``root/val`` and ``root/test``.

    Class names come from the folder names under ``root/train``, sorted (as numbers where every name is an integer:
    ``1``, ``2``, ..., ``10``, said in one line). Without ``root/val`` a seeded validation split is carved from
    ``train`` (``val_size``); ``root/test`` is needed only by ``test`` and ``predict``. Images of any size and mode are
    converted to ``in_chans`` channels (1: grey, 3: RGB, 4: RGBA), resized (shorter side) and centre-cropped to
    ``img_size``; 16-bit images are scaled to 8 bits. Symbolic links to folders are followed once (a loop is refused);
    hidden files are left out. Before training, every image of a split is checked (header and file ending, not a full
    decode).

    Args:
        root: Folder holding ``train/`` and optionally ``val/`` and ``test/``; or only class folders
            (``root/<class>/<images>``, the layout of Hugging Face's ``imagefolder``), of which ``test_size`` is
            held out for ``test`` and ``val_size`` carved for validation, both seeded (``seed``).
        **kwargs: The options of every item table (`vitlit.data.table.ItemTableDataModule`: ``bad_images``) and
            the common ones (`vitlit.data.ImageClassificationDataModule`: ``img_size``, ``batch_size``,
            ``val_size``, ...): ``val_size`` carves validation from ``train/`` where there is no ``val/``,
            ``test_size`` holds test images out of class folders only. ``mean``/``std`` default to ImageNet's.
    """

    #: The files were found in the folder: a class folder of links to images elsewhere is taken as it is.
    found_in_root = True

    def __init__(self, root: str | Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = Path(root).expanduser()

    def scan(self) -> Scan:
        """Check the layout and list the image files of each split's class folders (`class_folders`)."""
        return class_folders(self.root)

    def no_test_split(self) -> str:
        """Test and predict need ``root/test``."""
        return no_test_folder(self.root)


def class_folders(root: Path) -> Scan:
    """Check the layout of ``root`` and list the image files of each split's class folders.

    The class-folder format: `ImageFolderDataModule`'s, and `vitlit.data.digits.DigitsDataModule`'s on its copy.
    """
    train_dir, seen = root / "train", {}  # seen: each folder scanned, so that a link to it is refused
    flat = _class_dirs(root) if root.is_dir() else []  # class folders, or the split folders and their siblings
    # Beside train/, or where every folder is named as a split (Train/, Test/): a flat layout's class may be "Test".
    if train_dir.is_dir() or all(_SPELLINGS.get(folder.name.casefold()) for folder in flat):
        for folder in flat:
            _refuse_misspelt(folder)
    if not train_dir.is_dir():
        splits_there = [f"{split}/" for split in SPLITS if (root / split).exists()]
        if len(flat) >= 2 and not splits_there:
            return scan_flat(root, flat, seen)
        one = f"; it holds one class folder ({flat[0].name}), and a classifier needs 2" if len(flat) == 1 else ""
        # A val/ or test/ beside class folders makes the layout a split one, whose train/ is missing.
        why = f"; it has {' and '.join(splits_there)} but no train/" if splits_there and len(flat) >= 2 else one
        raise ConfigError(
            f"{train_dir} does not exist; --data.root must hold train/<class>/<images> "
            f"(and optionally val/ and test/), or class folders <class>/<images> only{why}."
        )
    classes, splits = [c.name for c in _class_dirs(train_dir)], {}
    if len(classes) < 2:
        raise ConfigError(f"{train_dir} has {len(classes)} class folder(s); a classifier needs at least 2.")
    for split in SPLITS:
        split_dir = root / split
        if not split_dir.is_dir():
            continue
        rows = []
        for class_dir in _class_dirs(split_dir):
            if class_dir.name not in classes:
                raise ConfigError(
                    f"{class_dir} is a class that {train_dir} does not have; add it to train/ or remove it."
                )
            found = list(image_files(class_dir, seen))
            if not found:
                raise ConfigError(
                    f"{class_dir} holds no image ({', '.join(IMAGE_SUFFIXES)}); add images or remove the folder."
                )
            rows += [(path, class_dir.name) for path in found]
        if not rows:
            raise ConfigError(
                f"{split_dir} holds no class folder with images; add <class>/<images> to it or remove it"
                + (" (validation is then carved from train/)." if split == "val" else ".")
            )
        splits[split] = rows
    return Scan(splits, hold_out_test=None)  # the classes: the folders' names, by the table's order


def no_test_folder(root: Path) -> str:
    """The refusal of ``test`` and ``predict`` for class folders without ``root/test``."""
    return f"{root / 'test'} does not exist; test and predict need root/test/<class>/<images>."


def scan_flat(root: Path, class_dirs: list[Path], seen: dict[str, Path] | None = None) -> Scan:
    """List the images of ``class_dirs`` as one training split, of which the table holds out the test split.

    Args:
        root: The data's folder (``--data.root``).
        class_dirs: The class folders under it, sorted.
        seen: The folders scanned so far (`image_files`), shared by the class folders.
    """
    rows, seen = [], {} if seen is None else seen
    for class_dir in class_dirs:
        found = list(image_files(class_dir, seen))
        if not found:
            raise ConfigError(f"{class_dir} holds no image ({', '.join(IMAGE_SUFFIXES)}); add images or remove it.")
        rows += [(path, class_dir.name) for path in found]
    return Scan({"train": rows}, hold_out_test=f"{root} (class folders, {len(class_dirs)} classes)")
