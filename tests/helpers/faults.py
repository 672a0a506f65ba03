"""Callbacks that inject faults into a training run in the test process: a NaN batch, and a probe of the weights."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import Logger


class PoisonBatch(Callback):
    """Fill the images of the batch at optimizer step ``step`` with NaN, so its loss and gradients are NaN.

    Also keeps a copy of the weights just before that batch (``before``) and just after it (``after``).

    Args:
        step: The optimizer step (``trainer.global_step``) whose batch is poisoned.
    """

    def __init__(self, step: int = 3) -> None:
        self.step = step
        self.poisoned = False
        self.before: dict[str, torch.Tensor] = {}
        self.after: dict[str, torch.Tensor] = {}

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step and not self.poisoned:
            self.poisoned = True
            self.before = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
            batch[0].fill_(float("nan"))

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        if self.poisoned and not self.after:
            self.after = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


class PoisonGradients(PoisonBatch):
    """Set one weight's gradient to NaN after the backward pass of step ``step``: a finite loss, a NaN gradient.

    What an overflow inside the backward pass leaves; the loss check cannot see it, only the gradients' norm.
    """

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step and not self.before:
            self.before = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}

    def on_after_backward(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.global_step == self.step and not self.poisoned:
            self.poisoned = True
            next(p for p in pl_module.parameters() if p.grad is not None).grad.view(-1)[0] = float("nan")


class DyingLogger(Logger):
    """A tracking service that stops answering after ``calls`` metric writes, as an MLflow server that died mid-run.

    Its ``finalize`` fails too, as MLflow's does then: Lightning's teardown chains that error to the first.
    """

    def __init__(self, calls: int = 3) -> None:
        super().__init__()
        self.calls = calls

    @property
    def name(self) -> str:
        return "dying"

    @property
    def version(self) -> str:
        return "0"

    @property
    def experiment(self) -> DyingLogger:
        return self

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls -= 1
        if self.calls < 0:
            raise ConnectionError("[Errno 111] Connection refused: the tracking server went away")

    def finalize(self, status: str) -> None:
        if self.calls < 0:
            raise ConnectionError("[Errno 111] Connection refused")
