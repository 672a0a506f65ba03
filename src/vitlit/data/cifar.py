"""CIFAR-10 and CIFAR-100 through torchvision: download, a seeded validation split, the classic augmentation."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any, Literal

import torch
from torchvision.datasets import CIFAR10, CIFAR100
from torchvision.datasets.utils import check_integrity, extract_archive

from vitlit.data.base import ImageClassificationDataModule, carved_count
from vitlit.errors import ConfigError

_DATASETS: dict[str, type[CIFAR10]] = {"cifar10": CIFAR10, "cifar100": CIFAR100}
# Per-channel statistics of each training set (computed over its 50,000 images).
_MEAN = {"cifar10": (0.4914, 0.4822, 0.4465), "cifar100": (0.5071, 0.4865, 0.4409)}
_STD = {"cifar10": (0.2470, 0.2435, 0.2616), "cifar100": (0.2673, 0.2564, 0.2762)}
# Class names in label order, as in the archives' meta files (torchvision's MD5 check pins those files).
_CLASSES = {
    "cifar10": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"],
    "cifar100": """
        apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly camel can
        castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup dinosaur dolphin
        elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower leopard lion lizard
        lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid otter palm_tree pear
        pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray road rocket rose sea seal
        shark shrew skunk skyscraper snail snake spider squirrel streetcar sunflower sweet_pepper table tank
        telephone television tiger tractor train trout tulip turtle wardrobe whale willow_tree wolf woman worm
    """.split(),
}
_TRAIN_IMAGES = 50_000  # both data sets; torchvision's checksums guarantee it


class CIFARDataModule(ImageClassificationDataModule):
    """CIFAR-10 or CIFAR-100 from torchvision's files, with 5,000 training images held out for validation.

    The test split is loaded only by ``test`` and ``predict``, so no model selection ever sees it. At
    ``img_size`` other than 32 the images are resized first (e.g. 224 for patch-16 or pretrained models).

    Args:
        dataset: Which data set: ``cifar10`` (10 classes) or ``cifar100`` (100 classes).
        data_dir: Folder that holds (or will receive) ``cifar-10-batches-py/`` or ``cifar-100-python/``.
        download: Download the archive into ``data_dir`` if it is not there yet (about 170 MB).
        val_size: Validation images carved from the 50,000 training images: a count (int), as the CIFAR ViT
            recipes hold out 5,000, or a fraction (float in (0, 1)).
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule` (``img_size``,
            ``batch_size``, ``val_size``, ``num_workers``, ...).
    """

    def __init__(
        self,
        dataset: Literal["cifar10", "cifar100"] = "cifar10",
        data_dir: str | Path = "data",
        download: bool = True,
        val_size: int | float = 5000,
        **kwargs: Any,
    ) -> None:
        if dataset not in _DATASETS:
            raise ConfigError(f"dataset={dataset!r} is not known; use 'cifar10' or 'cifar100'.")
        if kwargs.get("in_chans", 3) != 3:
            raise ConfigError(f"CIFAR images have 3 channels, not in_chans={kwargs['in_chans']}; drop --data.in_chans.")
        super().__init__(val_size=val_size, **kwargs)
        self.dataset = dataset
        self.data_dir = Path(data_dir).expanduser()
        self.download = download
        carved_count(_TRAIN_IMAGES, self.val_size)  # fail now, not after the run directory exists
        if not download:
            self._require_files()

    native_size = 32

    @property
    def description(self) -> str:
        """Which CIFAR and the folder of its files (what the run card records as the data)."""
        return f"{self.dataset} at {self.data_dir.resolve()}"

    @property
    def class_names(self) -> list[str]:
        """The 10 or 100 class names in label order."""
        return list(_CLASSES[self.dataset])

    @property
    def default_mean(self) -> tuple[float, ...]:
        """The training set's per-channel mean."""
        return _MEAN[self.dataset]

    @property
    def default_std(self) -> tuple[float, ...]:
        """The training set's per-channel standard deviation."""
        return _STD[self.dataset]

    @property
    def _cls(self) -> type[CIFAR10]:
        return _DATASETS[self.dataset]

    def _require_files(self) -> None:
        """With ``download: false``: the extracted files or the archive (copied by hand, offline) must be there."""
        cls = self._cls
        if not ((self.data_dir / cls.base_folder).is_dir() or (self.data_dir / cls.filename).is_file()):
            raise ConfigError(f"{self.dataset} is not in {self.data_dir / cls.base_folder}; pass --data.download "
                              f"true, {self._offline_hint()}, or point --data.data_dir at the folder that contains "
                              f"{cls.base_folder}/.")  # fmt: skip

    def _offline_hint(self) -> str:
        cls = self._cls
        return f"offline, copy {cls.filename} (or the extracted {cls.base_folder}/) into {self.data_dir}"

    def prepare_data(self) -> None:
        """Download (or extract an archive copied by hand) and verify both splits once, on rank 0 only.

        torchvision's own download: an archive already there with the original checksum is extracted, not fetched.
        """
        archive = self.data_dir / self._cls.filename
        if not (self.download or archive.is_file()) or self.predicting_dir():
            return
        if not self.download:  # offline: an archive copied by hand is checked and extracted, never fetched again
            if not (self.data_dir / self._cls.base_folder).is_dir():
                if not check_integrity(str(archive), self._cls.tgz_md5):
                    raise ConfigError(f"{archive} is not {self.dataset}'s original archive (its MD5 checksum "
                                      f"differs: damaged or cut short); copy it again, or pass --data.download "
                                      f"true.")  # fmt: skip
                extract_archive(str(archive), str(self.data_dir))
            return
        created = not self.data_dir.exists()
        try:
            for train in (True, False):
                self._cls(str(self.data_dir), train=train, download=True)
        except OSError as err:  # urllib's URLError/HTTPError, socket timeouts, refused or reset connections
            if created:
                shutil.rmtree(self.data_dir, ignore_errors=True)  # only a partial download of ours was in it
            raise ConfigError(f"{self.dataset} could not be downloaded from {self._cls.url} "
                              f"({getattr(err, 'reason', None) or err}); {self._offline_hint()} and pass "
                              f"--data.download false.") from None  # fmt: skip

    def _load(self, train: bool) -> CIFAR10:
        try:  # torchvision checks every file's MD5 before it unpickles any: a file made by hand is never run
            return self._cls(str(self.data_dir), train=train, download=False)
        except (RuntimeError, OSError, pickle.UnpicklingError, KeyError, ValueError) as err:
            cls, folder = self._cls, self.data_dir / self._cls.base_folder
            files = [*cls.train_list, *cls.test_list, [cls.meta["filename"], cls.meta["md5"]]]
            bad = next((folder / name for name, md5 in files if not check_integrity(str(folder / name), md5)), None)
            why = f"{folder} cannot be read ({err})"
            if bad is not None:
                why = f"{bad} is not {self.dataset}'s original file (its MD5 checksum differs: damaged or missing)"
            raise ConfigError(f"{why}; replace it from {cls.filename}, or delete {folder} and pass --data.download "
                              f"true.") from None  # fmt: skip

    def train_dataset(self) -> CIFAR10:
        """The 50,000 training images (torchvision's ``CIFAR10``/``CIFAR100``)."""
        return self._load(train=True)

    def test_dataset(self) -> CIFAR10:
        """The 10,000 test images."""
        return self._load(train=False)

    def uint8_images_of(self, dataset: CIFAR10) -> torch.Tensor:
        """Torchvision keeps the images as one (N, 32, 32, 3) uint8 array: taken as it is, channels first."""
        return torch.from_numpy(dataset.data).permute(0, 3, 1, 2)
