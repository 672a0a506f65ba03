"""The learning-rate schedule, the weight-decay groups, and the model's wiring of both into the Trainer."""

from __future__ import annotations

import itertools
from pathlib import Path

import lightning as L
import pytest
import timm
import torch

from vitlit import ImageFolderDataModule, ViTClassifier
from vitlit.errors import ConfigError
from vitlit.optim import WarmupCosineLR, param_groups


def _lrs(scheduler: WarmupCosineLR, steps: int) -> list[float]:
    lrs = []
    for _ in range(steps):
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.optimizer.step()
        scheduler.step()
    return lrs


def _sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


def test_warmup_then_cosine_to_the_floor() -> None:
    lrs = _lrs(WarmupCosineLR(_sgd(), warmup_steps=4, total_steps=14, min_lr_ratio=0.1), 16)
    assert lrs[:5] == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])  # linear warmup, then the peak
    assert lrs[9] == pytest.approx(0.1 + 0.9 * 0.5)  # half way through the cosine
    assert lrs[14:] == pytest.approx([0.1, 0.1])  # the floor, held after the end
    assert all(a >= b for a, b in itertools.pairwise(lrs[4:]))  # monotone decay


def test_a_decay_fraction_holds_the_peak_until_the_last_part_of_the_run() -> None:
    """Warmup-stable-decay (the time budget's shape): the cosine spans the last 20% of the 20 steps after warmup."""
    lrs = _lrs(WarmupCosineLR(_sgd(), warmup_steps=4, total_steps=24, min_lr_ratio=0.1, decay_fraction=0.2), 26)
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[4:21] == pytest.approx([1.0] * 17)  # at the peak until step 20 = 24 - 0.2 * 20
    assert lrs[22] == pytest.approx(0.1 + 0.9 * 0.5)  # half way through the 4 decaying steps
    assert lrs[24:] == pytest.approx([0.1, 0.1])
    assert all(a >= b for a, b in itertools.pairwise(lrs[4:]))


def test_a_warmup_share_follows_new_lengths_until_it_ends_and_then_stays() -> None:
    """A time budget's later, longer estimate moved a share's warmup past the current step: the rate at its peak fell
    back into the warmup (fifteenth session's read)."""
    schedule = WarmupCosineLR(_sgd(), warmup_steps=0.1, decay_fraction=0.2)
    schedule.set_total_steps(100)
    schedule.set_total_steps(200)  # inside the warmup (no step yet): the share follows
    assert schedule.warmup_steps == 20
    _lrs(schedule, 30)
    assert schedule.set_total_steps(600) is None and schedule.warmup_steps == 20
    assert schedule.get_last_lr()[0] == pytest.approx(1.0) == schedule.optimizer.param_groups[0]["lr"]


def test_schedule_position_survives_state_dict() -> None:
    first = WarmupCosineLR(_sgd(), warmup_steps=2, total_steps=10)
    _lrs(first, 6)
    second = WarmupCosineLR(_sgd(), warmup_steps=2)
    second.load_state_dict(first.state_dict())
    assert second.total_steps == 10 and second.last_epoch == first.last_epoch
    assert _lrs(second, 3) == pytest.approx(_lrs(first, 3))


def test_no_weight_decay_on_biases_norms_and_embeddings() -> None:
    net = timm.create_model("test_vit", num_classes=10, img_size=32, patch_size=4)
    decay, no_decay = param_groups(net, skip=net.no_weight_decay())
    names = {id(p): n for n, p in net.named_parameters()}
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert no_decay["weight_decay"] == 0.0 and "weight_decay" not in decay  # the optimizer's value applies
    assert {"pos_embed", "cls_token", "norm.weight", "head.bias", "blocks.0.attn.qkv.bias"} <= no_decay_names
    assert {"head.weight", "blocks.0.attn.qkv.weight", "patch_embed.proj.weight"}.isdisjoint(no_decay_names)
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(net.parameters()))
    optimizer = torch.optim.AdamW([decay, no_decay], lr=1e-3, weight_decay=0.05)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.05, 0.0]
    assert [g["name"] for g in optimizer.param_groups] == ["decay", "no_decay"]  # LearningRateMonitor's labels


def test_layer_decay_scales_learning_rates_by_depth() -> None:
    model = ViTClassifier("test_vit", img_size=32, patch_size=4, layer_decay=0.5,  # 6 blocks
                          optimizer=lambda groups: torch.optim.AdamW(groups, lr=1.0, weight_decay=0.05),
                          scheduler=lambda opt: WarmupCosineLR(opt, warmup_steps=0, total_steps=10))  # fmt: skip
    model.trainer = L.Trainer(logger=False, enable_checkpointing=False)  # the model scales the rates it configures
    optimizer, net = model.configure_optimizers()["optimizer"], model.net
    lr_of = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    decay_of = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    assert lr_of[id(net.head.weight)] == 1.0
    assert lr_of[id(net.blocks[5].mlp.fc1.weight)] == 0.5
    assert lr_of[id(net.blocks[0].mlp.fc1.weight)] == 0.5**6
    assert lr_of[id(net.patch_embed.proj.weight)] == lr_of[id(net.pos_embed)] == 0.5**7
    assert decay_of[id(net.blocks[0].mlp.fc1.weight)] == 0.05 and decay_of[id(net.pos_embed)] == 0.0
    assert len(lr_of) == len(list(net.parameters()))


def _fit(digits_dir: Path, tmp_path: Path, **trainer_kwargs) -> ViTClassifier:
    model = ViTClassifier(
        "test_vit",
        img_size=32,
        patch_size=4,
        scheduler=lambda opt: WarmupCosineLR(opt, warmup_steps=1, min_lr_ratio=0.2),
    )
    data = ImageFolderDataModule(digits_dir, img_size=32, batch_size=8, num_workers=0)
    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        limit_val_batches=1,
        **trainer_kwargs,
    )
    trainer.fit(model, data)
    return model


def test_model_steps_the_schedule_per_optimizer_step_over_the_whole_run(digits_dir: Path, tmp_path: Path) -> None:
    # 4 batches x 2 epochs with accumulation 2 = 4 optimizer steps: the schedule must span exactly those.
    model = _fit(digits_dir, tmp_path, max_epochs=2, limit_train_batches=4, accumulate_grad_batches=2)
    scheduler = model.lr_schedulers()
    assert scheduler.total_steps == 4 and scheduler.last_epoch == 4
    assert scheduler.get_last_lr()[0] == pytest.approx(0.2 * 5e-4)  # the floor of the default AdamW lr


def test_unbounded_run_cannot_size_the_schedule(digits_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"max_epochs=-1.*max_steps=-1"):
        _fit(digits_dir, tmp_path, max_epochs=-1, limit_train_batches=2)
