"""Throughput, model FLOP utilisation and peak device memory in TensorBoard, without a per-step sync.

Lightning's ThroughputMonitor synchronises the GPU after every training batch so that its clock is right; for a
small ViT whose step takes a few milliseconds that stall costs a visible share of the throughput it reports. This
callback does the same arithmetic with the same library pieces (`lightning.fabric.utilities.throughput`: Throughput,
get_available_flops, with the H200's dense peak added) but reads the clock only when the logger writes (every
``log_every_n_steps``), after one synchronise, and counts images in between from the batch shapes (no sync).
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

import timm
import torch
from lightning.fabric.utilities.throughput import Throughput as ThroughputWindow
from lightning.fabric.utilities.throughput import get_available_flops, measure_flops
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only

from vitlit.types import PositiveInt

#: Compute dtype of each Trainer precision (the device's peak FLOP/s depends on it; autocast uses it).
COMPUTE_DTYPE = {
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "16-mixed": torch.float16,
    "16-true": torch.float16,
    "32-true": torch.float32,
}

#: Dense peak FLOP/s of chips whose names Lightning's table (``lightning.fabric.utilities.throughput``, 2.6) does not
#: resolve, or resolves to figures with sparsity. The H200 is the H100 SXM's GH100 chip at the same clocks with more
#: memory: NVIDIA's datasheet gives it the same dense tensor-core peaks (its 1,979 TFLOP/s bf16 are "with sparsity",
#: which is what Lightning's "h200 sxm1" entry holds). CUDA reports it as plain "NVIDIA H200".
DENSE_PEAK_FLOPS: dict[str, dict[torch.dtype | str, float]] = {
    "h200": {
        torch.float64: 33.5e12,
        torch.float32: 66.9e12,
        "tfloat32": 494.7e12,
        torch.bfloat16: 989.4e12,
        torch.float16: 989.4e12,
    },
}


@functools.lru_cache(maxsize=16)
def _flops(model_name: str, net_kwargs: tuple[tuple[str, Any], ...]) -> int:
    """Forward + backward FLOPs of one image, counted on the meta device; about a second, so counted once a process."""
    kwargs = dict(net_kwargs)
    with torch.device("meta"):
        net = timm.create_model(model_name, pretrained=False, **kwargs)
        images = torch.empty(1, kwargs["in_chans"], kwargs["img_size"], kwargs["img_size"])
    return measure_flops(net, lambda: net(images), lambda logits: logits.sum())


def flops_per_image(model: LightningModule) -> int:
    """Model FLOPs of one training image, forward and backward, counted on the meta device (no memory).

    For a `vitlit.ViTClassifier` (its timm name and ``net_kwargs``). Attention is counted as PyTorch's FLOP counter
    counts ``scaled_dot_product_attention``; augmentation and the optimizer are not model FLOPs.
    """
    return _flops(model.hparams.model_name, tuple(sorted(model.net_kwargs().items())))


def available_flops(device: torch.device, dtype: torch.dtype) -> float | None:
    """The device's dense peak FLOP/s for ``dtype`` (MFU's denominator), or ``None`` where it is not known.

    Lightning's ``get_available_flops`` where it knows the chip; `DENSE_PEAK_FLOPS` first for chips it does not.
    fp32 matrix products count at the TF32 peak when ``torch.set_float32_matmul_precision`` allows TF32, as Lightning
    counts them.
    """
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device).lower()
        for chip, peaks in DENSE_PEAK_FLOPS.items():
            if chip in name:
                tf32 = dtype == torch.float32 and torch.get_float32_matmul_precision() != "highest"
                return peaks.get("tfloat32" if tf32 else dtype)
    return get_available_flops(device, dtype)


class SpeedMonitor(Callback):
    """Log training images/s, achieved TFLOP/s and MFU every logging step, and peak device memory every epoch.

    Named apart from Lightning's ``ThroughputMonitor`` (which syncs every step) and its ``Throughput`` meter (used
    inside). FLOPs are counted per image rather than per batch (Lightning's ``flops_per_batch``), because the images
    between two logging steps are counted from the batch shapes, whatever their size.

    Logged: ``perf/images_per_sec`` (all processes together under DDP); ``perf/tflops_per_sec`` per device (model
    FLOPs of forward and backward, counted once per image by `flops_per_image` for a ViTClassifier); ``perf/mfu``,
    the fraction of the device's peak for the run's precision, where Lightning knows the chip (A100, H100, H200,
    ...); and per epoch ``perf/peak_memory_gib`` (``torch.cuda.max_memory_allocated``, CUDA only). The rates
    average the last ``window`` logging intervals; each epoch's clock starts after its first batch, so validation
    and data-loader start-up are not counted as training time.

    Args:
        window: Logging intervals the rates are averaged over (with ``log_every_n_steps: 50`` and ``window: 2``, the
            last 100 steps).
    """

    def __init__(self, window: int = 2) -> None:
        self.window = window
        self.flops_per_image: int | None = None
        self.available_flops: float | None = None
        self.last: dict[str, float] = {}
        self._meter: ThroughputWindow | None = None
        # Since the clock was last read: images and batches; in all timed intervals: images, batches and seconds.
        self._images = self._batches = 0
        self._timed_images = self._timed_batches = 0
        self._timed_seconds = 0.0
        self._t0: float | None = None
        self._logged_step = -1
        self._world_size = 1

    @rank_zero_only
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.flops_per_image = flops_per_image(pl_module) if hasattr(pl_module, "net_kwargs") else None
        dtype = COMPUTE_DTYPE.get(str(trainer.precision), torch.float32)
        self.available_flops = available_flops(trainer.strategy.root_device, dtype)
        # window + 1 points span `window` intervals.
        self._meter = ThroughputWindow(
            available_flops=self.available_flops, world_size=trainer.world_size, window_size=self.window + 1
        )
        self._world_size = trainer.world_size
        # The meter's first point: no time, no images. A run with only `window` logging steps (two epochs of a
        # short data set, logged once per epoch) then has its full window and its rates.
        self._meter.update(time=0.0, batches=0, samples=0, flops=0 if self.flops_per_image is not None else None)
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.strategy.root_device)

    @rank_zero_only
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._t0 = None  # restart the clock after the first batch of the epoch

    def _now(self, trainer: Trainer) -> float:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()  # the clock must see the queued work finished
        return time.perf_counter()

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._meter is None:
            return
        if self._t0 is None:
            # The clock starts after the epoch's first batch (one sync per epoch): loader start-up, the first
            # batch's allocations and validation are not training time, and an epoch of a single logging interval
            # is still measured.
            self._t0, self._images, self._batches = self._now(trainer), 0, 0
            return
        images = batch[0] if isinstance(batch, (list, tuple)) else batch
        self._images += len(images)
        self._batches += 1
        step = trainer.global_step
        if step % trainer.log_every_n_steps or step == self._logged_step:
            return  # not a logging step, or one still accumulating gradients
        self._logged_step = step
        now = self._now(trainer)  # one sync per logging step
        t0, self._t0 = self._t0, now
        self._timed_images += self._images
        self._timed_batches += self._batches
        self._timed_seconds += now - t0
        # The meter takes the FLOPs of all processes (it divides by world_size for the per-device rate and MFU);
        # under DDP every process runs batches of the same size, so the main one's count stands for each.
        world = trainer.world_size
        flops = self.flops_per_image * self._images * world if self.flops_per_image is not None else None
        self._images = self._batches = 0
        self._meter.update(
            time=self._timed_seconds, batches=self._timed_batches, samples=self._timed_images, flops=flops
        )
        metrics = self._meter.compute()
        names = {
            # All processes together under DDP (the meter scales the main one's rate by world_size), else this one.
            ("samples_per_sec" if world > 1 else "device/samples_per_sec"): ("perf/images_per_sec", 1.0),
            "device/flops_per_sec": ("perf/tflops_per_sec", 1e-12),
            "device/mfu": ("perf/mfu", 1.0),
        }
        self.last = {name: metrics[key] * scale for key, (name, scale) in names.items() if key in metrics}
        for name, value in self.last.items():
            pl_module.log(name, value, on_step=True, on_epoch=False)

    @property
    def average_images_per_sec(self) -> float | None:
        """Training images per second over every timed interval of the run so far (all processes), or ``None``.

        The run card's figure: the whole run's rate, not the last window's, and known from the first logging step.
        """
        if self._timed_seconds <= 0:
            return None
        return self._timed_images * self._world_size / self._timed_seconds

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        device = trainer.strategy.root_device
        if device.type != "cuda":
            return
        self.peak_memory_gib = torch.cuda.max_memory_allocated(device) / 2**30
        pl_module.log("perf/peak_memory_gib", self.peak_memory_gib, on_step=False, on_epoch=True)
        torch.cuda.reset_peak_memory_stats(device)


class WeightHistograms(Callback):
    """Log a histogram of every weight tensor of the network to TensorBoard at the end of every ``every_n_epochs``.

    The ViT-B/16 write-up watches them to see blocks that stop learning (a frozen distribution) or blow up. Off by
    default (a histogram per tensor per epoch grows the event file):
    ``--trainer.callbacks+=vitlit.runs.monitor.WeightHistograms``.
    Needs the TensorBoard logger (the default); with another logger it does nothing, and says so once.

    Args:
        every_n_epochs: Epochs between two sets of histograms.
    """

    def __init__(self, every_n_epochs: PositiveInt = 1) -> None:
        self.every_n_epochs = int(every_n_epochs)
        self._warned = False

    @rank_zero_only
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        writer = getattr(trainer.logger, "experiment", None)
        if not hasattr(writer, "add_histogram"):
            if not self._warned:
                self._warned = True
                print(
                    "vitlit: WeightHistograms needs the TensorBoard logger; no histograms are written", file=sys.stderr
                )
            return
        for name, param in pl_module.named_parameters():
            if param.ndim > 1:  # matrices and convolutions; biases and norms say little
                writer.add_histogram(f"weights/{name}", param.detach().float().cpu(), trainer.global_step)
