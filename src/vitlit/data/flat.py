"""The layout most image collections come in: class folders only, ``root/<class>/<images>`` (no ``train/``).

Hugging Face's ``imagefolder`` takes it; `vitlit.data.ImageFolderDataModule` does too, holding out a seeded test
split (``test_size``) and carving validation from the rest (``val_size``), as for a ``train/`` folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitlit.data.images import IMAGE_SUFFIXES, image_files
from vitlit.data.split import validation_count
from vitlit.errors import ConfigError


def scan_flat(data: Any, class_dirs: list[Path]) -> tuple[dict[str, list[tuple[Path, int]]], list[str]]:
    """List the images of ``class_dirs`` and hold out the test split (`hold_out_test`, which says it in one line).

    Args:
        data: The `vitlit.data.ImageFolderDataModule` (its ``root``, ``val_size`` and `hold_out_test`).
        class_dirs: The class folders under ``data.root``, sorted.

    Returns:
        The ``train`` and ``test`` files (path, class index), and the class names.
    """
    classes, files = [d.name for d in class_dirs], []
    for index, class_dir in enumerate(class_dirs):
        found = list(image_files(class_dir))
        if not found:
            raise ConfigError(f"{class_dir} holds no image ({', '.join(IMAGE_SUFFIXES)}); add images or remove it.")
        files += [(path, index) for path in found]
    keep, held_out = data.hold_out_test(len(files), f"{data.root} (class folders, {len(classes)} classes)")
    validation_count(len(keep), data.val_size)  # fail now, not after the run folder exists
    return {"train": [files[i] for i in keep], "test": [files[i] for i in held_out]}, classes
