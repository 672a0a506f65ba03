"""The layout most image collections come in: class folders only, ``root/<class>/<images>`` (no ``train/``).

Hugging Face's ``imagefolder`` takes it; `vitlit.data.ImageFolderDataModule` does too: the item table
(`vitlit.data.table`) holds out a seeded test split (``test_size``) and carves validation from the rest
(``val_size``), as for a ``train/`` folder.
"""

from __future__ import annotations

from pathlib import Path

from vitlit.data.images import IMAGE_SUFFIXES, image_files
from vitlit.data.table import Scan
from vitlit.errors import ConfigError


def scan_flat(root: Path, class_dirs: list[Path]) -> Scan:
    """List the images of ``class_dirs`` as one training split, of which the table holds out the test split.

    Args:
        root: The data's folder (``--data.root``).
        class_dirs: The class folders under it, sorted.
    """
    rows = []
    for class_dir in class_dirs:
        found = list(image_files(class_dir))
        if not found:
            raise ConfigError(f"{class_dir} holds no image ({', '.join(IMAGE_SUFFIXES)}); add images or remove it.")
        rows += [(path, class_dir.name) for path in found]
    return Scan({"train": rows}, hold_out_test=f"{root} (class folders, {len(class_dirs)} classes)")
