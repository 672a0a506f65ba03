"""Callbacks that watch a run from inside the test process."""

from __future__ import annotations

import torch
from lightning.pytorch import Callback, LightningModule, Trainer


class WeightProbe(Callback):
    """Keep the weights as training starts (``before``) and as it ends (``after``), and the optimizers used."""

    def __init__(self) -> None:
        self.before: dict[str, torch.Tensor] = {}
        self.after: dict[str, torch.Tensor] = {}

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.before = {k: v.detach().float().cpu().clone() for k, v in pl_module.named_parameters()}

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.after = {k: v.detach().float().cpu().clone() for k, v in pl_module.named_parameters()}

    def changed(self) -> list[str]:
        """Names of the parameters that training changed."""
        return [k for k, v in self.before.items() if not torch.equal(v, self.after[k])]


# The Tensor methods that copy a value to the host: on a GPU each one waits for every queued kernel (a sync).
_HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu")


class HostReads(Callback):
    """Record every read of a tensor's value by the host from optimizer step ``first`` up to step ``last``.

    On a CPU nothing synchronises, but the same calls are what make a GPU wait, so counting them here shows what
    would sync each step there. ``reads`` holds the calling code's file and line for each read.
    """

    def __init__(self, first: int = 2, last: int = 8) -> None:
        self.first, self.last = first, last
        self.reads: list[str] = []
        self._saved: dict[str, object] = {}

    def _record(self, name: str):
        original = self._saved[name]

        def wrapper(tensor: torch.Tensor, *args: object, **kwargs: object) -> object:
            import traceback

            caller = traceback.extract_stack(limit=2)[0]
            self.reads.append(f"{name} at {caller.filename}:{caller.lineno}")
            return original(tensor, *args, **kwargs)

        return wrapper

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, *args: object) -> None:
        if trainer.global_step == self.first and not self._saved:
            for name in _HOST_READS:
                self._saved[name] = getattr(torch.Tensor, name)
                setattr(torch.Tensor, name, self._record(name))
        elif trainer.global_step == self.last:
            self._restore()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._restore()

    def _restore(self) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved = {}


class TrainableProbe(Callback):
    """Record, at the end of each training epoch, which parameters train and each optimizer group's learning rate."""

    def __init__(self) -> None:
        self.trainable: dict[int, set[str]] = {}
        self.lrs: dict[int, dict[str, float]] = {}
        self.scales: dict[str, float] = {}  # each group's lr_scale (layer decay)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        epoch = trainer.current_epoch
        self.trainable[epoch] = {n for n, p in pl_module.net.named_parameters() if p.requires_grad}
        self.lrs[epoch] = {g["name"]: g["lr"] for g in trainer.optimizers[0].param_groups}
        self.scales.update({g["name"]: g.get("lr_scale", 1.0) for g in trainer.optimizers[0].param_groups})


class StopAfterEpoch(Callback):
    """Stop the run cleanly at the end of training epoch ``epoch`` (its checkpoints are written), for resume tests."""

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.should_stop = True


class WaitForFile(Callback):
    """Hold the run at the start of training until the file ``path`` exists (or ``timeout`` seconds passed).

    Lets a test act while a run in another process is certainly in progress, instead of racing its length.

    Args:
        path: The file the test creates when the run may go on.
        timeout: Seconds to wait at most.
    """

    def __init__(self, path: str, timeout: float = 120.0) -> None:
        self.path = path
        self.timeout = timeout

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        import os
        import time

        deadline = time.monotonic() + self.timeout
        while not os.path.exists(self.path) and time.monotonic() < deadline:
            time.sleep(0.1)
