"""Session fixtures: CIFAR in its real on-disk format and scikit-learn's digits as an image folder (both offline)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.cli import write_cifar
from torchvision.datasets import CIFAR10, CIFAR100

from vitlit.data.digits import write_digits_folder


@pytest.fixture(scope="session")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A data_dir holding both CIFARs; torchvision's checksums are pointed at these files for the session."""
    root = tmp_path_factory.mktemp("cifar")
    sums = write_cifar(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CIFAR10, "train_list", sums["c10_train"])
        mp.setattr(CIFAR10, "test_list", sums["c10_test"])
        mp.setattr(CIFAR10, "meta", sums["c10_meta"])
        mp.setattr(CIFAR100, "train_list", sums["c100_train"])
        mp.setattr(CIFAR100, "test_list", sums["c100_test"])
        mp.setattr(CIFAR100, "meta", sums["c100_meta"])
        yield root


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_digits_folder(tmp_path_factory.mktemp("digits"))
