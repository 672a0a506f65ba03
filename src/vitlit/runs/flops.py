"""Model FLOPs per image and a device's peak FLOP/s: the two sides of model FLOP utilisation (MFU).

`vitlit.runs.monitor.SpeedMonitor` uses them on GPUs (the only devices whose peak is known); the benchmarks too.
"""

from __future__ import annotations

import functools
from typing import Any

import timm
import torch
from lightning.fabric.utilities.throughput import get_available_flops, measure_flops
from lightning.pytorch import LightningModule

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
