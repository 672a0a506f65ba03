"""A file a data set names by text, admitted only inside the data set's own folder.

A Hugging Face row's ``path``, a saved set's metadata, a stream's index: loaded by the formats that read such names
(`vitlit.data.hf`, `vitlit.data.streaming`); the item table admits its rows itself (`vitlit.data.table`).
"""

from __future__ import annotations

import os
from pathlib import Path


def inside(root: Path, name: str | os.PathLike | None) -> Path | None:
    """The file ``name`` (relative to ``root``, or absolute) resolved, if it is a file inside ``root``; else ``None``.

    The one admission of a file that a data set names (a table's row, a Hugging Face row's ``path``, a saved data
    set's metadata, a stream's index): a ``../``, an absolute path or a link that leads out of the data set's folder
    is never read, whatever the format.
    """
    if not name:
        return None
    try:
        file = (root / os.fspath(name)).resolve()
        return file if file.is_relative_to(root.resolve()) and file.is_file() else None
    except (OSError, RuntimeError, ValueError):  # a symbolic link loop; a NUL byte, which no file name holds
        return None
