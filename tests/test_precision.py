"""Every recipe trains as shipped: its precision, clipping, fused optimizer and callbacks; only data and model shrink.

On a CPU ``bf16-mixed`` stands in for ``16-mixed`` (CPUs have no fp16 autocast worth the name); the fp16 GradScaler
path itself is driven on the CPU through Lightning's MixedPrecision plugin. The tests marked ``cuda`` run every
config in its exact precision, compile included, with the real architectures; ``benchmarks/gpu.sh`` starts with
them, so the first run on a GPU finds any gap at once.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import timm
import torch
import yaml
from helpers.cli import CIFAR_RECIPES, cifar_args, no_warmup, run_cli
from helpers.probes import WeightProbe
from lightning.pytorch.plugins.precision import MixedPrecision

from vitlit import ImageFolderDataModule, ViTClassifier
from vitlit.config import DEFAULTS

BATCHES = 4  # training batches of the one epoch each recipe runs


def _shipped(config: Path) -> dict:
    return yaml.safe_load(config.read_text())


def _run_recipe(config: Path, cifar_dir: Path, root: Path, *device: str):
    """Fit one short epoch of ``config`` on the test CIFAR files with everything else as the file ships it."""
    dataset = "cifar100" if "cifar100" in config.stem else "cifar10"
    return run_cli(
        "fit", "--config", config, *cifar_args(dataset=dataset, cifar_dir=cifar_dir),
        "--trainer.default_root_dir", root, "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", BATCHES, "--trainer.limit_val_batches", "2",
        "--trainer.callbacks+=helpers.probes.WeightProbe", "--model.pretrained", "false", *device,
    )  # fmt: skip


_DEFAULT_CLIP = yaml.safe_load(DEFAULTS.read_text())["trainer"]["gradient_clip_val"]  # what recipes inherit


def _assert_trained_as_shipped(cli, config: Path, precision: str) -> None:
    shipped = _shipped(config)
    trainer = cli.trainer
    assert trainer.state.finished and trainer.precision == precision
    assert trainer.gradient_clip_val == shipped["trainer"].get("gradient_clip_val", _DEFAULT_CLIP) > 0
    optimizer = trainer.optimizers[0]
    assert type(optimizer).__name__ == shipped["model"]["optimizer"]["class_path"].rsplit(".", 1)[1]
    fused = shipped["model"]["optimizer"]["init_args"].get("fused", False)
    assert all(bool(group.get("fused")) == fused for group in optimizer.param_groups)
    accumulate = shipped["trainer"].get("accumulate_grad_batches", 1)
    assert trainer.global_step == -(-BATCHES // accumulate)  # the last, partial accumulation steps too
    probe = next(cb for cb in trainer.callbacks if isinstance(cb, WeightProbe))
    assert probe.changed() == list(probe.before), "some weights did not change"
    assert all(torch.isfinite(w).all() for w in probe.after.values())
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    assert (Path(trainer.log_dir) / "checkpoints" / "last.ckpt").is_file()


# The two heaviest recipes (8 s each) run with the slow tests, to keep the default suite under four minutes.
_HEAVY = ("cifar100_vit_base_224", "cifar10_vit_small_finetune")


@pytest.mark.parametrize(
    "config",
    [pytest.param(c, marks=pytest.mark.slow) if c.stem in _HEAVY else c for c in CIFAR_RECIPES],
    ids=[c.stem for c in CIFAR_RECIPES],
)
def test_every_recipe_trains_in_its_mixed_precision_on_cpu(config: Path, tmp_path: Path, cifar_dir: Path) -> None:
    shipped = _shipped(config)["trainer"]["precision"]
    precision = "bf16-mixed" if shipped == "16-mixed" else shipped
    cli = _run_recipe(
        config, cifar_dir, tmp_path,
        "--trainer.accelerator", "cpu", "--trainer.precision", precision,
        # A small ViT with the recipe's patch and image size; compiling on a CPU takes minutes.
        "--model.model_name", "test_vit", "--model.compile", "false",
    )  # fmt: skip
    _assert_trained_as_shipped(cli, config, precision)


@pytest.mark.parametrize("config", CIFAR_RECIPES, ids=[c.stem for c in CIFAR_RECIPES])
def test_every_recipes_own_architecture_builds(config: Path) -> None:
    """The shipped model name, patch size and image size make a ViT (on the meta device: no memory, no download)."""
    shipped = _shipped(config)
    model, data = shipped["model"], shipped["data"]["init_args"]
    classes = 100 if data["dataset"] == "cifar100" else 10
    patch = {"patch_size": model["patch_size"]} if model.get("patch_size") else {}
    with torch.device("meta"):
        net = timm.create_model(model["model_name"], num_classes=classes, img_size=data["img_size"], **patch)
    tokens = net.patch_embed.num_patches
    assert net.num_classes == classes and tokens == (data["img_size"] // net.patch_embed.patch_size[0]) ** 2 >= 64


class _ClipRecorder(ViTClassifier):
    """Records every parameter gradient's global norm and largest entry right after clipping."""

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self.after_clipping.append(
            (float(torch.nn.utils.get_total_norm(grads)), max(float(g.abs().max()) for g in grads))
        )


