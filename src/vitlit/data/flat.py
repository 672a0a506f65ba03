"""The layout most image collections come in: class folders only, ``root/<class>/<images>`` (no ``train/``).

Hugging Face's ``imagefolder`` takes it; `vitlit.data.ImageFolderDataModule` does too, holding out a seeded test
split (``test_size``) and carving validation from the rest (``val_size``), as for a ``train/`` folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from vitlit.data.images import IMAGE_SUFFIXES, image_files
from vitlit.data.split import split_indices, validation_count
from vitlit.errors import ConfigError


def scan_flat(data: Any, class_dirs: list[Path]) -> tuple[dict[str, list[tuple[Path, int]]], list[str]]:
    """List the images of ``class_dirs`` and hold out the test split, saying so in one line.

    Args:
        data: The `vitlit.data.ImageFolderDataModule` (its ``root``, ``test_size``, ``val_size`` and ``seed``).
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
    try:
        keep, held_out = split_indices(len(files), data.test_size, data.seed)
    except ConfigError:
        raise ConfigError(f"test_size={data.test_size} leaves no images to train on or none to test on in "
                          f"{len(files)}; give a fraction such as 0.1.") from None  # fmt: skip
    validation_count(len(keep), data.val_size)  # fail now, not after the run folder exists
    rank_zero_info(
        f"vitlit: {data.root} holds class folders without train/: {len(files):,} images of {len(classes)} classes; "
        f"{len(held_out):,} held out for test (--data.test_size {data.test_size}, seed {data.seed}), validation "
        f"carved from the rest (--data.val_size {data.val_size})"
    )
    return {"train": [files[i] for i in keep], "test": [files[i] for i in held_out]}, classes
