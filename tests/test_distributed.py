"""Data-parallel training (configs/scale/ddp.yaml): shards, synchronised metrics, one writer, resume and SIGTERM.

The end-to-end tests run the digits recipe with the DDP config as shipped, in 2 CPU processes (gloo), through both
launchers a user meets: Lightning's own (``python -m vitlit fit ... --trainer.devices 2``) and torchrun.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.cli import DIGITS_CONFIG, ROOT, TINY_CONFIG, TINY_MODEL, run_cli, said_with, vitlit_command
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DistributedSampler

from vitlit.checks import check_run
from vitlit.data import ImageFolderDataModule
from vitlit.data.base import ImageClassificationDataModule
from vitlit.errors import ConfigError
from vitlit.model import ViTClassifier
from vitlit.runs.curves import read_scalars
from vitlit.runs.ddp import interleave

DDP_CONFIG = ROOT / "configs" / "scale" / "ddp.yaml"
#: The digits recipe in 2 CPU processes; patch 16 (4 tokens) keeps each run to seconds.
DDP = ["--config", DIGITS_CONFIG, "--config", DDP_CONFIG, "--trainer.devices", "2", "--model.patch_size", "16"]


# -- the pieces, in one process ---------------------------------------------------------------------------------------


class _Numbered(ImageClassificationDataModule):
    """101 images of 12 px held in memory, image i filled with i (and a gradient, so crops and flips show), its
    target i: batches name their images. Validation is the same 101 images, not carved."""

    native_size = 12

    def __init__(self, **kwargs) -> None:
        super().__init__(img_size=12, mean=[0.0] * 3, std=[1 / 255] * 3, source="memory", crop_padding=2,
                         augment="autoaugment", **kwargs)  # fmt: skip
        ramp = torch.arange(12, dtype=torch.uint8).view(1, 1, 1, 12).expand(101, 3, 12, 12)
        self.images = (torch.arange(101, dtype=torch.uint8).view(101, 1, 1, 1) + ramp).contiguous()
        self.items = [(image, i) for i, image in enumerate(self.images)]

    @property
    def class_names(self) -> list[str]:
        return [str(i) for i in range(101)]

    def train_dataset(self):
        return self.items

    def val_dataset(self):
        return self.items

    def test_dataset(self):
        return self.items

    def uint8_images_of(self, dataset) -> torch.Tensor:
        return self.images


def _batches(rank: int, world_size: int, train: bool, batch_size: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch of the data module's batches as this process of ``world_size`` gets them, after the pipeline."""
    data = _Numbered(batch_size=batch_size, seed=7)
    data.trainer = SimpleNamespace(global_rank=rank, world_size=world_size, training=train, num_devices=1,
                                   strategy=SimpleNamespace(root_device=torch.device("cpu")))  # fmt: skip
    data.setup("fit")
    loader = data.train_dataloader() if train else data.val_dataloader()
    torch.manual_seed(0)  # every DDP process draws the same numbers (same seed, same draws)
    return [data.on_after_batch_transfer(batch, 0) for batch in loader]


def _epoch(rank: int, world_size: int) -> list[int]:
    return [int(i) for _, targets in _batches(rank, world_size, train=False) for i in targets]


def test_device_path_training_shards_are_one_big_batch_split_between_the_processes() -> None:
    shards = [_batches(rank, 3, train=True) for rank in range(3)]
    assert [len(s) for s in shards] == [4, 4, 4]  # as many steps on every process, or DDP would wait for ever
    seen = [int(i) for shard in shards for _, targets in shard for i in targets]
    assert len(seen) == 4 * 3 * 8 and len(set(seen)) == len(seen)  # disjoint: no image twice in one epoch
    # Step by step, the three shares are exactly one process's batch of 3 x 8, augmentations included (crop, flip
    # and AutoAugment draws of the whole step, each process applying its part): DDP changes only where images go.
    single = _batches(0, 1, train=True, batch_size=24)
    assert len(single) == 4
    for step, (images, targets) in enumerate(single):
        assert torch.equal(interleave([shard[step][1] for shard in shards]), targets)
        assert torch.equal(interleave([shard[step][0] for shard in shards]), images)


def test_device_path_evaluation_shards_cover_every_image_once_and_interleave_back() -> None:
    shards = [_epoch(rank, 2) for rank in range(2)]
    assert [len(s) for s in shards] == [51, 50]  # no image repeated to even them out
    assert interleave([torch.tensor(s) for s in shards]).tolist() == list(range(101))
    with pytest.raises(ValueError, match=r"shard 0 of 2.* 51 .* 99 .* 50"):
        interleave([torch.tensor(shards[0]), torch.tensor(shards[1][:-2])])


def test_evaluation_dataloaders_shard_without_repeats(digits_dir: Path) -> None:
    data = ImageFolderDataModule(root=digits_dir, source="workers", num_workers=0, batch_size=16)
    data.setup("fit")
    data.trainer = SimpleNamespace(global_rank=1, world_size=2)
    val = data.val_dataloader()
    assert isinstance(val.sampler, UnrepeatedDistributedSampler)  # Lightning leaves a DistributedSampler alone
    assert list(val.sampler) == list(range(1, len(data.val_set), 2))
    train = data.train_dataloader().sampler  # the same shards whatever the source (one sampler)
    assert isinstance(train, DistributedSampler) and (train.rank, train.num_replicas, train.drop_last) == (1, 2, True)


