"""What the tests share: paths, the flags of a CPU run, CIFAR written in its real on-disk format, a CLI runner."""

from __future__ import annotations

import hashlib
import pickle
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import CIFAR10, CIFAR100

from vitlit.cli import main
from vitlit.optim import WarmupCosineLR

ROOT = Path(__file__).resolve().parents[2]
#: The CIFAR recipes, each tested in its shipped precision (configs/digits.yaml is the CPU recipe of the tests).
CIFAR_RECIPES = sorted((ROOT / "configs").glob("cifar*.yaml"))
ALL_CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
TINY_CONFIG = ROOT / "configs" / "cifar10_vit_tiny.yaml"
DIGITS_CONFIG = ROOT / "configs" / "digits.yaml"

CIFAR_TRAIN_PER_BATCH = 16  # 5 batches -> 80 CIFAR-10 training images
CIFAR_TEST = 24

# The recipes' warmups (hundreds of steps) are refused in runs of a few steps: the tests' fits warm up for none.
NO_WARMUP = ["--model.scheduler.init_args.warmup_steps", "0"]
# Flags every CPU test needs on top of a recipe: no GPU precision, one process.
CPU = ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.precision", "32-true"]
# A 32 px model on 4 patches of 16 px (the digits recipe's has 16 of 8 px, TINY_MODEL 64 of 4 px): a step costs a third
# or less. For runs of many steps whose tests are about the run (its schedule, its batches, its resume, its
# checkpoints), not about what the model learns: no learning threshold is asserted on such a run.
FEW_TOKENS = ["--model.patch_size", "16"]
# A 0.26 M-parameter ViT at 32 px (timm registers it for tests): fast on two cores.
TINY_MODEL = ["--model.model_name", "test_vit", "--model.patch_size", "4", "--model.pretrained", "false"]


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _write_batch(path: Path, n: int, label_key: str, num_classes: int, rng: np.random.Generator) -> None:
    # The layout torchvision reads: a pickled dict, rows of 3072 uint8 values (channel-major 3x32x32).
    batch = {
        "data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
        label_key: rng.integers(0, num_classes, size=n).tolist(),
        "filenames": [f"img_{i}.png" for i in range(n)],
    }
    with path.open("wb") as f:
        pickle.dump(batch, f)


def write_cifar(root: Path) -> dict[str, list]:
    """Write small CIFAR-10 and CIFAR-100 sets in torchvision's on-disk format; return the checksums to expect."""
    rng = np.random.default_rng(0)
    c10 = root / CIFAR10.base_folder
    c10.mkdir(parents=True)
    for name, _ in CIFAR10.train_list:
        _write_batch(c10 / name, CIFAR_TRAIN_PER_BATCH, "labels", 10, rng)
    _write_batch(c10 / "test_batch", CIFAR_TEST, "labels", 10, rng)
    with (c10 / "batches.meta").open("wb") as f:
        pickle.dump(
            {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]},
            f,
        )
    c100 = root / CIFAR100.base_folder
    c100.mkdir(parents=True)
    _write_batch(c100 / "train", 5 * CIFAR_TRAIN_PER_BATCH, "fine_labels", 100, rng)
    _write_batch(c100 / "test", CIFAR_TEST, "fine_labels", 100, rng)
    with (c100 / "meta").open("wb") as f:
        pickle.dump({"fine_label_names": [f"class_{i:02d}" for i in range(100)]}, f)
    return {
        "c10_train": [[n, _md5(c10 / n)] for n, _ in CIFAR10.train_list],
        "c10_test": [["test_batch", _md5(c10 / "test_batch")]],
        "c10_meta": {**CIFAR10.meta, "md5": _md5(c10 / "batches.meta")},
        "c100_train": [["train", _md5(c100 / "train")]],
        "c100_test": [["test", _md5(c100 / "test")]],
        "c100_meta": {**CIFAR100.meta, "md5": _md5(c100 / "meta")},
    }


