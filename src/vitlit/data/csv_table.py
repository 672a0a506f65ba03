"""Images listed in a table: ``root/labels.csv`` with ``filename,label`` and optionally ``split`` columns.

The most common format of data that is not in class folders (exports of labelling tools, Kaggle competitions):
``--data vitlit.data.csv_table.CSVImageDataModule --data.root <dir>``.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any, Literal

from vitlit.data.table import ItemTableDataModule, Scan
from vitlit.errors import ConfigError
from vitlit.text import shown


class CSVImageDataModule(ItemTableDataModule):
    """Image files named in ``root/labels.csv``: ``filename`` (relative to ``root``), ``label``, optional ``split``.

    Class names are the labels of the training rows, as strings, sorted (as numbers where all are integers, said in one
    line). ``split`` is ``train``, ``val`` or ``test`` (empty or missing: ``train``); without ``val`` rows a seeded
    validation split is carved from the training rows (``val_size``), and ``test`` rows are needed only by ``test`` and
    ``predict``. Every file must lie inside ``root`` and be listed once (one label, one split). Images are read, checked
    and converted as `ImageFolderDataModule` does (``bad_images`` too). The fork guide's worked example of the item
    table (docs/your-data.md: "Fork it for your data").

    Args:
        root: Folder holding the table and the images.
        table: The table's file name inside ``root``.
        filename_column: The column of file names (``image`` in some tools' exports).
        label_column: The column of class names (``class`` in some tools' exports).
        split_column: The column of splits (optional in the table).
        val_size: Validation images carved from the training rows when there are no ``val`` rows: a count (int) or
            a fraction (float in (0, 1)).
        bad_images: ``error`` or ``skip`` for files that cannot be read as images (see `ImageFolderDataModule`).
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule`.
    """

    def __init__(
        self,
        root: str | Path,
        table: str = "labels.csv",
        val_size: int | float = 0.1,
        bad_images: Literal["error", "skip"] = "error",
        filename_column: str = "filename",
        label_column: str = "label",
        split_column: str = "split",
        **kwargs: Any,
    ) -> None:
        super().__init__(val_size=val_size, bad_images=bad_images, **kwargs)
        self.root, self.table = Path(root).expanduser(), table
        self.columns = {"filename": filename_column, "label": label_column, "split": split_column}

    def scan(self) -> Scan:
        """Read the table row by row, stopping at its first bad line; the table admits the files and labels."""
        path, root = self.root / self.table, self.root.resolve()
        if not path.is_file():
            what = "is not a regular file" if path.exists() else "does not exist"
            raise ConfigError(f"{path} {what}; --data.root must hold {self.table} (filename,label[,split]).")
        if not path.resolve().is_relative_to(root):  # a link or a ../ to a file elsewhere: never read, never quoted
            raise ConfigError(f"--data.table {self.table} leads out of {self.root}; give a table inside the root.")
        name, label_key, split_key = self.columns.values()
        rows: dict[str, list[tuple[str, str]]] = {}
        seen: dict[str, int] = {}
        try:
            with path.open(newline="", encoding="utf-8-sig") as f:  # -sig: spreadsheets write a byte-order mark
                reader = csv.DictReader(f)
                twice = {column for column in reader.fieldnames or [] if reader.fieldnames.count(column) > 1}
                if twice & {name, label_key, split_key}:  # DictReader keeps the last of two such columns, silently
                    raise ConfigError(f"{path} has the column {sorted(twice)[0]!r} twice; name each column once.")
                if not {name, label_key} <= set(reader.fieldnames or []):
                    columns = [column[:40] for column in (reader.fieldnames or [])[:10]]
                    raise ConfigError(
                        f"{path} has columns {columns}; it needs {name} and {label_key} ({split_key} is "
                        f"optional), or name yours with --data.filename_column and --data.label_column."
                    )
                # An optional column spelt otherwise ("Split") would make every row a training row without a word.
                near = [c for c in reader.fieldnames if c.strip().casefold() == split_key.strip().casefold()]
                if split_key not in reader.fieldnames and near:
                    raise ConfigError(f"{path} has no column {split_key!r} but has {near[0]!r}, whose rows would "
                                      f"all train; pass --data.split_column {near[0]!r}, or rename it "
                                      f"{split_key}.")  # fmt: skip
                if split_key not in reader.fieldnames and split_key != "split":  # named on purpose, so it is needed
                    raise ConfigError(f"{path} has no column {split_key!r} (--data.split_column); give a column the "
                                      f"table has, or leave the flag out to train on every row.")  # fmt: skip
                for row in reader:
                    n = reader.line_num  # the line an editor shows (a quoted field may span lines: its last)
                    file, label = (row.get(name) or "").strip(), (row.get(label_key) or "").strip()
                    split = (row.get(split_key) or "").strip().lower() or "train"  # a cell of spaces is empty
                    if not label or not file:
                        raise ConfigError(f"{path} line {n}: the {'label' if file else 'file name'} is empty; give "
                                          f"every row a file and a class name.")  # fmt: skip
                    if "\x00" in file:  # no file name holds one: said with its line, before the table admits files
                        raise ConfigError(f"{path} line {n}: '{shown(file)}' is not a file inside {self.root}.")
                    key = os.path.normpath(file)
                    if key in seen:  # a leak between splits, or one image with two labels
                        raise ConfigError(f"{path} line {n}: {row[name]!r} is also on line {seen[key]}; list each "
                                          f"image once, with one label and one split.")  # fmt: skip
                    seen[key] = n
                    rows.setdefault(split, []).append((file, label))
        except (csv.Error, UnicodeDecodeError) as err:
            raise ConfigError(f"{path} is not a readable UTF-8 CSV table ({err}); save it as CSV, UTF-8.") from None
        return Scan(rows, hold_out_test=None)

    def no_test_split(self) -> str:
        """Test and predict need rows of split ``test``."""
        return f"{self.root / self.table} has no test rows; test and predict need rows of split test."
