"""Images in one NumPy ``.npz`` file, ``images`` and ``labels`` and nothing else: the forking guide's worked example.

The guide is docs/your-data.md: "Fork it for your data". The file holds ``images`` as (N, H, W) grey or (N, H, W, C)
uint8 and ``labels`` as (N,) or (N, 1) class indices, with no split: vitlit holds out the test images
(``--data.test_size``) and carves validation from the rest (``--data.val_size``), both seeded. Run it from the
repository root::

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
    """The images of one ``.npz`` file, held in memory as one uint8 tensor.

    Args:
        path: The ``.npz`` file.
        class_names: Name of each class index; ``None`` names them by their index.
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule` (``img_size``, ``test_size``, ...).
    """

    def __init__(self, path: str | Path, class_names: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not Path(path).expanduser().is_file():
            raise ConfigError(f"path={path} is not a file; give the .npz file of images and labels.")
        with np.load(Path(path).expanduser()) as arrays:  # read once: the file is closed afterwards
            images, labels = torch.from_numpy(arrays["images"]), torch.from_numpy(arrays["labels"]).flatten()
        images = images[:, None] if images.ndim == 3 else images.permute(0, 3, 1, 2)  # (N, C, H, W), as vitlit reads
        # Class indices by the base's rule (a float label such as 1.7 is refused, naming its item), not .long()'s.
        labels = torch.tensor(self.targets_of(TensorDataset(images, labels)), dtype=torch.long)
        self.data = TensorDataset(images.contiguous(), labels)
        self.names = class_names or [str(i) for i in range(int(labels.max()) + 1)]
        self.native_size = images.shape[-1]  # stored size: no resize at that img_size

    @property
    def class_names(self) -> list[str]:
        """The names given, or the class indices as names."""
        return self.names

    def train_dataset(self) -> TensorDataset:
        """Every image of the file: vitlit holds out the test and validation images from it.

        A ``TensorDataset`` of uint8 images and labels: the base class takes both as they are (no image decoded for
        the label check or ``class_balanced``; the in-memory source holds the images as they are).
        """
        return self.data
