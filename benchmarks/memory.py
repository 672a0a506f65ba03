"""Gradient checkpointing: the memory a training step needs, and its time, with and without it.

ViT-S/16 at 224 px, batch 16, AdamW, fp32 (``--model``, ``--img-size``, ``--batch-size``). Each setting runs in a
fresh process: on a GPU the peak is ``torch.cuda.max_memory_allocated`` during the step; on the CPU, which has no
allocator statistics, a thread samples the process's resident memory every millisecond, and the peak is counted
above the memory held just before the step (weights, gradients and optimizer state from a first step), so the
figure is what the step itself adds: activations and temporaries, which checkpointing is about.

    python benchmarks/memory.py   # last line: checkpointing memory ratio=<with/without> time ratio=<with/without>

Goal (issue 12): memory ratio <= 0.6 at time ratio <= 1.4 (the 8 GB write-up: 4.1 of 7.8 GB at 0.9x speed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import timm
import torch


def resident_bytes() -> int:
    """This process's resident memory (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakSampler:
    """The largest resident memory seen by a thread sampling every millisecond while in use."""

    def __enter__(self) -> PeakSampler:
        self.peak, self._stop = resident_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, resident_bytes())
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, resident_bytes())


def measure(
    model: str, img_size: int, batch_size: int, checkpointing: bool, steps: int, device: str, patch_size: int = 0
) -> dict:
    """One setting: the extra memory of a training step (bytes) and the median seconds per step."""
    torch.manual_seed(0)
    kwargs = {"patch_size": patch_size} if patch_size else {}
    net = timm.create_model(model, img_size=img_size, num_classes=10, **kwargs).to(device)
    net.set_grad_checkpointing(checkpointing)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    images = torch.randn(batch_size, 3, img_size, img_size, device=device)
    targets = torch.randint(0, 10, (batch_size,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=False)  # keep the gradients allocated: they are not what is measured
        torch.nn.functional.cross_entropy(net(images), targets).backward()
        optimizer.step()

    step()  # gradients and optimizer state now exist
    times, extra = [], 0
    for _ in range(steps):
        if device == "cuda":
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            extra = max(extra, torch.cuda.max_memory_allocated() - before)
        else:
            before = resident_bytes()
            with PeakSampler() as sampler:
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
            extra = max(extra, sampler.peak - before)
    return {"checkpointing": checkpointing, "extra_bytes": extra, "seconds": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--patch-size", type=int, default=0, help="0: the model's own")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--one", choices=["on", "off"], help=argparse.SUPPRESS)  # a child process's single setting
    args = parser.parse_args()
    if args.one is not None:
        result = measure(
            args.model, args.img_size, args.batch_size, args.one == "on", args.steps, args.device, args.patch_size
        )
        print(json.dumps(result))
        return
    results = {}
    for setting in ("off", "on"):  # a fresh process each: resident memory never shrinks back fully
        sizes = [
            "--img-size",
            str(args.img_size),
            "--batch-size",
            str(args.batch_size),
            "--steps",
            str(args.steps),
            "--patch-size",
            str(args.patch_size),
        ]  # issue 45: the children measured patch 16 whatever was asked
        command = [sys.executable, __file__, "--one", setting, "--model", args.model, *sizes, "--device", args.device]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        results[setting] = json.loads(out.strip().splitlines()[-1])
        r = results[setting]
        print(f"{args.model} at {args.img_size} px, batch {args.batch_size}, {args.device}, checkpointing {setting}: "
              f"step adds {r['extra_bytes'] / 2**30:.2f} GiB, {r['seconds']:.2f} s per step")  # fmt: skip
    memory = results["on"]["extra_bytes"] / results["off"]["extra_bytes"]
    speed = results["on"]["seconds"] / results["off"]["seconds"]
    print(f"checkpointing memory ratio={memory:.2f} time ratio={speed:.2f}")


if __name__ == "__main__":
    main()
