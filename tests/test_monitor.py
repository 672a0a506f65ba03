"""Throughput logging: images/s and TFLOP/s reach TensorBoard; FLOPs per image agree with the published count."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.cli import tiny_cifar_fit
from lightning.pytorch.plugins.precision import Precision
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vitlit.model import ViTClassifier, clip_true_gradients
from vitlit.runs.curves import read_scalars
from vitlit.runs.monitor import SpeedMonitor, available_flops, flops_per_image


def test_flops_per_image_is_three_forward_passes_of_the_published_count() -> None:
    # timm's table: vit_small_patch16_224 takes 4.6 GMACs (9.2 GFLOPs) forward; backward costs two forwards.
    model = ViTClassifier("vit_small_patch16_224", num_classes=1000, img_size=224)
    assert abs(flops_per_image(model) / 3 / 9.2e9 - 1) < 0.02


def test_throughput_is_logged_at_logging_steps(tmp_path: Path, cifar_dir: Path) -> None:
    cli = tiny_cifar_fit(cifar_dir, tmp_path, "--trainer.max_epochs", "2", "--trainer.log_every_n_steps", "2",
                         "--trainer.callbacks+=vitlit.runs.monitor.SpeedMonitor")  # fmt: skip
    monitor = next(cb for cb in cli.trainer.callbacks if isinstance(cb, SpeedMonitor))
    scalars = read_scalars(cli.trainer.log_dir)
    images_per_sec = [v for _, v in scalars["perf/images_per_sec"]]
    assert len(images_per_sec) >= 6  # every other step of 2 x 8, each epoch's clock started after its first batch
    assert all(v > 0 for v in images_per_sec) and monitor.average_images_per_sec > 0
    # A CPU has no known peak: no FLOPs are counted, so neither TFLOP/s nor MFU are logged.
    assert monitor.flops_per_image is None and "perf/tflops_per_sec" not in scalars and "perf/mfu" not in scalars
    card = (Path(cli.trainer.log_dir) / "run_card.json").read_text()
    assert f'"images_per_sec": {round(monitor.average_images_per_sec, 1)}' in card
    # The training accuracy is computed once an epoch, at its end (issue 56: no per-step logging work for it).
    assert len(scalars["train/acc"]) == 2 and all(0.0 <= v <= 1.0 for _, v in scalars["train/acc"])
    assert len(scalars["train/loss"]) == 8  # the loss at every logging step of 2 x 8 steps


def test_mfu_denominator_knows_the_h200(monkeypatch: pytest.MonkeyPatch) -> None:
    # CUDA names the chip plain "NVIDIA H200", which Lightning 2.6's table does not resolve (MFU would be missing).
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    cuda = torch.device("cuda")
    assert available_flops(cuda, torch.bfloat16) == available_flops(cuda, torch.float16) == 989.4e12  # dense
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert available_flops(cuda, torch.float32) == 494.7e12  # TF32, as Lightning counts fp32 matmuls when allowed
    assert available_flops(torch.device("cpu"), torch.float32) is None


@pytest.mark.parametrize(("clip", "algorithm"), [(None, "norm"), (1.0, "norm"), (0.5, "value")])
def test_the_logged_gradient_norm_is_the_one_before_clipping(clip: float | None, algorithm: str) -> None:
    weight = torch.nn.Parameter(torch.zeros(2))
    weight.grad = torch.tensor([3.0, 4.0])
    optimizer = torch.optim.SGD([weight], lr=0.1)
    norm = clip_true_gradients(optimizer, Precision(), clip, algorithm)
    assert norm.item() == pytest.approx(5.0)
    expected = {None: [3.0, 4.0], 1.0: [0.6, 0.8], 0.5: [0.5, 0.5]}[clip]
    torch.testing.assert_close(weight.grad, torch.tensor(expected), rtol=1e-5, atol=1e-6)


def test_gradient_norm_curve_and_weight_histograms_reach_tensorboard(tmp_path: Path, cifar_dir: Path) -> None:
    cli = tiny_cifar_fit(
        cifar_dir, tmp_path, "--trainer.max_steps", "6", "--trainer.log_every_n_steps", "2",
        "--trainer.precision", "bf16-mixed", "--trainer.callbacks+=vitlit.runs.histograms.WeightHistograms",
    )  # fmt: skip
    scalars = read_scalars(cli.trainer.log_dir)
    norms, weights = scalars["train/grad_norm"], scalars["train/weight_norm"]
    assert [step for step, _ in norms] == [step for step, _ in weights] == [1, 3, 5]  # the logging steps
    assert all(0 < v < 1e4 for _, v in norms)
    # The last one is the weights' norm before the last step: within that step's change of the final weights' norm.
    final = torch.nn.utils.get_total_norm([p for p in cli.model.parameters() if p.requires_grad]).item()
    assert weights[-1][1] == pytest.approx(final, rel=0.02) and weights[0][1] != weights[-1][1]
    events = EventAccumulator(cli.trainer.log_dir, size_guidance={"histograms": 0})
    events.Reload()
    tags = events.Tags()["histograms"]
    assert "weights/net.blocks.0.attn.qkv.weight" in tags and not any(t.endswith(".bias") for t in tags)


@pytest.mark.slow  # a fit of its own; the default suite keeps within its five minutes
def test_between_logging_steps_only_the_loss_is_logged(
    tmp_path: Path, cifar_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 56: a value logged on a step Lightning does not write is work for nothing; only train/loss is."""
    logged: dict[int, set[str]] = {}
    original = ViTClassifier.log

    def counting(self: ViTClassifier, name: str, *args: object, **kwargs: object) -> None:
        if self.trainer.training:
            logged.setdefault(self.trainer.global_step, set()).add(name)
        original(self, name, *args, **kwargs)

    monkeypatch.setattr(ViTClassifier, "log", counting)
    tiny_cifar_fit(cifar_dir, tmp_path, "--trainer.max_steps", "8", "--trainer.log_every_n_steps", "4")
    # A name's step is the optimizer's count when it was logged: before the step (the loss, the clipping's norms)
    # or after it (the guard's count); Lightning writes at steps 4 and 8 (counted after the step).
    quiet = {step: names for step, names in logged.items() if step not in (3, 4, 7, 8)}
    assert quiet and all(names == {"train/loss"} for names in quiet.values()), logged
    assert {"train/grad_norm", "train/weight_norm"} <= logged[3] and "train/nonfinite_steps" in logged[4], logged


