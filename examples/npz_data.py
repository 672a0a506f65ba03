"""Images in one NumPy ``.npz`` file, as MedMNIST ships them: the forking guide's worked example.

The guide is docs/your-data.md: "Fork it for your data".

The file holds ``train_images`` and ``train_labels``, ``test_*`` and optionally ``val_*``: images as (N, H, W) grey
or (N, H, W, C) uint8 arrays, labels as (N,) or (N, 1) class indices. Run it from the repository root::

    PYTHONPATH=examples python -m vitlit fit --config examples/npz.yaml --data.path my_data.npz
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset

from vitlit.data.base import ImageClassificationDataModule
from vitlit.errors import ConfigError


class NPZDataModule(ImageClassificationDataModule):
    """The splits of one ``.npz`` file, held in memory as uint8 tensors.

    Args:
        path: The ``.npz`` file.
        class_names: Name of each class index; ``None`` names them by their index.
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule` (``img_size``, ``in_chans``, ...).
    """

    def __init__(self, path: str | Path, class_names: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not Path(path).expanduser().is_file():
            raise ConfigError(f"path={path} is not a file; give the .npz file of images and labels.")
        with np.load(Path(path).expanduser()) as arrays:  # read once: the file is closed afterwards
            self.arrays = {key: arrays[key] for key in arrays.files}
        self.names = class_names or [str(i) for i in range(int(self.arrays["train_labels"].max()) + 1)]
        self.native_size = self.arrays["train_images"].shape[1]  # stored size: no resize at that img_size

    @property
    def class_names(self) -> list[str]:
        """The names given, or the class indices as names."""
        return self.names

    def _split(self, name: str) -> TensorDataset | None:
        if f"{name}_images" not in self.arrays:
            return None
        images = torch.from_numpy(self.arrays[f"{name}_images"])
        images = images[:, None] if images.ndim == 3 else images.permute(0, 3, 1, 2)  # (N, C, H, W), as vitlit reads
        return TensorDataset(images.contiguous(), torch.from_numpy(self.arrays[f"{name}_labels"]).long().flatten())

    def train_dataset(self) -> TensorDataset:
        """The training split."""
        return self._split("train")

    def val_dataset(self) -> TensorDataset | None:
        """The file's own validation split, if it has one (else vitlit carves one from training)."""
        return self._split("val")

    def test_dataset(self) -> TensorDataset:
        """The test split."""
        return self._split("test")

    def targets_of(self, dataset: TensorDataset) -> list[int]:
        """The labels, without touching an image (for ``class_balanced``)."""
        return dataset.tensors[1].tolist()

    def uint8_images_of(self, dataset: TensorDataset) -> torch.Tensor:
        """The images as they are (held in memory: nothing to decode)."""
        return dataset.tensors[0]
