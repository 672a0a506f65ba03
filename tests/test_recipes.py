"""Recipe features: augmentation policies, batch augmentations, class balancing, optimizers, EMA weights."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from helpers.cli import ALL_CONFIGS, CPU, TINY_CONFIG, TINY_MODEL, cifar_args, no_warmup, run_cli
from PIL import Image
from timm.data.random_erasing import RandomErasing

from vitlit import ImageFolderDataModule, ViTClassifier
from vitlit.cli import main
from vitlit.data.pipeline import Policy
from vitlit.data.policies import BatchPolicy
from vitlit.regularize.batch_augment import BatchAugment, random_erasing
from vitlit.runs.stopping import EarlyStop


@pytest.mark.parametrize("policy", [p for p in Policy.__args__ if p != "none"])
def test_policies_change_images_but_keep_shape_and_dtype(policy: str) -> None:
    torch.manual_seed(0)
    image = (torch.rand(3, 32, 32) * 255).to(torch.uint8)
    outputs = BatchPolicy(policy, num_ops=2, magnitude=9)(image.expand(20, -1, -1, -1))
    assert outputs.shape == (20, 3, 32, 32) and outputs.dtype == torch.uint8
    assert sum(not torch.equal(o, image) for o in outputs) >= 10


def test_erasing_schedule_and_per_sample_erasing() -> None:
    augment = BatchAugment(random_erasing=0.4, random_erasing_end=0.2)
    assert [augment.erasing_probability(p) for p in (0.0, 0.5, 1.0, 2.0)] == pytest.approx([0.4, 0.3, 0.2, 0.2])
    torch.manual_seed(0)
    images = torch.zeros(200, 3, 32, 32)
    out, targets = BatchAugment(random_erasing=0.5)(images.clone(), torch.zeros(200, dtype=torch.long), 0.0, 10)
    erased = (out.flatten(1) != 0).any(dim=1).float().mean().item()
    assert 0.35 < erased < 0.65  # each image decides on its own, not the whole batch at once
    assert targets.dtype == torch.long


def _erased_boxes(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per image of an erased all-zero batch: whether it was erased, and the erased box's height and width."""
    mask = out[:, 0] != 0
    return mask.flatten(1).any(dim=1), mask.any(dim=2).sum(dim=1).float(), mask.any(dim=1).sum(dim=1).float()


def test_batched_erasing_draws_timms_distribution() -> None:
    """Erase rate, box area and box shape match timm's per-image RandomErasing(mode="pixel") statistically."""
    torch.manual_seed(0)
    images = torch.zeros(4000, 3, 32, 32)
    timm_erasing = RandomErasing(0.5, mode="pixel", device="cpu")
    ours = _erased_boxes(random_erasing(images, 0.5))
    theirs = _erased_boxes(timm_erasing(images.clone()))
    assert abs(ours[0].float().mean() - 0.5) < 0.03 and abs(theirs[0].float().mean() - 0.5) < 0.03
    for name, i in (("height", 1), ("width", 2)):
        a, b = ours[i][ours[0]], theirs[i][theirs[0]]
        assert abs(a.mean() - b.mean()) < 0.5, name  # pixels; both means are about 9
        assert abs(a.std() - b.std()) < 0.5, name
    area_ours = (ours[1] * ours[2])[ours[0]].mean() / 1024
    area_theirs = (theirs[1] * theirs[2])[theirs[0]].mean() / 1024
    assert abs(area_ours - area_theirs) < 0.01  # both about 0.17 of the image
    assert not images.any()  # the input batch is left untouched


def test_mixup_and_cutmix_give_probability_targets() -> None:
    augment = BatchAugment(mixup_alpha=0.8, cutmix_alpha=1.0)
    images = torch.arange(4, dtype=torch.float32)[:, None, None, None].expand(4, 3, 8, 8).clone()
    mixed, targets = augment(images, torch.tensor([0, 1, 2, 3]), 0.5, 5)
    assert targets.shape == (4, 5) and targets.dtype == torch.float32
    torch.testing.assert_close(targets.sum(dim=1), torch.ones(4))
    assert (targets.max(dim=1).values < 1).all()  # every image is a blend of two classes
    assert not torch.equal(mixed, torch.arange(4, dtype=torch.float32)[:, None, None, None].expand(4, 3, 8, 8))


def test_soft_targets_train_with_label_smoothing_once() -> None:
    model = ViTClassifier("test_vit", num_classes=4, img_size=32, patch_size=4, label_smoothing=0.1)
    logits, hard = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    one_hot = torch.nn.functional.one_hot(hard, 4).float()
    # A "mixed" target that is really one class must give exactly the loss of the hard label.
    torch.testing.assert_close(model.criterion(logits, one_hot), model.criterion(logits, hard))