def test_evaluation_loss_is_the_mean_over_images_whatever_the_batches() -> None:
    # Under DDP the shards' batches differ in size (64 + 4 on one process, 64 + 3 on the other): the loss must be
    # the mean over images, not over batches.
    model = ViTClassifier(model_name="test_vit", num_classes=10, img_size=32, patch_size=16, label_smoothing=0.1)
    model.eval()
    images, targets = torch.randn(5, 3, 32, 32), torch.tensor([1, 2, 3, 4, 5])
    with torch.no_grad():
        model._evaluate((images[:4], targets[:4]), "val", model.val_metrics, model.val_loss)
        model._evaluate((images[4:], targets[4:]), "val", model.val_metrics, model.val_loss)
        expected = torch.nn.functional.cross_entropy(model(images), targets, label_smoothing=0.1)
    assert model.val_loss.compute() == pytest.approx(float(expected), abs=1e-6)


def test_a_random_seed_per_process_is_refused_where_torchrun_or_slurm_start_them(tmp_path: Path) -> None:
    def check(seed: object, environ: dict[str, str]) -> None:
        check_run("fit", {"seed_everything": seed, "trainer": {"default_root_dir": str(tmp_path)}}, environ)

    with pytest.raises(ConfigError, match=r"each of the 4 processes its own random seed.*--seed_everything 42"):
        check(True, {"WORLD_SIZE": "4"})
    with pytest.raises(ConfigError, match="each of the 8 processes"):
        check(True, {"SLURM_NTASKS": "8"})
    check(True, {"WORLD_SIZE": "4", "PL_GLOBAL_SEED": "7"})  # Lightning's launcher passed its seed on
    check(42, {"WORLD_SIZE": "4"})
    check(True, {})


@pytest.mark.part("transfer")
def test_unfreezing_during_the_run_is_refused_under_ddp() -> None:
    from vitlit.transfer.finetune import FreezeSchedule

    trainer = SimpleNamespace(world_size=2, max_epochs=10)
    module = SimpleNamespace(hparams={"model_name": "test_vit"})
    schedule = FreezeSchedule(unfreeze_at_epochs=[1])
    schedule._stages = lambda pl_module: [["blocks.0"], ["blocks.1"]]
    with pytest.raises(ConfigError, match=r"unfreeze_at_epochs=\[1\].*data-parallel training \(2 processes\)"):
        schedule.check(trainer, module)


# -- whole runs in 2 processes ----------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "VITLIT_TEST_KILL": "1"}


def _vitlit(*args: object, timeout: int = 300) -> subprocess.CompletedProcess:
    command = vitlit_command(*args)
    return subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=timeout)


def _torchrun(*args: object) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               *vitlit_command(*args)[1:]]  # fmt: skip
    return subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300)


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


@pytest.mark.slow
def test_ddp_run_has_one_writer_and_evaluates_as_one_process(tmp_path: Path, digits_dir: Path) -> None:
    root = tmp_path / "runs"
    data = ["--data.root", digits_dir, "--data.source", "workers", "--trainer.default_root_dir", root]
    fit = _vitlit("fit", *DDP, *data, "--trainer.max_epochs", "2", "--trainer.callbacks+=helpers.shards.RecordShards")
    assert fit.returncode == 0, fit.stderr[-3000:]
    # Each epoch the two processes train on disjoint shards of the same size, and the epochs are shuffled anew.
    shards = {(e, r): json.loads((root / f"shard-{e}-{r}.json").read_text()) for e in (0, 1) for r in (0, 1)}
    for epoch in (0, 1):
        a, b = shards[epoch, 0], shards[epoch, 1]
        assert len(a) == len(b) == 9 * 64 and not set(a) & set(b)  # 1,213 training images: 9 full batches each
    assert shards[0, 0] != shards[1, 0]
    # One run folder (the second process creates none), one last.ckpt, one config, one card.
    runs = sorted(p.name for p in (root / "lightning_logs").iterdir())
    assert runs == ["version_0"]
    run = root / "lightning_logs" / "version_0"
    assert [p.name for p in run.rglob("last.ckpt")] == ["last.ckpt"]
    assert sorted(p.name for p in run.glob("config*.yaml")) == ["config.yaml"]
    assert len(list(run.glob("events.out.tfevents.*"))) == 1
    card = json.loads((run / "run_card.json").read_text())
    assert (card["processes"], card["effective_batch"]) == (2, 128)
    assert fit.stderr.count("vitlit: effective batch 128 (64 per device x 1 accumulated x 2 procs)") == 1

    # The accuracy the 2-process run logged for its best epoch is that of one process evaluating the checkpoint
    # (135 validation images: shards of 68 and 67, nothing counted twice).
    best = next(run.glob("checkpoints/epoch*.ckpt"))
    one = run_cli("validate", "--config", DIGITS_CONFIG, "--model.patch_size", "16", *data, "--ckpt_path", best)
    single = {k: float(v) for k, v in one.trainer.callback_metrics.items()}
    assert card["best_val_acc"] == pytest.approx(single["val/acc"], abs=1e-6)
    validate = _vitlit("validate", *DDP, *data, "--ckpt_path", best)
    assert validate.returncode == 0, validate.stderr[-3000:]
    two = read_scalars(run / "validate" / "version_1")
    for name in ("val/acc", "val/acc_top5", "val/loss"):
        assert two[name][-1][1] == pytest.approx(single[name], abs=1e-6), name

    # predict: the shards come back in data order, written once by the main process.
    run_cli("predict", "--config", DIGITS_CONFIG, "--model.patch_size", "16", *data, "--ckpt_path", best)
    predict = _vitlit("predict", *DDP, *data, "--ckpt_path", best)
    assert predict.returncode == 0, predict.stderr[-3000:]
    one_csv, two_csv = (run / "predict" / f"version_{k}" / "predictions.csv" for k in (0, 1))
    rows = list(csv.reader(two_csv.open()))
    assert len(rows) == 1 + 449 and [r[0] for r in rows[1:]] == [str(i) for i in range(449)]
    assert [r[:4] for r in rows] == [r[:4] for r in csv.reader(one_csv.open())]


