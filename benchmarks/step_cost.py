"""Where one training step of the default digits run goes: Lightning's loop, each default callback, the logger.

Every variant is a real ``vitlit fit`` of ``configs/digits.yaml`` (in memory, 18 steps an epoch) in this process,
timed step to step (from one ``on_train_batch_start`` to the next, so the loader, the transfer hook, the step, every
callback's hooks and the logging are all inside), the median over the epochs after the first. One variant drops
the logger, one each of the shared callbacks (`src/vitlit/defaults.yaml`), one all of them; the plain variant is a
hand-written PyTorch loop over the same in-memory batches and pipeline, model, AdamW, clipping and schedule. A part's
cost is the full run's step time minus the step time without it.

    python benchmarks/step_cost.py                  # prints one row per variant: ms a step, and its share
    python benchmarks/step_cost.py --epochs 6 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "configs" / "digits.yaml"


class StepTimer(Callback):
    """Seconds between the starts of consecutive training steps, epochs after the first only."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._last: float | None = None

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._last = None

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: object, i: int) -> None:
        now = time.perf_counter()
        if self._last is not None and trainer.current_epoch > 0:
            self.times.append(now - self._last)
        self._last = now


def fit_step(work: Path, epochs: int, extra: list[str]) -> float:
    """Median seconds a step of a digits fit with ``extra`` flags."""
    from vitlit.cli import main

    timer = StepTimer()
    main(
        [
            "fit",
            "--config",
            str(DIGITS),
            "--trainer.max_epochs",
            str(epochs),
            "--trainer.default_root_dir",
            str(work),
            "--trainer.enable_progress_bar",
            "false",
            "--data.source",
            "memory",
            *extra,
        ],
        callbacks=[timer],
    )
    return statistics.median(timer.times)


def plain_step(epochs: int) -> float:
    """Median seconds a step of a hand-written loop over the same batches, pipeline, model and optimizer."""
    from vitlit.data import DigitsDataModule
    from vitlit.model import ViTClassifier
    from vitlit.optim import WarmupCosineLR, param_groups

    config = yaml.safe_load(DIGITS.read_text())
    data = DigitsDataModule(**{**config["data"]["init_args"], "source": "memory"})
    data.setup("fit")
    model = ViTClassifier("test_vit", num_classes=10, img_size=32, patch_size=8, drop_path_rate=0.0)
    optimizer = torch.optim.AdamW(
        param_groups(model.net, skip=model.net.no_weight_decay()), **config["model"]["optimizer"]["init_args"]
    )  # the recipe's: lr, decay, fused
    loader = data.train_dataloader()
    scheduler = WarmupCosineLR(optimizer, warmup_steps=0.1, total_steps=epochs * len(loader))
    criterion, pipeline, times = nn.CrossEntropyLoss(label_smoothing=0.1), data.device_transform(True), []
    for epoch in range(epochs):
        last = None
        for images, targets in loader:
            now = time.perf_counter()
            if last is not None and epoch > 0:
                times.append(now - last)
            last = now
            loss = criterion(model.net(pipeline(images)), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.net.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="every variant this many times; the median is shown")
    args = parser.parse_args()
    shared = yaml.safe_load((ROOT / "src" / "vitlit" / "defaults.yaml").read_text())["trainer"]["callbacks"]
    name = lambda c: (c if isinstance(c, str) else c["class_path"]).rsplit(".", 1)[-1]  # noqa: E731
    flow = lambda callbacks: yaml.safe_dump(callbacks, default_flow_style=True).strip()  # noqa: E731
    without_lr = flow([c for c in shared if name(c) != "LearningRateMonitor"])  # it needs a logger
    variants = {"all (the digits run)": [],
                "no logger (nor LearningRateMonitor, which needs one)": ["--trainer.logger", "false",
                                                                         "--trainer.callbacks", without_lr],
                "no callbacks": ["--trainer.callbacks", "[]", "--trainer.enable_checkpointing", "false"]}  # fmt: skip
    for i, callback in enumerate(shared):
        kept = [c for j, c in enumerate(shared) if j != i]
        label = f"without {name(callback)}" + (" (best)" if i == 0 else " (last)" if i == 1 else "")
        variants[label] = ["--trainer.callbacks", flow(kept)]
    seconds: dict[str, list[float]] = {label: [] for label in [*variants, "plain PyTorch loop"]}
    with tempfile.TemporaryDirectory(prefix="vitlit-steps-") as tmp:
        for r in range(args.rounds):  # rounds alternate the variants, so each sees the same machine state
            for label, flags in variants.items():
                seconds[label].append(fit_step(Path(tmp) / f"{r}-{len(seconds[label])}", args.epochs, flags))
            seconds["plain PyTorch loop"].append(plain_step(args.epochs))
    full = statistics.median(seconds["all (the digits run)"])
    print(f"| variant | ms a step (median of {args.rounds}) | vs the digits run |\n| --- | --- | --- |")
    for label, values in seconds.items():
        step = statistics.median(values)
        print(f"| {label} | {step * 1e3:.2f} | {step / full:.3f} ({(full - step) * 1e3:+.2f} ms) |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
