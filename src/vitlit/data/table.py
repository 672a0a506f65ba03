"""One item table for every format of image files or encoded images: a format lists its items, the table does the rest.

A format (class folders, a labels.csv table, a Hugging Face data set, a fork's own) says only what it has: its class
names, and for each split it has a dataset of its items (`vitlit.data.images.ImageFiles` for files, or one shaped
like it: ``samples`` of (name, class index), ``problem(i)``, ``keep(indices)``). `ItemTableDataModule` then does,
once for every format, what each used to repeat: the channel count files can hold, the
test split held out where the data has none, the validation size checked before anything runs, and each image's
start-up check with ``bad_images`` (stop at the first, naming it, or leave them out and list them in ``skipped``).
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any, Literal, NamedTuple

from lightning.pytorch.utilities import rank_zero_info

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.images import PIL_MODES, BadImage
from vitlit.data.split import validation_count
from vitlit.errors import ConfigError


class Scan(NamedTuple):
    """What a format found: its splits' items by name (``train``, ``val``, ``test``) and its class names.

    ``hold_out_test`` names the data where the table holds a test split out of training (``None``: ``test`` needs a
    split of the data's own).
    """

    splits: dict[str, Any]
    classes: list[str]
    hold_out_test: str | None = None


class ItemTableDataModule(ImageClassificationDataModule):
    """Base of the data modules whose images are files or encoded bytes, listed by the format in `scan`.

    Args:
        bad_images: What to do with images that cannot be read (empty, truncated, not an image, a dangling link,
            over the size bound): ``error`` stops before training and names the first one; ``skip`` trains without
            them and lists them in ``skipped`` (the runs part writes them into the run's ``skipped_images.txt`` and
            logs their count as ``data/skipped_images``).
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule`.
    """

    def __init__(self, bad_images: Literal["error", "skip"] = "error", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if bad_images not in ("error", "skip"):
            raise ConfigError(f"bad_images={bad_images!r} is not one of 'error', 'skip'.")
        if self.in_chans not in PIL_MODES:
            raise ConfigError(
                f"in_chans={self.in_chans}: image files hold 1 (grey), 3 (RGB) or 4 (RGBA) channels; for other data "
                f'write a data module (docs/your-data.md: "Fork it for your data").'
            )
        self.bad_images, self.skipped, self._checked = bad_images, [], {}  # _checked: the splits `_split` checked
        self._items, self._classes, carve = self.scan()  # each split's labels are checked in `setup`
        if "test" not in self._items and carve is not None:
            keep, held = self.hold_out_test(len(self._items["train"]), carve)
            self._items["test"], self._items["train"] = self._items["train"].keep(held), self._items["train"].keep(keep)
        if "val" not in self._items:
            validation_count(len(self._items["train"]), self.val_size)  # fail now, not after the run folder exists

    @abstractmethod
    def scan(self) -> Scan:
        """Find the data's splits and classes before any work starts; a layout that cannot work is a `ConfigError`."""

    def no_test_split(self) -> str:
        """The refusal of ``test`` and ``predict`` where the data has no test split (and none is held out)."""
        return f"{type(self).__name__} has no test split; test and predict need one."

    @property
    def class_names(self) -> list[str]:
        """The classes the format found, in index order."""
        return list(self._classes)

    def _split(self, name: str) -> Any:
        """A split's items after the start-up check of each image (bad ones stop the run, or are left out)."""
        if name in self._items and name not in self._checked:
            items = self._items[name]
            bad = {i: problem for i in range(len(items)) if (problem := items.problem(i)) is not None}
            if bad and self.bad_images == "error":
                (i, problem), more = next(iter(bad.items())), f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
                raise ConfigError(f"{items.ITEM.format(items.samples[i][0])} is {problem}{more}; remove or replace "
                                  f"it, or pass --data.bad_images skip to train without such images.")  # fmt: skip
            if bad:  # the runs part lists them in the run's skipped_images.txt (`vitlit.runs.logs.SkippedImages`)
                self.skipped += [BadImage(Path(items.samples[i][0]), problem) for i, problem in bad.items()]
                # A log line, not a Python warning: a warning would print vitlit's own source line under it.
                rank_zero_info(f"vitlit: skipping {len(bad)} unreadable image(s) of {items.where} "
                               f"(--data.bad_images skip)")  # fmt: skip
            self._checked[name] = items.keep([i for i in range(len(items)) if i not in bad]) if bad else items
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
        return "test" in self._items

    def test_dataset(self) -> Any:
        """The test items: the data's own, or those held out of training."""
        if "test" not in self._items:
            raise ConfigError(self.no_test_split())
        return self._split("test")