@pytest.mark.slow
@pytest.mark.posix  # SIGKILL, process groups, preexec_fn or /proc
def test_ddp_device_path_resumes_exactly_and_stops_together_on_sigterm(tmp_path: Path, digits_dir: Path) -> None:
    data = ["--data.root", digits_dir, "--data.source", "memory", "--data.augment", "autoaugment"]
    # Uninterrupted, launched by torchrun (every process started at once; only rank 0 picks the run folder).
    whole = _torchrun("fit", *DDP, *data, "--trainer.max_epochs", "2", "--trainer.default_root_dir", tmp_path / "a")
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "a" / "lightning_logs").iterdir()) == ["version_0"]

    # Killed (SIGKILL, every process) as epoch 1 starts, then resumed with --ckpt_path auto: the same weights.
    root = tmp_path / "b"
    common = [*DDP, *data, "--trainer.max_epochs", "2", "--trainer.default_root_dir", root]
    killed = _vitlit("fit", *common, "--trainer.callbacks+=helpers.kill.KillAtEpoch")
    assert killed.returncode != 0
    resumed = _vitlit("fit", *common, "--ckpt_path", "auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = _weights(tmp_path / "a" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    b = _weights(root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    # SIGTERM to the main process only (a user's `kill`): every process stops at the same step, last.ckpt is
    # written, one line says how to resume, exit status 143; the resume finishes the run.
    root = tmp_path / "c"
    common = [*DDP, *data, "--trainer.max_epochs", "3", "--trainer.default_root_dir", root]
    stopped = _vitlit("fit", *common, "--trainer.callbacks+=helpers.kill.SignalOneRank", timeout=120)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    lines = [line for line in stopped.stderr.splitlines() if "interrupted by SIGTERM" in line]
    # Signalled after step 12; the processes agree at the end of that step, or of the next where the signalling
    # callback runs after the shared StopTogetherOnSigterm (a user's signal comes at any time).
    found = re.search(r"at epoch 1, step (\d+); resume with: python -m vitlit fit --config", lines[0])
    assert len(lines) == 1 and found and int(found.group(1)) in (12, 13), lines
    run = root / "lightning_logs" / "version_0"
    assert json.loads((run / "run_card.json").read_text())["exit_reason"] == "SIGTERMException"
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == int(found.group(1))
    resumed = _vitlit("fit", *common, "--ckpt_path", "auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("source", ["memory", "workers"])
def test_the_tiny_recipe_as_shipped_trains_in_two_processes(source: str, tmp_path: Path, digits_dir: Path) -> None:
    # The CIFAR-10 recipe with its AutoAugment, Mixup/CutMix, erasing, fused AdamW, clipping and callbacks, in
    # bf16-mixed (the CPU's stand-in for its 16-mixed), with test_vit and the digits files instead of CIFAR.
    root = tmp_path / "runs"
    fit = _vitlit(
        "fit", "--config", TINY_CONFIG, "--config", DDP_CONFIG, "--trainer.accelerator", "cpu",
        "--trainer.devices", "2", "--trainer.precision", "bf16-mixed", *TINY_MODEL,
        "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2",
        "--trainer.enable_progress_bar", "false", "--data", "ImageFolderDataModule", "--data.root", digits_dir,
        "--data.batch_size", "16", "--data.num_workers", "0", "--data.source", source,
        "--trainer.default_root_dir", root,
    )  # fmt: skip
    assert fit.returncode == 0, fit.stderr[-3000:]
    said_with(fit.stderr, "effective batch 32", "16 per device", "1 accumulated", "2 procs")
    run = root / "lightning_logs" / "version_0"
    assert sorted(p.name for p in (root / "lightning_logs").iterdir()) == ["version_0"]
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 8
    assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values() if v.is_floating_point())
