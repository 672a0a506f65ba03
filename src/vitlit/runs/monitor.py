"""Training speed in TensorBoard without a per-step sync: images/s, and on GPUs TFLOP/s, MFU and peak memory.

Lightning's ThroughputMonitor synchronises the GPU after every training batch so that its clock is right; for a
small ViT whose step takes a few milliseconds that stall costs a visible share of the throughput it reports. This
callback does the same arithmetic with the same library piece (`lightning.fabric.utilities.throughput.Throughput`)
but reads the clock only when the logger writes (every ``log_every_n_steps``), after one synchronise, and counts
images in between from the batch shapes.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import timm
import torch
from lightning.fabric.utilities.throughput import Throughput, get_available_flops, measure_flops
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only

from vitlit.config import PositiveInt

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
    """Log ``perf/images_per_sec`` every logging step; on a GPU also TFLOP/s, MFU and peak memory.

    The GPU's figures are ``perf/tflops_per_sec``, ``perf/mfu`` and, per epoch, ``perf/peak_memory_gib``. Images/s
    are all processes' together under DDP. TFLOP/s are model FLOPs of forward and backward per device
    (`vitlit.runs.monitor.flops_per_image`); MFU is their fraction of the device's peak for the run's precision, where
    the chip is known. The rates average the last ``window`` logging intervals; each epoch's clock starts after its
    first batch, so validation and data-loader start-up are not counted as training time.

    Args:
        window: Logging intervals the rates are averaged over (with ``log_every_n_steps: 50`` and ``window: 2``, the
            last 100 steps).
    """

    def __init__(self, window: PositiveInt = 2) -> None:
        self.window = window
        self.flops_per_image: int | None = None
        self.last: dict[str, float] = {}
        self.peak_memory_bytes = 0  # the run's peak CUDA memory over the epochs ended (each epoch resets CUDA's)
        self._meter: Throughput | None = None
        self._images = self._batches = 0  # since the clock was last read
        self._timed = [0, 0, 0.0]  # over every timed interval: images, batches, seconds
        self._t0: float | None = None
        self._logged_step = -1
        self._cuda = False

    @rank_zero_only
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        device, peak = trainer.strategy.root_device, None
        self._cuda = device.type == "cuda"
        if self._cuda and hasattr(pl_module, "net_kwargs"):  # FLOPs mean something where the peak is known
            self.flops_per_image = flops_per_image(pl_module)
            peak = available_flops(device, COMPUTE_DTYPE.get(str(trainer.precision), torch.float32))
            torch.cuda.reset_peak_memory_stats(device)
        # window + 1 points span `window` intervals; the first point has no time and no images.
        self._meter = Throughput(available_flops=peak, world_size=trainer.world_size, window_size=self.window + 1)
        self._meter.update(time=0.0, batches=0, samples=0, flops=0 if self.flops_per_image else None)

    @rank_zero_only
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._t0 = None  # the clock starts after the epoch's first batch

    @rank_zero_only
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._t0 = None  # a validation inside an epoch is not training time: the clock starts again after it

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()  # the clock must see the queued work finished
        return time.perf_counter()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, out: Any, batch: Any, i: int) -> None:
        if self._meter is None:
            return
        if self._t0 is None:  # one sync per epoch; an epoch of a single logging interval is still measured
            self._t0, self._images, self._batches = self._now(), 0, 0
            return
        self._images += len(batch[0] if isinstance(batch, (list, tuple)) else batch)
        self._batches += 1
        step = trainer.global_step
        if step % trainer.log_every_n_steps or step == self._logged_step:
            return  # not a logging step, or one still accumulating gradients
        now, world = self._now(), trainer.world_size  # one sync per logging step
        self._logged_step, self._t0, seconds = step, now, now - self._t0
        # Images and batches are counted over the same timed interval; an epoch's untimed tail adds neither.
        self._timed[0] += self._images
        self._timed[1] += self._batches
        self._timed[2] += seconds
        # This process's FLOPs: the meter counts every process's as its own (they run batches of the same size).
        flops = self.flops_per_image * self._images if self.flops_per_image else None
        self._images = self._batches = 0
        self._meter.update(time=self._timed[2], batches=self._timed[1], samples=self._timed[0], flops=flops)
        metrics = self._meter.compute()
        names = {("samples_per_sec" if world > 1 else "device/samples_per_sec"): ("perf/images_per_sec", 1.0),
                 "device/flops_per_sec": ("perf/tflops_per_sec", 1e-12), "device/mfu": ("perf/mfu", 1.0)}  # fmt: skip
        self.last = {name: metrics[key] * scale for key, (name, scale) in names.items() if key in metrics}
        for name, value in self.last.items():
            pl_module.log(name, value, on_step=True, on_epoch=False)
        self._world_size = world

    @property
    def average_images_per_sec(self) -> float | None:
        """Training images per second over the whole run so far (all processes), or ``None``: the run card's."""
        images, _, seconds = self._timed
        return images * getattr(self, "_world_size", 1) / seconds if seconds > 0 else None

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._cuda:
            device = trainer.strategy.root_device
            peak = torch.cuda.max_memory_allocated(device)
            pl_module.log("perf/peak_memory_gib", peak / 2**30, on_epoch=True)
            # Each epoch's peak is logged from CUDA's counter, reset here; the run's is kept for the run card.
            self.peak_memory_bytes = max(self.peak_memory_bytes, peak)
            torch.cuda.reset_peak_memory_stats(device)