class _Recorder(ViTClassifier):
    """Keeps the targets each step receives, after the data module's on-device batch hook."""

    seen: dict[str, list[torch.Tensor]]

    def training_step(self, batch, batch_idx):
        self.seen.setdefault("train", []).append(batch[1])
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.seen.setdefault("val", []).append(batch[1])
        return super().validation_step(batch, batch_idx)


def test_batch_augmentations_reach_training_batches_only(digits_dir: Path) -> None:
    import lightning as L

    model = _Recorder("test_vit", img_size=32, patch_size=4, scheduler=no_warmup)
    model.seen = {}
    data = ImageFolderDataModule(
        digits_dir,
        img_size=32,
        batch_size=8,
        num_workers=0,
        batch_augment=BatchAugment(random_erasing=0.25, mixup_alpha=0.8, cutmix_alpha=1.0),
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=3,
        limit_val_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        val_check_interval=3,
    )
    trainer.fit(model, data)
    assert all(t.shape == (8, 10) and t.is_floating_point() for t in model.seen["train"])
    assert all(t.dtype == torch.long for t in model.seen["val"])
    assert torch.isfinite(trainer.callback_metrics["train/loss"])


def test_class_balanced_sampling_evens_out_an_imbalanced_folder(tmp_path: Path) -> None:
    for name, count in (("common", 90), ("rare", 10)):
        (tmp_path / "train" / name).mkdir(parents=True)
        for i in range(count):
            Image.new("RGB", (8, 8)).save(tmp_path / "train" / name / f"{i}.png")
    counts = Counter()
    for balanced in (False, True):
        data = ImageFolderDataModule(
            tmp_path, img_size=8, batch_size=10, num_workers=0, val_size=2, class_balanced=balanced
        )
        data.setup("fit")
        torch.manual_seed(0)
        labels = torch.cat([y for _ in range(5) for _, y in data.train_dataloader()])
        counts[balanced] = (labels == 1).float().mean().item()
    assert counts[False] < 0.15  # the natural 10% share of "rare"
    assert 0.4 < counts[True] < 0.6


@pytest.mark.parametrize(
    ("optimizer", "expected"),
    [("torch.optim.AdamW", "AdamW"), ("torch.optim.SGD", "SGD"), ("timm.optim.Lamb", "Lamb")],
)
def test_optimizer_is_chosen_in_config(optimizer: str, expected: str, tmp_path: Path, cifar_dir: Path) -> None:
    cli = run_cli(
        "fit",
        "--config",
        TINY_CONFIG,
        *CPU,
        *TINY_MODEL,
        *cifar_args(cifar_dir),
        "--trainer.default_root_dir",
        tmp_path,
        "--trainer.fast_dev_run",
        "2",
        "--model.optimizer",
        optimizer,
        "--model.optimizer.init_args.lr",
        "0.01",
    )
    assert type(cli.trainer.optimizers[0]).__name__ == expected
    assert cli.trainer.optimizers[0].defaults["lr"] == 0.01
    assert [g["name"] for g in cli.trainer.optimizers[0].param_groups] == ["decay", "no_decay"]


def test_ema_weights_are_validated_and_checkpointed(tmp_path: Path, cifar_dir: Path) -> None:
    config = tmp_path / "ema.yaml"
    config.write_text(
        "trainer:\n  callbacks+:\n    - class_path: EMAWeightAveraging\n      init_args:\n        decay: 0.9\n"
    )
    common = [
        "--config",
        TINY_CONFIG,
        "--config",
        config,
        *CPU,
        *TINY_MODEL,
        *cifar_args(cifar_dir),
        "--trainer.default_root_dir",
        tmp_path,
    ]
    fit = run_cli("fit", *common, "--trainer.max_epochs", "1", "--model.scheduler.init_args.warmup_steps", "1")
    last = Path(fit.trainer.log_dir) / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, map_location="cpu", weights_only=False)
    key = "net.blocks.0.mlp.fc1.weight"
    assert not torch.equal(checkpoint["state_dict"][key], checkpoint["current_model_state"][key])
    # The checkpoint's weights are the EMA weights, the ones the end-of-epoch validation used.
    validate = run_cli("validate", *common, "--ckpt_path", last)
    assert float(validate.trainer.callback_metrics["val/loss"]) == pytest.approx(
        float(fit.trainer.callback_metrics["val/loss"]), abs=1e-6
    )


