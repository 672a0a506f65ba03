"""Image files listed in ``labels.jsonl``: the forking guide's worked example of the item table.

The guide is docs/your-data.md: "Fork it for your data", which shows this class whole. Each line of
``<root>/labels.jsonl`` is one image, ``{"file": "img/0.png", "label": "cat", "split": "train"}`` (``split``
optional: ``train``, ``val`` or ``test``). Run it from the repository root::

    PYTHONPATH=examples python -m vitlit fit --config configs/own_images_scratch.yaml \
        --data jsonl_data.JSONLinesDataModule --data.root my_images
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vitlit.data.table import ItemTableDataModule


class JSONLinesDataModule(ItemTableDataModule):
    """Image files named in ``root/labels.jsonl``, one JSON object per line: ``file``, ``label``, ``split``.

    Args:
        root: The folder of ``labels.jsonl`` and the images (a line's ``file`` is relative to it).
        **kwargs: The options of `vitlit.data.table.ItemTableDataModule` (``bad_images``, ``img_size``, ...).
    """

    def __init__(self, root: str | Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = Path(root).expanduser()

    def scan(self) -> dict[str, list[tuple[str, object]]]:
        """Each split's ``(file, label)`` rows; the base class checks the splits, files, labels and images."""
        rows: dict[str, list[tuple[str, object]]] = {}
        with (self.root / "labels.jsonl").open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    item = json.loads(line)
                    rows.setdefault(item.get("split", "train"), []).append((item["file"], item.get("label")))
        return rows
