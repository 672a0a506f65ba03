"""Validation and test images that are byte copies of training images, counted in one line.

Loaded where the data has a validation or test split of its own (`vitlit.data.table`), when that split is checked.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from vitlit.text import shown


def _content(items: Any, i: int) -> bytes:
    """Item ``i``'s bytes as stored: a data set's embedded bytes (``encoded``), else its file's."""
    data = items.encoded(i) if hasattr(items, "encoded") else Path(items.samples[i][0])
    return data if isinstance(data, bytes) else data.read_bytes() if data is not None else b""


def _size(items: Any, i: int) -> int:
    """Item ``i``'s size in bytes, its file's read from the file system (-1: unknown)."""
    if hasattr(items, "encoded"):
        return len(_content(items, i))
    try:
        return os.stat(items.samples[i][0]).st_size
    except OSError:
        return -1


def copies_of_training(items: Any, train: Any, split: str) -> None:
    """Say in one line how many images of a validation or test split are byte copies of training images.

    Such a copy is scored as an image the model has seen, so the split's accuracy overstates what it learned. Files
    are compared by size first (``os.stat``, nothing read), and only those whose size some image of the other split
    shares are read and hashed.
    """
    theirs: dict[int, list[int]] = {}
    for i in range(len(train)):
        if (size := _size(train, i)) >= 0:
            theirs.setdefault(size, []).append(i)
    ours = {i: size for i in range(len(items)) if (size := _size(items, i)) in theirs}  # each size read once
    digest = lambda of, i: hashlib.blake2b(_content(of, i)).digest()  # noqa: E731
    hashes = {digest(train, j): j for size in set(ours.values()) for j in theirs[size]}
    copies = [(i, hashes[h]) for i in ours if (h := digest(items, i)) in hashes]
    if copies:
        i, j = copies[0]
        rank_zero_info(f"vitlit: {len(copies)} of the {len(items)} {split} images are byte copies of training images "
                       f"(e.g. {shown(items.samples[i][0])} = {shown(train.samples[j][0])}); their accuracy "
                       f"overstates what the model learned: remove them from one of the splits")  # fmt: skip