def test_the_from_scratch_vit_b_recipe_is_the_write_up_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45: write-up 1 trains ViT-B/16 from scratch; its teacher and 24 h budget are the two addons on top."""
    configs = Path(__file__).parents[1] / "configs"
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(configs / "cifar100_vit_base_224_scratch.yaml"),  # as written: its warmup too
              "--config", str(configs / "addons" / "distill.yaml"), "--config", str(configs / "addons" / "budget.yaml"),
              "--model.distillation.teacher", "resnet50", "--print_config"])  # fmt: skip
    config = yaml.safe_load(capsys.readouterr().out)
    model, data, trainer = config["model"]["init_args"], config["data"]["init_args"], config["trainer"]
    assert model["model_name"] == "vit_base_patch16_224" and model["pretrained"] is False
    assert model["label_smoothing"] == 0.1
    assert model["optimizer"]["init_args"].items() >= {"lr": 5e-4, "weight_decay": 0.05}.items()
    assert round(model["scheduler"]["init_args"]["warmup_steps"] * 12000) == 500 and trainer["max_steps"] == 12000
    assert model["distillation"]["init_args"]["teacher"] == "resnet50"
    assert (data["img_size"], data["crop"], data["crop_scale"], data["augment"]) == (224, "resized", [0.8, 1.0],
                                                                                   "trivialaugment")  # fmt: skip
    erasing = data["batch_augment"]["init_args"]
    assert (erasing["random_erasing"], erasing["random_erasing_end"]) == (0.4, 0.2)
    assert data["batch_size"] * trainer["accumulate_grad_batches"] == 64
    callbacks = {c["class_path"].rpartition(".")[2]: c.get("init_args", {}) for c in trainer["callbacks"]}
    assert callbacks["EarlyStop"].items() >= {"monitor": "val/loss", "patience": 10}.items()
    assert callbacks["Snapshots"]["every_fraction"] == 0.2 and "TimeBudget" in callbacks


def test_recipes_that_stop_early_name_only_their_own_settings() -> None:
    """Issue 54: the shared early-stopping settings live in `EarlyStop`, not in a block copied into each recipe."""
    stop = EarlyStop()
    assert (stop.monitor, stop.mode, stop.strict) == ("val/acc", "max", False)  # strict: resumable mid-validation
    stopping = [config for config in ALL_CONFIGS if "EarlyStop" in config.read_text()]
    assert len(stopping) >= 6
    for config in stopping:
        text = config.read_text()
        assert "class_path: EarlyStopping" not in text and "strict:" not in text, config


@pytest.mark.parametrize("source", ["memory", "workers"])
def test_a_training_split_smaller_than_a_batch_is_one_even_batch_under_mixup(tmp_path: Path, source: str) -> None:
    # 13 training images and a batch of 16: the loader kept one batch of 13, and timm's Mixup asserted an even one.
    for split, name, count in (("train", "a", 6), ("train", "b", 7), ("val", "a", 1), ("val", "b", 1)):
        (tmp_path / split / name).mkdir(parents=True)
        for i in range(count):
            Image.new("RGB", (8, 8), (i * 30, 0, 0)).save(tmp_path / split / name / f"{i}.png")
    data = ImageFolderDataModule(tmp_path, img_size=8, batch_size=16, num_workers=0, source=source,
                                 batch_augment=BatchAugment(mixup_alpha=0.8, cutmix_alpha=1.0))  # fmt: skip
    data.setup("fit")
    assert [len(targets) for _, targets in data.train_dataloader()] == [12]
    plain = ImageFolderDataModule(tmp_path, img_size=8, batch_size=16, num_workers=0, source=source)
    plain.setup("fit")
    assert [len(targets) for _, targets in plain.train_dataloader()] == [13]  # without Mixup every image is kept


def test_an_odd_batch_is_refused_for_training_under_mixup_and_taken_for_evaluation(tmp_path: Path) -> None:
    # The refusal ran when the data module was built, so test/predict/validate of the Mixup recipes refused it too.
    from vitlit.errors import ConfigError

    for split, name in (("train", "a"), ("train", "b"), ("val", "a"), ("val", "b")):
        (tmp_path / split / name).mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (8, 8), (i * 30, 0, 0)).save(tmp_path / split / name / f"{i}.png")
    data = ImageFolderDataModule(tmp_path, img_size=8, batch_size=3, num_workers=0,
                                 batch_augment=BatchAugment(mixup_alpha=0.8))  # fmt: skip
    data.setup("fit")
    assert [len(targets) for _, targets in data.val_dataloader()] == [3, 3, 2]
    with pytest.raises(ConfigError, match="batch_size=3 is odd, but Mixup/CutMix mix training images in pairs"):
        data.train_dataloader()
