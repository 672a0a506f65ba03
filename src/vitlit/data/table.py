"""One item table for every format of image files or encoded images: a format lists its rows, the table admits them.

A format (class folders, a labels.csv table, a Hugging Face data set, a fork's own) implements `scan` and nothing
else: each split's rows as ``(file, label name)`` pairs, the file relative to the data's ``root`` (a format whose
images are embedded bytes gives a dataset of them instead). `ItemTableDataModule` calls it once, the first time the
items are needed (the class names the CLI links to the model, or ``setup``), so a subclass sets its attributes
anywhere in its ``__init__``. Then, in one place, for every format: the split names (``train``, ``val``, ``test``),
each file inside ``root`` (links resolved), the labels of validation and test known to training, an error in the
format's own code said in one line naming its file and line, the test split held out where the data has none, the
validation size, and each image's start-up check with ``bad_images`` (stop at the first, naming it, or leave them out
and list them in ``skipped``).
"""

from __future__ import annotations

import os
from abc import abstractmethod
from pathlib import Path
from typing import Any, Literal, NamedTuple

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.images import PIL_MODES, ImageFiles
from vitlit.data.split import validation_count
from vitlit.errors import ConfigError
from vitlit.text import shown

#: The splits a format may name: validation and test are only ever used as such.
SPLITS = ("train", "val", "test")
#: A row of a format: its image file (relative to the data's ``root``, or absolute inside it) and its label's name.
Row = tuple[str | os.PathLike, str]


class Scan(NamedTuple):
    """What a format found, where a plain ``{split: rows}`` says too little.

    Args:
        splits: Each split's rows (``(file, label name)`` pairs), or a dataset of its items where the images are
            embedded bytes (`vitlit.data.hf.HFImages`: ``samples``, ``problem(i)``, ``keep(indices)``).
        classes: The class names in index order; ``None``: the training rows' labels, sorted.
        hold_out_test: How to name the data where the table holds a test split out of training; ``None``: ``test``
            needs a split of the data's own (`ItemTableDataModule.no_test_split`).
    """

    splits: dict[str, Any]
    classes: list[str] | None = None
    hold_out_test: str | None = None


