"""Forking to new data: the data contract, SVHN as the worked example, channels that follow the data, statistics
that follow the weights."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import yaml
from helpers.cli import DIGITS_CONFIG, ROOT, run_cli
from PIL import Image
from torch.utils.data import Dataset
from torchvision.datasets import SVHN

from vitlit.data import ImageFolderDataModule
from vitlit.pretrained import fill_pretrained_inputs, pretrained_statistics

SVHN_CONFIG = ROOT / "configs" / "svhn_vit_tiny.yaml"
# The shipped recipe with only data and model shrunk: bf16-mixed stands in for the GPU's precision on the CPU.
SMALL = [
    "--trainer.accelerator", "cpu", "--trainer.precision", "bf16-mixed", "--trainer.max_epochs", "1",
    "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
    "--model.model_name", "test_vit", "--model.patch_size", "8", "--data.num_workers", "0",
]  # fmt: skip


def _write_svhn(root: Path, n: int, rng: np.random.Generator) -> dict[str, list[str]]:
    """SVHN's two .mat files as torchvision reads them (X: 32x32x3xN uint8; y: Nx1 with 10 for the digit 0)."""
    from scipy.io import savemat

    split_list = {}
    for split, count in (("train", n), ("test", n // 2)):
        labels = np.repeat(np.arange(1, 11), count // 10 + 1)[:count]
        labels[: count // 2] = 1  # class-imbalanced: half of them are ones
        images = rng.integers(0, 256, size=(32, 32, 3, count), dtype=np.uint8)
        path = root / f"{split}_32x32.mat"
        savemat(path, {"X": images, "y": labels[:, None]})
        split_list[split] = [SVHN.split_list[split][0], path.name, hashlib.md5(path.read_bytes()).hexdigest()]
    return split_list


@pytest.fixture(scope="module")
def svhn_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("svhn")
    split_list = _write_svhn(root, 120, np.random.default_rng(0))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SVHN, "split_list", split_list)  # the checksums of these files instead of the real ones
        yield root


# The DataLoader path of the same recipe goes with the slow tests (the per-image path is trained by many others).
@pytest.mark.parametrize(
    "source", ["memory", pytest.param("workers", marks=pytest.mark.slow)], ids=["on-device", "dataloader"]
)
def test_svhn_recipe_trains_class_balanced_on_both_data_paths(svhn_dir: Path, tmp_path: Path, source: str) -> None:
    cli = run_cli(
        "fit", "--config", SVHN_CONFIG, *SMALL, "--data.data_dir", svhn_dir, "--data.download", "false",
        "--data.batch_size", "16", "--data.val_size", "20", "--data.class_balanced", "true",
        "--data.source", source, "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    data = cli.datamodule
    assert cli.trainer.global_step == 100 // 16 and data.class_names[0] == "0"
    source = data.train_set.dataset
    targets = data.split_targets(data.train_set)
    assert targets == [int(source.labels[i]) for i in data.train_set.indices] and 0 in targets  # label 10 -> 0
    if source == "memory":  # the array itself, channels first, not images decoded one by one
        held = data.train_dataloader().dataset.images
        assert torch.equal(held, torch.from_numpy(source.data)[data.train_set.indices])
    test = run_cli(
        "test", "--config", SVHN_CONFIG, *SMALL, "--data.data_dir", svhn_dir, "--data.download", "false",
        "--trainer.default_root_dir", tmp_path, "--ckpt_path", cli.trainer.checkpoint_callback.best_model_path,
    )  # fmt: skip
    assert 0.0 <= float(test.trainer.callback_metrics["test/acc"]) <= 1.0


def test_missing_svhn_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", SVHN_CONFIG, *SMALL, "--data.data_dir", tmp_path, "--data.download", "false",
                "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert exit_info.value.code == 2
    assert "train_32x32.mat is missing or damaged" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--data.in_chans", "1"], "have 3 channel(s) but in_chans=1; pass --data.in_chans 3"),
        # No default statistics for 2 channels: refused when the model is built, before any data is read.
        (["--data.in_chans", "2"], "in_chans=2, but the default mean has 3 values"),
    ],
    ids=["grey-flag-on-rgb", "two-channels"],
)
def test_channel_mistakes_are_one_line_and_leave_no_run(
    flags: list[str], message: str, svhn_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", SVHN_CONFIG, *SMALL, "--data.data_dir", svhn_dir, "--data.download", "false",
                "--trainer.default_root_dir", tmp_path, *flags)  # fmt: skip
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
    assert not list(tmp_path.rglob("*.ckpt")) and not (tmp_path / "lightning_logs" / "version_0").exists()


def test_svhn_offline_is_one_line_and_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from urllib.error import URLError

    import torchvision.datasets.svhn

    def no_network(*args: object, **kwargs: object) -> None:
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets.svhn, "download_url", no_network)
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", SVHN_CONFIG, *SMALL, "--data.data_dir", tmp_path / "svhn",
                "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "SVHN could not be downloaded" in err.strip().splitlines()[-1]
    assert "--data.download false" in err and not (tmp_path / "runs").exists()  # no empty lightning_logs/version_N


class _Unlabelled(Dataset):
    """A dataset with neither ``targets`` nor ``labels``: the default hook decodes its items."""

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.zeros(3, 4, 4, dtype=torch.uint8), [2, 0, 1][i]


def test_default_targets_hook_reads_targets_or_decodes(digits_dir: Path) -> None:
    data = ImageFolderDataModule(digits_dir, num_workers=0)
    train = data.train_dataset()
    assert data.targets_of(train) == train.targets
    assert data.targets_of(_Unlabelled()) == [2, 0, 1]
    assert data.files_of(train)[0].endswith(".png")


@pytest.fixture(scope="module")
def test_vit_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """timm's test_vit, 3 channels, saved as a local weights file as an offline user would have it."""
    path = tmp_path_factory.mktemp("weights") / "test_vit.pth"
    torch.save(timm.create_model("test_vit", img_size=32, patch_size=8).state_dict(), path)
    return path


def _write_rgba_folder(root: Path, rng: np.random.Generator) -> Path:
    for split, n in (("train", 24), ("test", 6)):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (20, 24, 4), dtype=np.uint8), "RGBA").save(folder / f"{i}.png")
    return root


