"""Choosing a model and patch size for small images: tokens, parameters, FLOPs, memory and speed of each choice.

A ViT's cost follows its token count, (img_size / patch_size)^2 + 1, and its width. At 32 px the ImageNet models'
patch 16 leaves 4 tokens (too coarse to learn CIFAR well); patch 4 gives 64, patch 2 gives 256 at 4x the attention
cost. Each choice is trained for a few AdamW steps at batch 16 in a fresh process (`benchmarks/memory.py`'s
measurement: the memory a training step adds above weights, gradients and optimizer state, and its median time).

    python benchmarks/model_choice.py            # one line per choice, then the Markdown table of docs/training.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import timm
import torch

from vitlit.model import ViTClassifier
from vitlit.runs.monitor import flops_per_image

#: (timm model, image size, patch size): the recipes' choices and their neighbours.
CHOICES = [
    ("vit_tiny_patch16_224", 32, 8),
    ("vit_tiny_patch16_224", 32, 4),
    ("vit_tiny_patch16_224", 32, 2),
    ("vit_small_patch16_224", 32, 4),
    ("vit_small_patch16_224", 224, 16),
    ("vit_base_patch16_224", 224, 16),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--only", type=int, default=0, help="measure the first N choices only (0: all)")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    memory = Path(__file__).with_name("memory.py")
    rows = []
    for model, size, patch in CHOICES[: args.only or None]:
        with torch.device("meta"):
            params = sum(p.numel() for p in timm.create_model(model, img_size=size, patch_size=patch).parameters())
        flops = flops_per_image(ViTClassifier(model, num_classes=10, img_size=size, patch_size=patch))
        command = [sys.executable, str(memory), "--one", "off", "--model", model, "--img-size", str(size),
                   "--patch-size", str(patch), "--batch-size", str(args.batch_size), "--steps", str(args.steps),
                   "--device", device]  # fmt: skip
        step = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        tokens = (size // patch) ** 2 + 1
        row = {
            "choice": f"{model.split('_patch')[0]}, {size} px, patch {patch}",
            "tokens": tokens,
            "params_m": params / 1e6,
            "gflops_per_image": flops / 1e9,
            "step_gib": step["extra_bytes"] / 2**30,
            "images_per_sec": args.batch_size / step["seconds"],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{device}, batch {args.batch_size}, fp32, AdamW; step memory = what a training step adds")
    print("| choice | tokens | parameters | GFLOPs per image (train) | step memory | training images/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['choice']} | {r['tokens']} | {r['params_m']:.1f} M | {r['gflops_per_image']:.2f} | "
              f"{r['step_gib']:.2f} GiB | {r['images_per_sec']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