class ItemTableDataModule(ImageClassificationDataModule):
    """Base of the data modules whose images are files or encoded bytes that a format lists in `scan`.

    A subclass sets ``self.root`` (the folder its files must lie in) and implements `scan`; the table does the rest.

    Args:
        bad_images: What to do with images that cannot be read (missing, empty, truncated, not an image, a dangling
            link, over the size bound): ``error`` stops before training and names the first one; ``skip`` trains
            without them and lists them in ``skipped`` (the runs part writes them into the run's
            ``skipped_images.txt`` and logs their count as ``data/skipped_images``).
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule`.
    """

    #: The folder every file a row names must lie in (links resolved); a subclass sets it. ``None``: no files.
    root: Path | None = None
    #: Whether the rows' files were found by walking ``root`` (class folders), whose links the user put there: a
    #: folder of links to images elsewhere is a common subset. A table's rows only name files: theirs must resolve
    #: inside ``root``, so that a row (or a link beside it) never reads a file from elsewhere.
    found_in_root: bool = False

    def __init__(self, bad_images: Literal["error", "skip"] = "error", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if bad_images not in ("error", "skip"):
            raise ConfigError(f"bad_images={bad_images!r} is not one of 'error', 'skip'.")
        if self.in_chans not in PIL_MODES:
            raise ConfigError(
                f"in_chans={self.in_chans}: image files hold 1 (grey), 3 (RGB) or 4 (RGBA) channels; for other data "
                f'write a data module (docs/your-data.md: "Fork it for your data").'
            )
        self.bad_images, self.skipped = bad_images, []
        self._table: tuple[dict[str, Any], list[str]] | None = None  # the admitted items and classes (`_scanned`)
        self._checked: dict[str, Any] = {}  # the splits `_split` checked

    @abstractmethod
    def scan(self) -> dict[str, list[Row]] | Scan:
        """List the data's rows per split: ``{"train": [(file, label name), ...], "val": [...], "test": [...]}``.

        ``train`` is needed, ``val`` and ``test`` where the data has them (without ``val``, validation is carved from
        training; without ``test``, a test split is held out of it). Files are relative to ``self.root``. Return a
        `Scan` to give the class order, or embedded images. Raise `ConfigError` for a layout that cannot work.
        """

    def _scanned(self) -> tuple[dict[str, Any], list[str]]:
        """The format's rows admitted as items, and the classes, read once (`scan`), before any work starts."""
        if self._table is None:
            found = self._call_scan()
            scan = found if isinstance(found, Scan) else Scan(found, None, type(self).__name__)
            self._table = self._admit(scan)
        return self._table

    def _call_scan(self) -> dict[str, list[Row]] | Scan:
        """`scan`, with an error in the format's own code said in one line naming where it was raised."""
        try:
            return self.scan()
        except ConfigError:
            raise
        except Exception as err:  # a bug in a format: not the user's config, and not a jsonargparse Union dump either
            from vitlit.exits import failed_in

            raise failed_in(err, type(self).scan) from None

    def _admit(self, scan: Scan) -> tuple[dict[str, Any], list[str]]:
        """Each split's rows as items, after the rules every format shares: split names, files, labels, sizes."""
        name = type(self).__name__
        unknown = next((split for split in scan.splits if split not in SPLITS), None)
        if unknown is not None:
            raise ConfigError(f"{name} has the split {shown(unknown)!r}; splits are {', '.join(SPLITS)} (a data set's "
                              f"validation split is val): rename it in the data.")  # fmt: skip
        if not scan.splits.get("train"):
            raise ConfigError(f"{name} found no training images; give data with a train split.")
        rows = {split: found for split, found in scan.splits.items() if found and isinstance(found, list)}
        known = sorted({str(label) for _, label in rows.get("train", [])})
        classes = list(scan.classes) if scan.classes is not None else known
        if len(classes) < 2:
            raise ConfigError(
                f"{name} has {len(classes)} class(es) in its training rows; a classifier needs 2 or more."
            )
        for split, found in rows.items():
            strange = sorted({str(label) for _, label in found} - set(known if split != "train" else classes))
            if strange:
                raise ConfigError(f"{name}: {split} rows have labels no training row has: "
                                  f"{', '.join(shown(s) for s in strange[:5])}; correct them or add training rows of "
                                  f"those classes.")  # fmt: skip
        index = {label: i for i, label in enumerate(classes)}
        items = {split: found for split, found in scan.splits.items() if found is not None and split not in rows}
        for split, found in rows.items():
            pairs = [(str(self._inside(file, split)), index[str(label)]) for file, label in found]
            items[split] = ImageFiles(pairs, classes, PIL_MODES[self.in_chans], self.img_size, f"the {split} split")
        if "test" not in items and scan.hold_out_test is not None:
            keep, held = self.hold_out_test(len(items["train"]), scan.hold_out_test)
            items["test"], items["train"] = items["train"].keep(held), items["train"].keep(keep)
        if "val" not in items:
            validation_count(len(items["train"]), self.val_size)  # fail now, not after the run folder exists
        return items, classes

    def _inside(self, file: str | os.PathLike, split: str) -> Path:
        """A row's file as a path inside ``root`` (links resolved, unless `found_in_root`); else refused, named.

        A file inside that does not exist is kept: the start-up check names it as missing (``bad_images``).
        """
        if self.root is None:
            raise ConfigError(f"{type(self).__name__} lists files but sets no root; its __init__ sets self.root to the "
                              f"folder they lie in.")  # fmt: skip
        root = Path(self.root).expanduser().absolute()
        path = Path(os.path.normpath(root / os.fspath(file)))
        try:
            inside = path.is_relative_to(root) and "\x00" not in str(file)
            inside = inside and (self.found_in_root or path.resolve().is_relative_to(root.resolve()))
        except (OSError, RuntimeError, ValueError):  # a link loop: no file of the data
            inside = False
        if not inside:
            raise ConfigError(f"{type(self).__name__}: the {split} row '{shown(os.fspath(file))}' is not a file "
                              f"inside {root}; rows may only name the data's own files.")  # fmt: skip
        return path

    def no_test_split(self) -> str:
        """The refusal of ``test`` and ``predict`` where the data has no test split (and none is held out)."""
        return f"{type(self).__name__} has no test split; test and predict need one."

    @property
    def class_names(self) -> list[str]:
        """The classes the format found, in index order."""
        return list(self._scanned()[1])

    def _split(self, name: str) -> Any:
        """A split's items after the start-up check of each image (bad ones stop the run, or are left out)."""
        items_by_split = self._scanned()[0]
        if name in items_by_split and name not in self._checked:
            items = items_by_split[name]
            bad = {i: problem for i in range(len(items)) if (problem := items.problem(i)) is not None}
            if bad:  # refused, or left out and listed
                from vitlit.data.bad_images import left_out

                items, left = left_out(items, bad, self.bad_images)
                self.skipped += left
            self._checked[name] = items
            if name != "train":  # a validation or test split of the data's own
                from vitlit.data.copies import copies_of_training

                copies_of_training(self._checked[name], self._split("train"), name)
        return self._checked.get(name)

    def train_dataset(self) -> Any:
        """The training items."""
        return self._split("train")

    def val_dataset(self) -> Any:
        """The validation items, or ``None``: validation is then carved from training (``val_size``)."""
        return self._split("val")

    @property
    def has_test_split(self) -> bool:
        """Whether the data has a test split (its own, or one held out)."""
        return "test" in self._scanned()[0]

    def test_dataset(self) -> Any:
        """The test items: the data's own, or those held out of training."""
        if not self.has_test_split:
            raise ConfigError(self.no_test_split())
        return self._split("test")