def cifar_archive(cifar_dir: Path, data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CIFAR-10's archive of the test files, copied by hand into a new ``data`` folder; its MD5 is expected."""
    data.mkdir()
    archive = data / CIFAR10.filename
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(cifar_dir / CIFAR10.base_folder, arcname=CIFAR10.base_folder)
    monkeypatch.setattr(CIFAR10, "tgz_md5", _md5(archive))
    return archive


def cifar_args(cifar_dir: Path, dataset: str = "cifar10") -> list[str]:
    return [
        "--data.dataset",
        dataset,
        "--data.data_dir",
        str(cifar_dir),
        "--data.download",
        "false",
        "--data.val_size",
        "16",
        "--data.num_workers",
        "0",
        "--data.batch_size",
        "8",
    ]


def run_cli(*args: object):
    """Run ``vitlit`` in-process, exactly as the console script does.

    A ``fit`` whose arguments name no ``warmup_steps`` gets `NO_WARMUP` last: the tests' runs
    of a few steps would be refused the recipes' warmups of hundreds. A test of the warmup gives its own.
    """
    return main(_with_no_warmup(args))


def vitlit_command(*args: object) -> list[str]:
    """The command line of ``python -m vitlit *args`` for a fresh process, with `run_cli`'s `NO_WARMUP` rule."""
    return [sys.executable, "-m", "vitlit", *_with_no_warmup(args)]


def _with_no_warmup(args: tuple[object, ...]) -> list[str]:
    argv = [str(a) for a in args]
    if argv[:1] == ["fit"] and not any("warmup_steps" in a for a in argv):
        argv += NO_WARMUP
    return argv


def tiny_cifar_fit(cifar_dir: Path, root: Path, *extra: object):
    """``fit`` of the tiny recipe on the test CIFAR files (CPU, fp32, test_vit) into ``root``; ``extra`` goes last."""
    return run_cli(
        "fit", "--config", TINY_CONFIG, *CPU, *TINY_MODEL, *cifar_args(cifar_dir),
        "--trainer.default_root_dir", root, *extra,
    )  # fmt: skip


def tiny_folder_fit(root: Path, out: Path, *extra: object):
    """One short epoch of the tiny recipe on an image folder at 16 px (CPU, fp32, test_vit) into ``out``."""
    return run_cli(
        "fit", "--config", TINY_CONFIG, *CPU, *TINY_MODEL, "--data", "ImageFolderDataModule", "--data.root", root,
        "--data.img_size", "16", "--data.batch_size", "4", "--data.num_workers", "0", "--data.val_size", "4",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
        "--trainer.default_root_dir", out, *extra,
    )  # fmt: skip


def tree_digest(root: Path) -> dict[str, str]:
    """Path -> md5 of every file below ``root``: proof that a failed run left a directory untouched."""
    return {str(p.relative_to(root)): _md5(p) for p in sorted(root.rglob("*")) if p.is_file()}


def no_warmup(optimizer: torch.optim.Optimizer) -> WarmupCosineLR:
    """The schedule of a test's `ViTClassifier` run of a few steps: the default's 500-step warmup would be refused."""
    return WarmupCosineLR(optimizer, warmup_steps=0)


def refused(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    """Run ``vitlit *args``, expect the one-line refusal (status 2, no traceback) and return that line."""
    with pytest.raises(SystemExit) as stop:
        run_cli(*args)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitlit: error:")]
    assert stop.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def said_with(text: str, *parts: object) -> str:
    """The first line of ``text`` (a log, a command's output) that carries every one of ``parts``, asserted to exist.

    For lines that report what happened (the numbers, the flag that changes it), not their wording.
    """
    line = next((line for line in text.splitlines() if all(str(part) in line for part in parts)), None)
    assert line is not None, ([str(p) for p in parts], text[-3000:])
    return line


def carries(line: str, *parts: object) -> None:
    """Assert that a refusal is one line carrying what it must: the bad value, where it is, the flag that fixes it.

    Not its wording: a message reworded keeps its tests; one that drops the value or the fix fails them.
    """
    assert "\n" not in line and all(str(part) in line for part in parts), (
        line,
        [p for p in parts if str(p) not in line],
    )
