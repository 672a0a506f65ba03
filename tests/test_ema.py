"""vitlit's EMA averages the weights exactly as Lightning's EMAWeightAveraging does, with PyTorch's foreach update."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import EMAWeightAveraging

from vitlit.runs.ema import EMA


class Tiny(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)
        self.norm = torch.nn.BatchNorm1d(3)  # a buffer (running mean) is averaged too


def _averaged(callback: EMAWeightAveraging, module: LightningModule, steps: list[dict[str, torch.Tensor]]) -> dict:
    """The weights ``callback`` leaves in ``module`` after the optimizer steps that set ``steps``' weights."""
    callback.setup(SimpleNamespace(), module, "fit")
    for step, weights in enumerate(steps, start=1):
        module.load_state_dict(weights)
        callback.on_train_batch_end(SimpleNamespace(global_step=step), module, None, None, step - 1)
    callback.on_train_end(SimpleNamespace(), module)  # the average replaces the weights, as after a fit
    return {k: v.clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("every", [1, 2])
def test_the_average_is_lightnings(every: int) -> None:
    torch.manual_seed(0)
    module = Tiny()
    steps = []
    for _ in range(6):  # weights after each of six optimizer steps
        state = {k: v + torch.randn_like(v) if v.is_floating_point() else v + 1 for k, v in module.state_dict().items()}
        steps.append(state)
    ours = _averaged(EMA(decay=0.8, update_every_n_steps=every), copy.deepcopy(module), steps)
    lightnings = _averaged(EMAWeightAveraging(decay=0.8, update_every_n_steps=every), copy.deepcopy(module), steps)
    for name, value in lightnings.items():
        torch.testing.assert_close(ours[name], value, rtol=1e-6, atol=1e-6, msg=name)
    # An average, not the last weights: the test would pass for a callback that did nothing otherwise.
    assert not torch.allclose(ours["layer.weight"], steps[-1]["layer.weight"])


def test_an_update_is_a_few_kernels_whatever_the_weights() -> None:
    """What benchmarks/ema.py times, counted: one foreach lerp for every weight, where Lightning's runs three kernels
    per weight tensor (12x faster for ViT-S/16's 152 tensors on two cores, RESULTS.md: "Weight EMA")."""
    import timm
    from helpers.counting import Kernels

    class Wrapped(LightningModule):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.net = timm.create_model(name, img_size=32, patch_size=8, num_classes=10)

    counts = {}
    for name in ("test_vit", "vit_small_patch16_224"):
        for callback in (EMA(decay=0.9), EMAWeightAveraging(decay=0.9)):
            module = Wrapped(name)
            callback.setup(SimpleNamespace(), module, "fit")
            callback.on_train_batch_end(SimpleNamespace(global_step=1), module, None, None, 0)  # the first copies
            with Kernels() as kernels:
                callback.on_train_batch_end(SimpleNamespace(global_step=2), module, None, None, 1)
            tensors = len(module.state_dict())
            counts[name, type(callback).__name__] = kernels.total, tensors
    for name in ("test_vit", "vit_small_patch16_224"):
        ours, tensors = counts[name, "EMA"]
        lightnings, _ = counts[name, "EMAWeightAveraging"]
        assert ours == counts["test_vit", "EMA"][0] < 10 and lightnings >= 3 * tensors, counts
