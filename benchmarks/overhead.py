"""What Lightning and vitlit cost per step: a hand-written PyTorch loop against ``Trainer.fit`` of ViTClassifier.

Both train the same ViT on the same synthetic batches (an in-memory tensor data set through a DataLoader without
workers) with the same AdamW, warmup-cosine schedule, label-smoothed loss and gradient clipping; the plain loop is
the classic ``train_epoch`` (autocast + GradScaler where the precision asks for them). vitlit's side adds what a
real run has: torchmetrics train accuracy, ``self.log`` of the loss, the learning-rate schedule stepped by Lightning,
and the configs' NonFiniteGuard and SpeedMonitor callbacks (checkpointing, logger and progress bar off, as they are
not per-step costs). The two alternate epoch by epoch inside one process: every vitlit epoch is followed by one
plain epoch, run from a callback, so both see the same machine state. The figure is the median epoch time of each.

    python benchmarks/overhead.py                        # CPU, test_vit; last line: overhead ratio=<vitlit/plain>
    python benchmarks/overhead.py --device cuda --precision bf16-mixed --model vit_small_patch16_224
    ... --no-callbacks     # Lightning and the model alone, without the configs' NonFiniteGuard and SpeedMonitor
    ... --sync-debug       # CUDA: also print vitlit's host syncs per step and the code that issued them
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings
from collections import Counter
from contextlib import nullcontext

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from vitlit.model import ViTClassifier
from vitlit.optim import WarmupCosineLR, param_groups
from vitlit.runs.monitor import COMPUTE_DTYPE, SpeedMonitor
from vitlit.runs.nonfinite import NonFiniteGuard


def make_model(args: argparse.Namespace) -> ViTClassifier:
    return ViTClassifier(
        args.model,
        num_classes=10,
        img_size=args.img_size,
        patch_size=args.patch_size,
        drop_path_rate=0.0,  # no randomness in the model: both sides compute the same function
        optimizer=lambda params: torch.optim.AdamW(params, lr=5e-4, weight_decay=0.05, fused=args.fused),
        scheduler=lambda optimizer: WarmupCosineLR(optimizer, warmup_steps=10, total_steps=10_000),
    )


def make_loader(args: argparse.Namespace) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(args.batches * args.batch_size, 3, args.img_size, args.img_size, generator=generator)
    targets = torch.randint(0, 10, (len(images),), generator=generator)
    pin = args.device == "cuda"
    return DataLoader(TensorDataset(images, targets), batch_size=args.batch_size, shuffle=True, pin_memory=pin)


class PlainLoop:
    """The classic PyTorch training epoch: forward under autocast, scaled backward, clip, step, schedule."""

    def __init__(self, model: ViTClassifier, args: argparse.Namespace) -> None:
        self.device = torch.device(args.device)
        self.net = copy.deepcopy(model.net).to(self.device)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
        no_decay = self.net.no_weight_decay()
        self.optimizer = torch.optim.AdamW(
            param_groups(self.net, skip=no_decay), lr=5e-4, weight_decay=0.05, fused=args.fused
        )
        self.scheduler = WarmupCosineLR(self.optimizer, warmup_steps=10, total_steps=10_000)
        mixed = args.precision.endswith("-mixed")
        dtype = COMPUTE_DTYPE[args.precision]
        self.autocast = torch.autocast(self.device.type, dtype=dtype) if mixed else nullcontext()
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=args.precision == "16-mixed")
        self.loader = make_loader(args)

    def train_epoch(self) -> float:
        """One epoch over the loader; returns its wall time in seconds."""
        start = time.perf_counter()
        self.net.train()
        for images, targets in self.loader:
            images = images.to(self.device, non_blocking=True)
            targets = targets.to(self.device, non_blocking=True)
            self.optimizer.zero_grad(set_to_none=True)
            with self.autocast:
                loss = self.criterion(self.net(images), targets)
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start


class Alternate(L.Callback):
    """Time each vitlit epoch, then run one plain epoch, so the two alternate in the same process."""

    def __init__(self, plain: PlainLoop) -> None:
        self.plain = plain
        self.vitlit_times: list[float] = []
        self.plain_times: list[float] = []
        self._start = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()
        self.vitlit_times.append(time.perf_counter() - self._start)
        self.plain_times.append(self.plain.train_epoch())


class SyncCounter(L.Callback):
    """Count host synchronisations inside vitlit's second epoch, away from its ends (PyTorch's sync debug mode).

    A sync makes the CPU wait for the GPU; the GPU then idles while the next step is prepared (batch collation,
    hooks). Prints syncs per step and where in Python they were issued.
    """

    def __init__(self, batches: int) -> None:
        self.first, self.last = min(3, batches // 2), max(batches - 3, batches // 2 + 1)
        self._catcher: warnings.catch_warnings | None = None
        self._records: list[warnings.WarningMessage] = []

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object, i: int) -> None:
        if trainer.current_epoch != 1:
            return
        if i == self.first:
            self._catcher = warnings.catch_warnings(record=True)
            self._records = self._catcher.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        elif i == self.last and self._catcher is not None:
            torch.cuda.set_sync_debug_mode("default")
            self._catcher.__exit__(None, None, None)
            self._catcher = None
            syncs = [r for r in self._records if "synchroniz" in str(r.message)]
            print(f"vitlit syncs per step={len(syncs) / (self.last - self.first):.2f}")
            for place, count in Counter(f"{r.filename}:{r.lineno}" for r in syncs).most_common(5):
                print(f"  {count} at {place}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="test_vit", help="timm model (test_vit: 0.26 M parameters)")
    parser.add_argument("--img-size", type=int, default=32)
    parser.add_argument("--patch-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=40, help="batches per epoch")
    parser.add_argument("--epochs", type=int, default=7, help="alternating rounds; the first is a warm-up")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precision", default="32-true", choices=["32-true", "16-mixed", "bf16-mixed"])
    parser.add_argument("--fused", action=argparse.BooleanOptionalAction, default=True, help="fused AdamW")
    parser.add_argument(
        "--callbacks",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="vitlit's side runs the configs' NonFiniteGuard and SpeedMonitor (--no-callbacks: Lightning + model only)",
    )
    parser.add_argument(
        "--sync-debug", action="store_true", help="CUDA: count vitlit's syncs per step and their source"
    )
    args = parser.parse_args()

    torch.manual_seed(0)
    model = make_model(args)
    plain = PlainLoop(model, args)
    alternate = Alternate(plain)
    trainer = L.Trainer(
        accelerator=args.device,
        devices=1,
        precision=args.precision,
        max_epochs=args.epochs,
        gradient_clip_val=1.0,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            *([SyncCounter(args.batches)] if args.sync_debug and args.device == "cuda" else []),
            *([NonFiniteGuard(), SpeedMonitor()] if args.callbacks else []),
            alternate,
        ],
    )
    trainer.fit(model, train_dataloaders=make_loader(args))

    # The first round pays for allocator warm-up and lazy initialisation on both sides.
    vitlit = statistics.median(alternate.vitlit_times[1:])
    plain_time = statistics.median(alternate.plain_times[1:])
    images = args.batches * args.batch_size
    print(f"model={args.model} device={args.device} precision={args.precision} images/epoch={images}")
    print(f"plain  median epoch {plain_time:.3f} s ({images / plain_time:,.0f} img/s)")
    print(f"vitlit median epoch {vitlit:.3f} s ({images / vitlit:,.0f} img/s)")
    print(f"overhead ratio={vitlit / plain_time:.3f}")


if __name__ == "__main__":
    main()
