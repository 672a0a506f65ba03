"""SVHN, the street-view house numbers, through torchvision: the forking guide's worked example of a new data set.

python -m vitlit fit --config configs/svhn_vit_tiny.yaml
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch
from torchvision.datasets import SVHN

from vitlit.data.base import ImageClassificationDataModule
from vitlit.errors import ConfigError


class SVHNDataModule(ImageClassificationDataModule):
    """SVHN's 73,257 training and 26,032 test digits (32 px RGB), read by torchvision (needs SciPy).

    Args:
        data_dir: Folder that holds (or will receive) ``train_32x32.mat`` and ``test_32x32.mat``.
        download: Download the files into ``data_dir`` if they are not there (about 180 MB for both).
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule`.
    """

    native_size = 32  # stored at 32 px: no resize at img_size 32
    default_mean = (0.4377, 0.4438, 0.4728)  # of the training set
    default_std = (0.1980, 0.2010, 0.1970)

    def __init__(self, data_dir: str | Path = "data", download: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if importlib.util.find_spec("scipy") is None:  # torchvision reads SVHN's .mat files with it
            raise ConfigError("SVHN's files are read with SciPy, which is not installed; pip install scipy.")
        self.data_dir, self.download = str(Path(data_dir).expanduser()), download
        for split in ("train", "test") if not (download or self.predict_dir) else ():  # now, not in a run's folder
            if not (Path(self.data_dir) / f"{split}_32x32.mat").is_file():
                raise self._not_there(split)

    @property
    def class_names(self) -> list[str]:
        """The digits; torchvision maps SVHN's label 10 to class 0."""
        return [str(digit) for digit in range(10)]

    @property
    def description(self) -> str:
        """SVHN and the folder of its files (what the run card records as the data)."""
        return f"SVHN at {Path(self.data_dir).resolve()}"

    def prepare_data(self) -> None:
        """Download both splits once (Lightning calls this on one process only; not to predict a folder)."""
        if self.download and not self.predicting_dir():
            try:
                for split in ("train", "test"):
                    SVHN(self.data_dir, split=split, download=True)
            except OSError as err:  # urllib's URLError/HTTPError, socket timeouts, refused or reset connections
                where = SVHN.split_list["train"][0].rsplit("/", 1)[0]
                raise ConfigError(f"SVHN could not be downloaded ({getattr(err, 'reason', None) or err}); copy "
                                  f"train_32x32.mat and test_32x32.mat from {where} into {self.data_dir} by hand and "
                                  f"pass --data.download false.") from None  # fmt: skip

    def _split(self, split: str) -> SVHN:
        try:
            return SVHN(self.data_dir, split=split)
        except RuntimeError:  # torchvision: "Dataset not found or corrupted"
            raise self._not_there(split) from None

    def _not_there(self, split: str) -> ConfigError:
        return ConfigError(f"SVHN's {split}_32x32.mat is missing or damaged in {self.data_dir}; pass --data.download "
                           f"true, or copy the file there.")  # fmt: skip

    def train_dataset(self) -> SVHN:
        """The training split."""
        return self._split("train")

    def test_dataset(self) -> SVHN:
        """The test split."""
        return self._split("test")

    def targets_of(self, dataset: SVHN) -> list[int]:
        """Torchvision keeps SVHN's classes in ``labels``, not ``targets``."""
        return dataset.labels.tolist()

    def uint8_images_of(self, dataset: SVHN) -> torch.Tensor:
        """Torchvision keeps the images as one (N, 3, 32, 32) uint8 array: taken as it is."""
        return torch.from_numpy(dataset.data)
