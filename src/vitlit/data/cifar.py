"""CIFAR-10 and CIFAR-100 through torchvision: download, a seeded validation split, the classic augmentation."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any, Literal

import torch
from torchvision.datasets import CIFAR10, CIFAR100
from torchvision.datasets.utils import check_integrity, extract_archive

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.split import validation_count
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
        validation_count(_TRAIN_IMAGES, self.val_size)  # fail now, not after the run directory exists
        if not download:
            self._require_files()

    native_size = 32

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

    def _files(self) -> list[tuple[str, str]]:
        """``(file name, MD5)`` of every file of the extracted data set, as torchvision lists them."""
        cls = self._cls
        return [tuple(item) for item in cls.train_list + cls.test_list] + [(cls.meta["filename"], cls.meta["md5"])]

    def _offline_hint(self) -> str:
        return (
            f"on a machine without internet, copy {self._cls.filename} (or the extracted {self._cls.base_folder}/) "
            f"into {self.data_dir}"
        )

    def _require_files(self) -> None:
        """With ``download: false``: the extracted files must be there, or the archive (which is then extracted)."""
        folder = self.data_dir / self._cls.base_folder
        missing = [name for name, _ in self._files() if not (folder / name).is_file()]
        if not missing:
            return
        archive = self.data_dir / self._cls.filename
        if archive.is_file():
            if not check_integrity(str(archive), self._cls.tgz_md5):
                raise ConfigError(
                    f"{archive} is not the original {self._cls.filename} (its MD5 checksum differs: damaged or "
                    f"incomplete); copy it again, or pass --data.download true."
                )
            extract_archive(str(archive), str(self.data_dir))
            return
        raise ConfigError(
            f"{self.dataset} is not in {folder} (missing {missing[0]}); pass --data.download true, "
            f"{self._offline_hint()}, or point --data.data_dir at the folder that contains {self._cls.base_folder}/."
        )

    def _verify_files(self) -> None:
        """Name the first file whose checksum is not the original's: torchvision only says "not found or corrupted"."""
        folder = self.data_dir / self._cls.base_folder
        for name, md5 in self._files():
            path = folder / name
            if not path.is_file():
                raise ConfigError(
                    f"{path} is missing; pass --data.download true, or {self._offline_hint()} and pass "
                    f"--data.download false."
                )
            if not check_integrity(str(path), md5):
                raise ConfigError(
                    f"{path} is not {self.dataset}'s original file (its MD5 checksum differs: damaged, or made by "
                    f"hand); replace it with the one in {self._cls.filename}, or delete {folder} and pass "
                    f"--data.download true."
                )

    def prepare_data(self) -> None:
        """Download and verify both splits once (on rank 0 only, as Lightning calls it)."""
        if not self.download or self.predicting_folder():
            return
        created = not self.data_dir.exists()
        try:
            for train in (True, False):
                self._cls(str(self.data_dir), train=train, download=True)
        except OSError as err:  # urllib's URLError/HTTPError, socket timeouts, refused or reset connections
            if created:
                shutil.rmtree(self.data_dir, ignore_errors=True)  # only a partial download of ours was in it
            reason = getattr(err, "reason", None) or err
            raise ConfigError(
                f"{self.dataset} could not be downloaded from {self._cls.url} ({reason}); {self._offline_hint()} "
                f"and pass --data.download false."
            ) from None

    def _load(self, train: bool) -> CIFAR10:
        self._verify_files()
        try:
            return self._cls(str(self.data_dir), train=train, download=False)
        except (RuntimeError, OSError, pickle.UnpicklingError, KeyError, ValueError) as err:
            raise ConfigError(
                f"{self.dataset} in {self.data_dir / self._cls.base_folder} cannot be read ({err}); delete the folder "
                f"and pass --data.download true."
            ) from None

    def train_dataset(self) -> CIFAR10:
        """The 50,000 training images (torchvision's ``CIFAR10``/``CIFAR100``)."""
        return self._load(train=True)

    def test_dataset(self) -> CIFAR10:
        """The 10,000 test images."""
        return self._load(train=False)

    def uint8_images_of(self, dataset: CIFAR10) -> torch.Tensor:
        """Torchvision keeps the images as one (N, 32, 32, 3) uint8 array: taken as it is, channels first."""
        return torch.from_numpy(dataset.data).permute(0, 3, 1, 2)