@pytest.mark.parametrize("channels", [1, 4], ids=["grey-digits", "rgba"])
def test_channels_follow_the_data_with_adapted_pretrained_weights(
    channels: int, digits_dir: Path, tmp_path: Path, test_vit_weights: Path
) -> None:
    grey = channels == 1
    root = digits_dir if grey else _write_rgba_folder(tmp_path / "rgba", np.random.default_rng(0))
    stats = [] if grey else ["--data.mean", "[0.5,0.5,0.5,0.5]", "--data.std", "[0.25,0.25,0.25,0.25]"]
    cli = run_cli(
        "fit", "--config", DIGITS_CONFIG, *SMALL, "--data.root", root,
        "--data.in_chans", channels, "--data.source", "memory" if grey else "workers", "--data.val_size", "8",
        "--model.pretrained_file", test_vit_weights, *stats,
        "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
        "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    proj = cli.model.net.patch_embed.proj.weight
    assert proj.shape[1] == channels  # timm adapted the 3-channel patch embedding
    batch = next(iter(cli.datamodule.val_dataloader()))[0]
    assert batch.shape[1] == channels
    saved = yaml.safe_load((Path(cli.trainer.log_dir) / "config.yaml").read_text())["data"]["init_args"]
    # Grey without --data.mean: the weights' statistics (test_vit: 0.5), averaged into one channel.
    assert saved["mean"] == ([0.5] if grey else [0.5] * 4) and saved["in_chans"] == channels
    # Issue 53, 2: and evaluated as the weights were (test_vit's pretrained config: bicubic, crop_pct 0.95), recorded
    # in the checkpoint for exports and servers.
    assert (saved["crop_pct"], saved["interpolation"]) == (0.95, "bicubic")
    assert (cli.model.hparams.input_crop_pct, cli.model.hparams.input_interpolation) == (0.95, "bicubic")
    assert cli.datamodule.device_transform(train=False).crop_pct == 0.95


def test_statistics_come_from_the_weights_unless_given() -> None:
    assert pretrained_statistics("deit_tiny_patch16_224") == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    assert pretrained_statistics("vit_small_patch16_224.augreg_in21k_ft_in1k", 1) == ((0.5,), (0.5,))
    data = {"mean": None, "std": [0.3, 0.3, 0.3], "in_chans": 3}
    fill_pretrained_inputs({"model_name": "deit_tiny_patch16_224", "pretrained": True}, data)
    # The whole evaluation geometry of the weights, as timm's resolve_data_config gives it (DeiT: bicubic, 0.9).
    assert data == {
        "mean": [0.485, 0.456, 0.406],
        "std": [0.3, 0.3, 0.3],
        "in_chans": 3,
        "crop_pct": 0.9,
        "interpolation": "bicubic",
    }
    untouched = {"mean": None, "std": None, "in_chans": 3}
    fill_pretrained_inputs({"model_name": "deit_tiny_patch16_224", "pretrained": False}, untouched)
    assert untouched["mean"] is None  # from scratch: the data's own statistics
