"""vitlit: train Vision Transformers on one GPU with PyTorch Lightning, timm and LightningCLI."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.6.0"
__all__ = ["CIFARDataModule", "CSVImageDataModule", "DigitsDataModule", "ImageClassificationDataModule",
           "ImageFolderDataModule", "ViTClassifier"]  # fmt: skip

# Where each public name lives: imported on first use, so that `vitlit --version` does not load torch (PEP 562).
_HOMES = {"ViTClassifier": "vitlit.model", **dict.fromkeys(__all__[:5], "vitlit.data")}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'vitlit' has no attribute {name!r}")
