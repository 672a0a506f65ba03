"""Session fixtures: CIFAR in its real on-disk format and scikit-learn's digits as an image folder (both offline)."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers.cli import write_cifar
from torchvision.datasets import CIFAR10, CIFAR100

from vitlit.data.digits import write_digits_folder

# Under pytest-xdist (`-n auto`, the default in pyproject.toml) each worker gets its share of the cores: two workers of
# two threads each on a two-core machine would fight over them, and the small models here gain little from a second
# thread anyway.
# The runs a test starts in a fresh process get the same number through OMP_NUM_THREADS: a run that must end
# bit-identical to one in this process must also add its floating-point sums in the same order.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    torch.set_num_threads(_threads)
    os.environ["OMP_NUM_THREADS"] = str(_threads)

# A suite started as a shell's background job (`pytest &`) inherits an ignored Ctrl-C, and so would every run it starts;
# the Ctrl-C tests need the handler a terminal's Python has.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what the imports and the collection made (torch, Lightning, timm, jsonargparse: half a million objects)
    out of the garbage collector's reach: every full collection walked them all, 0.3 s each on two cores.

    Lightning's batch size search collects after each trial (14 times in a search test), and Python's own full
    collections come more often as a test makes objects. The objects a test makes are still collected as before.
    """
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip a test marked ``part("tools", ...)`` where a fork deleted one of those parts, and ``posix`` ones on Windows.

    A part's own tests live in tests/<part>/ and go with it; a test elsewhere that also uses one is marked.
    """
    import vitlit

    package = Path(vitlit.__file__).parent  # the copy being tested, wherever it is
    for item in items:
        if os.name == "nt" and item.get_closest_marker("posix"):
            item.add_marker(pytest.mark.skip(reason="needs POSIX signals or process groups"))
        for mark in item.iter_markers("part"):
            missing = [name for name in mark.args if not (package / name).is_dir()]
            if missing:
                item.add_marker(pytest.mark.skip(reason=f"this copy of vitlit has no {', '.join(missing)}/"))


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


@pytest.fixture(scope="session")
def few_digits_dir(digits_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`digits_dir` with 40 images of each class in train/ (of its 1,348) and the whole test/: for the tests of what
    a run does with its checkpoints, folders and flags, not of how much it trains on or how well it learns.

    After validation's 10% (40 images: two batches of 32, one of 64) its training split holds 5 full batches of 64.
    A fit decodes 400 images instead of 1,348 (a quarter of a second less on two cores). The test split is whole: a
    test of a part of it (``--trainer.limit_test_batches``) scores other images than the whole, as with `digits_dir`.
    """
    import shutil

    root = tmp_path_factory.mktemp("few_digits")
    for split, keep in (("train", 40), ("test", None)):
        for folder in sorted((digits_dir / split).iterdir()):
            (root / split / folder.name).mkdir(parents=True)
            for image in sorted(folder.iterdir())[:keep]:
                try:  # the same files (a hard link is no link to a reader); a copy where links are not allowed
                    os.link(image, root / split / folder.name / image.name)
                except OSError:
                    shutil.copy(image, root / split / folder.name / image.name)
    return root
