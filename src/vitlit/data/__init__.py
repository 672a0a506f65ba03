"""Data modules: the data contract (`ImageClassificationDataModule`), the item table, image folders, the digits.

``--data ImageFolderDataModule`` (the module to fork for your images) and ``DigitsDataModule`` are named by class;
the others by class path, and load only where a run uses them: ``vitlit.data.csv_table.CSVImageDataModule`` (a
labels.csv table), ``vitlit.data.cifar.CIFARDataModule`` and ``vitlit.data.svhn.SVHNDataModule``. The first two are
also ``vitlit.data.CSVImageDataModule`` and ``vitlit.data.CIFARDataModule``. The bases a fork subclasses
(`ImageClassificationDataModule`, `ItemTableDataModule`) and what ``--data.batch_augment`` takes (`BatchTransform`)
are named here too, where the parser looks for a class's shortest import path.
"""

import importlib
from typing import Any

from vitlit.data.base import BatchTransform, ImageClassificationDataModule
from vitlit.data.digits import DigitsDataModule
from vitlit.data.folder import ImageFolderDataModule
from vitlit.data.table import ItemTableDataModule

__all__ = ["BatchTransform", "CIFARDataModule", "CSVImageDataModule", "DigitsDataModule",
           "ImageClassificationDataModule", "ImageFolderDataModule", "ItemTableDataModule"]  # fmt: skip
_LAZY = {"CIFARDataModule": "vitlit.data.cifar", "CSVImageDataModule": "vitlit.data.csv_table"}


def __getattr__(name: str) -> Any:  # PEP 562: the module of a data set the run names is imported on first use
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vitlit.data' has no attribute {name!r}")