@pytest.mark.parametrize(
    ("precision", "algorithm"),
    [("16-mixed", "norm"), ("16-mixed", "value"), ("bf16-mixed", "norm"), ("32-true", "norm")],
)
def test_clipping_acts_on_unscaled_gradients_with_a_fused_optimizer(
    precision: str, algorithm: str, digits_dir: Path
) -> None:
    torch.manual_seed(0)
    clip = 0.01  # far below a fresh ViT's gradient norm (about 1), so every step is clipped
    model = _ClipRecorder(
        "test_vit", img_size=32, patch_size=4,
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3, fused=True), scheduler=no_warmup,
    )  # fmt: skip
    model.after_clipping = []
    if precision == "16-mixed":  # fp16 autocast + GradScaler on the CPU, which the Trainer flag maps to bf16
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)  # no overflow at the start, so no step is skipped
        device_args = {"plugins": [MixedPrecision("16-mixed", "cpu", scaler)]}
    else:
        device_args = {"precision": precision}
    trainer = L.Trainer(
        accelerator="cpu", max_steps=4, gradient_clip_val=clip, gradient_clip_algorithm=algorithm,
        limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, **device_args,
    )  # fmt: skip
    before = [p.detach().clone() for p in model.parameters()]
    trainer.fit(model, ImageFolderDataModule(digits_dir, img_size=32, batch_size=16, num_workers=0))
    assert len(model.after_clipping) == 4
    for norm, largest in model.after_clipping:
        if algorithm == "norm":  # unscaled and clipped: the true norm is the limit, not the limit / 256
            assert norm == pytest.approx(clip, rel=1e-3)
        else:
            assert largest == pytest.approx(clip, rel=1e-3)
    assert all(
        torch.isfinite(p).all() and not torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True)
    )


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (benchmarks/gpu.sh runs it)")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("config", CIFAR_RECIPES, ids=[c.stem for c in CIFAR_RECIPES])
def test_every_recipe_trains_as_shipped_on_cuda(config: Path, tmp_path: Path, cifar_dir: Path) -> None:
    """The real architecture in the exact precision, compile as shipped; only the data is the small test set."""
    cli = _run_recipe(config, cifar_dir, tmp_path, "--trainer.accelerator", "gpu")
    _assert_trained_as_shipped(cli, config, _shipped(config)["trainer"]["precision"])


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-true", torch.bfloat16), ("64-true", torch.float64)])
def test_a_true_precision_fit_gets_its_inputs_in_the_models_dtype(
    precision: str, dtype: torch.dtype, digits_dir: Path, tmp_path: Path
) -> None:
    """Lightning converts a batch's floating tensors before the transfer, when vitlit's are still uint8: the pipeline's
    float32 images met a bf16 model ("Input type (float) and bias type (c10::BFloat16)", helper-11)."""
    from helpers.cli import DIGITS_CONFIG, NO_WARMUP

    from vitlit.cli import main

    class Inputs(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            self.dtype = batch[0].dtype

    seen = Inputs()
    args = ["fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.precision", precision,
            "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1", "--trainer.default_root_dir", tmp_path,
            *NO_WARMUP]  # fmt: skip
    fit = main([str(a) for a in args], callbacks=[seen])
    assert fit.trainer.global_step == 2 and seen.dtype == dtype
