"""Any image data set laid out in class folders: ``root/{train,val,test}/<class>/<image>``.

This is the module to fork vitlit for new data: ``--data ImageFolderDataModule --data.root <dir>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

from vitlit.data.base import ImageClassificationDataModule, validation_count
from vitlit.errors import ConfigError


class _FixedClassesImageFolder(ImageFolder):
    """An ImageFolder whose class indices come from the training folder.

    A validation or test folder lacking a class would otherwise renumber every class after it.
    """

    def __init__(self, root: Path, class_to_idx: dict[str, int]) -> None:
        self._fixed_class_to_idx = class_to_idx
        super().__init__(str(root), allow_empty=True)

    def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
        return list(self._fixed_class_to_idx), dict(self._fixed_class_to_idx)


def _class_dirs(split_dir: Path) -> list[Path]:
    return sorted(p for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def _count_images(class_dir: Path) -> int:
    return sum(1 for f in class_dir.rglob("*") if f.suffix.lower() in IMG_EXTENSIONS and f.is_file())


class ImageFolderDataModule(ImageClassificationDataModule):
    """Images in class folders: ``root/train/<class>/*.png|jpg`` plus optional ``root/val`` and ``root/test``.

    Class names and their order come from the folder names under ``root/train`` (sorted). Without ``root/val`` a
    seeded validation split is carved from ``train`` (``val_size``); ``root/test`` is needed only by ``test`` and
    ``predict``. Images of any size are resized (shorter side) and centre-cropped to ``img_size``.

    Args:
        root: Folder holding ``train/`` and optionally ``val/`` and ``test/``.
        val_size: Validation images carved from ``train`` when there is no ``val/``: a count (int) or a fraction
            (float in (0, 1)); a fraction suits data sets of any size.
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule` (``img_size``,
            ``batch_size``, ``val_size``, ``mean``, ``std``, ...). ``mean``/``std`` default to ImageNet's.
    """

    def __init__(self, root: str | Path, val_size: int | float = 0.1, **kwargs: Any) -> None:
        super().__init__(val_size=val_size, **kwargs)
        self.root = Path(root).expanduser()
        self.classes = self._scan()
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}

    def _scan(self) -> list[str]:
        """Check the layout before any work starts and return the class names."""
        train_dir = self.root / "train"
        if not train_dir.is_dir():
            raise ConfigError(
                f"{train_dir} does not exist; --data.root must hold train/<class>/<images> "
                f"(and optionally val/ and test/)."
            )
        classes = _class_dirs(train_dir)
        if len(classes) < 2:
            raise ConfigError(f"{train_dir} has {len(classes)} class folder(s); a classifier needs at least 2.")
        names = [c.name for c in classes]
        n_train = 0
        for split in ("train", "val", "test"):
            split_dir = self.root / split
            if not split_dir.is_dir():
                continue
            for class_dir in _class_dirs(split_dir):
                if class_dir.name not in names:
                    raise ConfigError(
                        f"{class_dir} is a class that {train_dir} does not have; add it to train/ or remove it."
                    )
                n_images = _count_images(class_dir)
                if n_images == 0:
                    raise ConfigError(
                        f"{class_dir} holds no image ({', '.join(IMG_EXTENSIONS)}); add images or remove the folder."
                    )
                n_train += n_images if split == "train" else 0
        if not (self.root / "val").is_dir():
            validation_count(n_train, self.val_size)  # fail now, not after the run directory exists
        return names

    @property
    def num_classes(self) -> int:
        """The number of class folders under ``root/train``."""
        return len(self.classes)

    def _split(self, name: str) -> ImageFolder | None:
        split_dir = self.root / name
        return _FixedClassesImageFolder(split_dir, self.class_to_idx) if split_dir.is_dir() else None

    def _train_source(self) -> ImageFolder:
        return self._split("train")

    def _val_source(self) -> ImageFolder | None:
        return self._split("val")

    def _test_source(self) -> ImageFolder:
        test = self._split("test")
        if test is None:
            raise ConfigError(f"{self.root / 'test'} does not exist; test and predict need root/test/<class>/<images>.")
        return test
