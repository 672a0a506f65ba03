"""Any image data set laid out in class folders: ``root/{train,val,test}/<class>/<image>``, or ``root/<class>/<image>``.

This is the module to fork vitlit for new data: ``--data ImageFolderDataModule --data.root <dir>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from lightning.pytorch.utilities import rank_zero_info

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.images import (
    IMAGE_SUFFIXES,
    PIL_MODES,
    BadImage,
    ImageFiles,
    check_images,
    image_files,
    without_bad,
)
from vitlit.data.split import validation_count
from vitlit.errors import ConfigError

SPLITS = ("train", "val", "test")


def _class_dirs(split_dir: Path) -> list[Path]:
    return sorted(p for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


class ImageFolderDataModule(ImageClassificationDataModule):
    """Images in class folders: ``root/train/<class>/*.png|jpg`` plus optional ``root/val`` and ``root/test``.

    Class names and their order come from the folder names under ``root/train`` (sorted). Without ``root/val`` a
    seeded validation split is carved from ``train`` (``val_size``); ``root/test`` is needed only by ``test`` and
    ``predict``. Images of any size and mode are converted to ``in_chans`` channels (1: grey, 3: RGB, 4: RGBA),
    resized (shorter side) and centre-cropped to ``img_size``; 16-bit images are scaled to 8 bits. Symbolic links
    to folders are followed once (a loop is refused); hidden files are left out. Before training, every image of a
    split is checked (header and file ending, not a full decode).

    Args:
        root: Folder holding ``train/`` and optionally ``val/`` and ``test/``; or only class folders
            (``root/<class>/<images>``, the layout of Hugging Face's ``imagefolder``), of which ``test_size`` is
            held out for ``test`` and ``val_size`` carved for validation, both seeded (``seed``).
        val_size: Validation images carved from ``train`` when there is no ``val/``: a count (int) or a fraction
            (float in (0, 1)); a fraction suits data sets of any size.
        bad_images: What to do with files that cannot be read as images (empty, truncated, not an image, a
            dangling link, over PIL's size limit): ``error`` stops before training and names the first one;
            ``skip`` trains without them and lists them in ``skipped`` (the runs part writes them into the run's
            ``skipped_images.txt`` and logs their count as ``data/skipped_images``).
        test_size: With class folders only: test images held out, a count (int) or a fraction (float in (0, 1)).
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule` (``img_size``,
            ``batch_size``, ``val_size``, ``mean``, ``std``, ...). ``mean``/``std`` default to ImageNet's.
    """

    def __init__(
        self,
        root: str | Path,
        val_size: int | float = 0.1,
        bad_images: Literal["error", "skip"] = "error",
        test_size: int | float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(val_size=val_size, test_size=test_size, **kwargs)
        if bad_images not in ("error", "skip"):
            raise ConfigError(f"bad_images={bad_images!r} is not one of 'error', 'skip'.")
        if self.in_chans not in PIL_MODES:
            raise ConfigError(
                f"in_chans={self.in_chans}: image files hold 1 (grey), 3 (RGB) or 4 (RGBA) channels; for other data "
                f'write a data module (docs/your-data.md: "Fork it for your data").'
            )
        self.root = Path(root).expanduser()
        self.bad_images = bad_images
        self.skipped: list[BadImage] = []
        self._files: dict[str, list[tuple[Path, int]]] = {}
        self._classes = self._scan()

    def _scan(self) -> list[str]:
        """Check the layout and list the image files before any work starts; return the class names."""
        train_dir = self.root / "train"
        if not train_dir.is_dir():
            flat = _class_dirs(self.root) if self.root.is_dir() else []
            if len(flat) >= 2 and not any((self.root / split).exists() for split in SPLITS):
                from vitlit.data.flat import scan_flat  # this layout's runs only

                self._files, classes = scan_flat(self, flat)
                return classes
            one = f"; it holds one class folder ({flat[0].name}), and a classifier needs 2" if len(flat) == 1 else ""
            raise ConfigError(
                f"{train_dir} does not exist; --data.root must hold train/<class>/<images> "
                f"(and optionally val/ and test/), or class folders <class>/<images> only{one}."
            )
        classes = [c.name for c in _class_dirs(train_dir)]
        if len(classes) < 2:
            raise ConfigError(f"{train_dir} has {len(classes)} class folder(s); a classifier needs at least 2.")
        for split in SPLITS:
            split_dir = self.root / split
            if not split_dir.is_dir():
                continue
            files = []
            for class_dir in _class_dirs(split_dir):
                if class_dir.name not in classes:
                    raise ConfigError(
                        f"{class_dir} is a class that {train_dir} does not have; add it to train/ or remove it."
                    )
                found = list(image_files(class_dir))
                if not found:
                    raise ConfigError(
                        f"{class_dir} holds no image ({', '.join(IMAGE_SUFFIXES)}); add images or remove the folder."
                    )
                files += [(path, classes.index(class_dir.name)) for path in found]
            if not files:
                raise ConfigError(
                    f"{split_dir} holds no class folder with images; add <class>/<images> to it or remove it"
                    + (" (validation is then carved from train/)." if split == "val" else ".")
                )
            self._files[split] = files
        if "val" not in self._files:
            validation_count(len(self._files["train"]), self.val_size)  # fail now, not after the run folder exists
        return classes

    @property
    def class_names(self) -> list[str]:
        """The class folders under ``root/train``, sorted."""
        return list(self._classes)

    def _split(self, name: str) -> ImageFiles | None:
        """The split's images after the start-up check (bad files stop the run, or are left out with ``skip``)."""
        if name not in self._files:
            return None
        files = self._files[name]
        bad = check_images([path for path, _ in files], self.img_size)
        if bad and self.bad_images == "error":
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise ConfigError(
                f"image {bad[0].path} is {bad[0].problem}{more}; remove or replace it, or pass --data.bad_images skip "
                f"to train without such files."
            )
        if bad:
            self._report_skipped(name, bad)
        return ImageFiles(without_bad(files, bad), self.class_names, PIL_MODES[self.in_chans], self.img_size)

    def _report_skipped(self, split: str, bad: list[BadImage]) -> None:
        # The runs part lists them in the run's skipped_images.txt (`vitlit.runs.logs.SkippedImages`).
        self.skipped += bad
        # A log line, not a Python warning: a warning would print vitlit's own source line under it.
        rank_zero_info(f"vitlit: skipping {len(bad)} unreadable image(s) of {split}/ (--data.bad_images skip)")

    def train_dataset(self) -> ImageFiles:
        """The images of ``root/train``."""
        return self._split("train")

    def val_dataset(self) -> ImageFiles | None:
        """The images of ``root/val``, or ``None`` (validation is then carved from ``train``)."""
        return self._split("val")

    @property
    def has_test_split(self) -> bool:
        """Whether ``root/test`` exists."""
        return "test" in self._files

    def test_dataset(self) -> ImageFiles:
        """The images of ``root/test``."""
        test = self._split("test")
        if test is None:
            raise ConfigError(f"{self.root / 'test'} does not exist; test and predict need root/test/<class>/<images>.")
        return test