def test_epochs_shorter_than_the_logging_interval_count_images_and_batches_alike() -> None:
    # A small data set: 4 batches of 1 image an epoch, a log every 3 steps. Each epoch's first batch starts its clock,
    # and an epoch's untimed tail is dropped; its batches were counted anyway, so Lightning's meter saw more batches
    # than images and raised a ValueError mid-fit.
    monitor = SpeedMonitor()
    trainer = SimpleNamespace(global_step=0, log_every_n_steps=3, world_size=1, precision="32-true",
                              strategy=SimpleNamespace(root_device=torch.device("cpu")))  # fmt: skip
    logged: list[str] = []
    module = SimpleNamespace(log=lambda name, value, **_: logged.append(name))
    monitor.on_train_start(trainer, module)
    for _ in range(4):
        monitor.on_train_epoch_start(trainer, module)
        for i in range(4):
            trainer.global_step += 1
            monitor.on_train_batch_end(trainer, module, None, (torch.zeros(1, 3, 2, 2), torch.zeros(1)), i)
    images, batches, seconds = monitor._timed
    # Timed: steps 2-3, 6, 10-12 and 14-15 (step 9 starts its epoch's clock); the meter's window is full from step 6.
    assert images == batches == 8 and seconds > 0
    assert logged.count("perf/images_per_sec") == 3


class _Clocked(SpeedMonitor):
    """A SpeedMonitor whose clock reads one second more at each reading: rates by counting, not by the clock."""

    def _now(self) -> float:
        self.ticks = getattr(self, "ticks", -1) + 1
        return float(self.ticks)


def _drive(monitor: SpeedMonitor, trainer: SimpleNamespace, batches: int, images: int = 1, validate_after: int = 0):
    """One epoch of ``batches`` training batches of ``images`` images; a validation after batch ``validate_after``."""
    module = SimpleNamespace(log=lambda name, value, **_: monitor.logged.append((name, value)))
    monitor.on_train_epoch_start(trainer, module)
    for i in range(batches):
        trainer.global_step += 1
        monitor.on_train_batch_end(trainer, module, None, (torch.zeros(images, 3, 2, 2), torch.zeros(images)), i)
        if i + 1 == validate_after:
            monitor.on_validation_start(trainer, module)


def _trainer(world_size: int = 1, log_every_n_steps: int = 4) -> SimpleNamespace:
    return SimpleNamespace(global_step=0, log_every_n_steps=log_every_n_steps, world_size=world_size,
                           precision="32-true", strategy=SimpleNamespace(root_device=torch.device("cpu")))  # fmt: skip


def test_a_validation_inside_an_epoch_is_not_timed_as_training() -> None:
    # val_check_interval 0.5: the validation after step 4 fell inside a timed interval and lowered images/s.
    monitor, trainer = _Clocked(), _trainer(log_every_n_steps=4)
    monitor.logged = []
    monitor.on_train_start(trainer, None)
    _drive(monitor, trainer, batches=8, validate_after=4)
    images, batches, _ = monitor._timed
    assert images == batches == 6  # steps 2-4, then 6-8: step 5 starts the clock again after the validation


def test_flops_are_this_processs_under_ddp() -> None:
    # Lightning's Throughput takes each process's FLOPs and adds the processes up itself: they were counted twice.
    monitor, trainer = _Clocked(window=1), _trainer(world_size=2, log_every_n_steps=1)
    monitor.logged, monitor.flops_per_image = [], 1e9
    monitor.on_train_start(trainer, None)
    _drive(monitor, trainer, batches=3, images=8)
    logged = dict(monitor.logged)
    assert logged["perf/images_per_sec"] == 16  # 8 images a second on each of 2 processes
    assert logged["perf/tflops_per_sec"] == pytest.approx(8e9 * 1e-12)  # per device: 8 images of 1 GFLOP a second


def test_the_runs_peak_memory_outlives_each_epochs_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each epoch resets CUDA's peak for its own figure; the run card read CUDA's counter, so it got the last epoch's.
    peaks = iter([5 * 2**30, 3 * 2**30])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: next(peaks))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monitor, module = SpeedMonitor(), SimpleNamespace(log=lambda *_, **__: None)
    monitor._cuda = True  # the GPU's branch, without a GPU
    trainer = _trainer()
    for _ in range(2):
        monitor.on_train_epoch_end(trainer, module)
    assert monitor.peak_memory_bytes == 5 * 2**30


def test_a_window_of_no_intervals_is_refused_by_the_parser() -> None:
    # window=0 reached Lightning's Throughput, whose bare AssertionError stopped the fit at its start.
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(SpeedMonitor, "monitor")
    assert parser.parse_args(["--monitor.window", "3"]).monitor.window == 3
    with pytest.raises(Exception, match="window"):
        parser.parse_args(["--monitor.window", "0"])
