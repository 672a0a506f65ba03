"""One weight-EMA update after an optimizer step: Lightning's per-tensor ``avg_fn`` against vitlit's foreach EMA.

Lightning's ``EMAWeightAveraging`` builds ``AveragedModel(avg_fn=get_ema_avg_fn(decay))``: a Python loop over the
weights, three kernels and two temporaries each. `vitlit.runs.ema.EMA` builds it with
``multi_avg_fn=get_ema_multi_avg_fn(decay)``, as PyTorch's documentation does: one foreach lerp. Both average the
same weights (tests/test_ema.py); this prints what one update costs, the median of ``--repeats``.

    python benchmarks/ema.py                      # test_vit (the digits recipe) and ViT-S/16, on the CPU
    python benchmarks/ema.py --device cuda        # on a GPU
"""

from __future__ import annotations

import argparse
import statistics
import time

import timm
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn, get_ema_multi_avg_fn

MODELS = {
    "test_vit": {"img_size": 32, "patch_size": 8, "num_classes": 10},  # the digits recipe's
    "vit_small_patch16_224": {"num_classes": 10},
}


def update_ms(averaged: AveragedModel, model: torch.nn.Module, repeats: int, device: torch.device) -> float:
    """The median time of one ``update_parameters`` in milliseconds."""
    averaged.update_parameters(model)  # the first update copies; the average starts after it
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        averaged.update_parameters(model)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    device = torch.device(args.device)
    for name, kwargs in MODELS.items():
        model = timm.create_model(name, **kwargs).to(device)
        per_tensor = update_ms(AveragedModel(model, avg_fn=get_ema_avg_fn(0.998), use_buffers=True), model,
                               args.repeats, device)  # fmt: skip
        foreach = update_ms(AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.998), use_buffers=True), model,
                            args.repeats, device)  # fmt: skip
        print(f"{name}: Lightning's EMAWeightAveraging {per_tensor:.2f} ms an update, vitlit's EMA {foreach:.2f} ms "
              f"({per_tensor / foreach:.1f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
