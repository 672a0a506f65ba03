"""The private names of Lightning and PyTorch that vitlit uses (all in `vitlit.private`) still exist and work."""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from vitlit.private import set_checkpoint_interval, unscales_internally


def test_checkpoint_interval_can_be_changed_after_construction() -> None:
    callback = ModelCheckpoint(every_n_train_steps=1)
    assert "_every_n_train_steps" in vars(callback), "Lightning renamed ModelCheckpoint._every_n_train_steps"
    set_checkpoint_interval(callback, 7)
    assert callback._every_n_train_steps == 7


def test_fused_optimizers_are_recognised_as_unscaling_inside_their_step() -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert unscales_internally(torch.optim.AdamW(params, fused=True)), "torch renamed _step_supports_amp_scaling"
    assert not unscales_internally(torch.optim.AdamW(params, foreach=True))
