"""Freezing and progressive unfreezing (vitlit.transfer.finetune.FreezeSchedule) on the fine-tuning recipe as shipped.

The runs use configs/cifar10_vit_small_finetune.yaml with its optimizer (fused AdamW), layer decay, clipping and
callbacks, in bf16-mixed (the CPU's stand-in for its 16-mixed), with only the data (the digits folder) and the model
(test_vit from a local weights file) shrunk.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import timm
import torch
from helpers.cli import DIGITS_CONFIG, ROOT, carries, refused, run_cli
from helpers.probes import TrainableProbe, WeightProbe

from vitlit.errors import ConfigError
from vitlit.model import ViTClassifier
from vitlit.optim import WarmupCosineLR, param_groups
from vitlit.transfer.finetune import FreezeSchedule, backbone_layers, head_parameter_names
from vitlit.transfer.private import follow_new_param_groups, record_last_lrs

FINETUNE = ROOT / "configs" / "cifar10_vit_small_finetune.yaml"
ADDONS = ROOT / "configs" / "addons"
SCHEDULE = """
trainer:
  callbacks+:
    - class_path: vitlit.transfer.finetune.FreezeSchedule
      init_args: {unfreeze_at_epochs: [1, 2], blocks_per_stage: 3, lr_factor: 0.5}
    - helpers.probes.TrainableProbe
"""


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("weights") / "test_vit.pth"
    torch.save(timm.create_model("test_vit", img_size=32, patch_size=8).state_dict(), path)
    return path


def _finetune(digits: Path, weights: Path, root: Path, *extra: object) -> list[object]:
    return [
        "fit", "--config", FINETUNE, *extra,
        "--data", "vitlit.data.ImageFolderDataModule", "--data.root", digits, "--data.img_size", "32",
        "--data.num_workers", "0", "--data.batch_size", "16",
        "--model.model_name", "test_vit", "--model.patch_size", "8", "--model.pretrained", "false",
        "--model.pretrained_file", weights, "--trainer.precision", "bf16-mixed", "--trainer.deterministic", "true",
        "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.default_root_dir", root,
    ]  # fmt: skip


def _probe(cli, kind: type):
    return next(cb for cb in cli.trainer.callbacks if isinstance(cb, kind))


def test_linear_probe_trains_the_head_alone(digits_dir: Path, weights: Path, tmp_path: Path) -> None:
    cli = run_cli(
        *_finetune(digits_dir, weights, tmp_path, "--config", ADDONS / "linear_probe.yaml"),
        "--trainer.max_epochs", "1", "--trainer.callbacks+=helpers.probes.WeightProbe",
    )  # fmt: skip
    changed = {name.removeprefix("net.") for name in _probe(cli, WeightProbe).changed()}
    assert changed == head_parameter_names(cli.model.net) == {"head.weight", "head.bias"}
    in_optimizer = sum(p.numel() for g in cli.trainer.optimizers[0].param_groups for p in g["params"])
    assert in_optimizer == sum(p.numel() for p in cli.model.net.head.parameters())
    # The frozen blocks give the head the features evaluation sees: the recipe's stochastic depth is off.
    assert not any(type(m).__name__ == "DropPath" for m in cli.model.net.modules())


def test_a_fine_tuned_run_is_evaluated_without_its_pretrained_weights(
    digits_dir: Path, weights: Path, tmp_path: Path
) -> None:
    """test and predict rebuilt the model from pretrained_file before the checkpoint replaced every weight: a run
    copied to a machine without the weights file (or offline, without the hub's) was refused."""
    import shutil

    mine = shutil.copy(weights, tmp_path / "mine.pth")
    fit = run_cli(*_finetune(digits_dir, mine, tmp_path / "runs"), "--trainer.max_epochs", "1")
    run = Path(fit.trainer.log_dir)
    Path(mine).unlink()  # the run moved to where the weights are not
    test = run_cli("test", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt")
    assert 0 <= test.trainer.callback_metrics["test/acc"] <= 1
    assert not test.model.hparams.pretrained and test.model.hparams.pretrained_file is None
    # `last` finds the run too: the weights the evaluation is not given are not compared (the CLI read's: refused,
    # "differs in model.init_args.pretrained_file", for every run that starts from pretrained weights).
    validate = run_cli("validate", "--config", run / "config.yaml", "--ckpt_path", "last")
    assert validate.trainer.ckpt_path == str(run / "checkpoints" / "last.ckpt")


def test_a_fine_tuned_run_resumes_without_its_pretrained_weights(
    digits_dir: Path, weights: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A fit resumed from a checkpoint file built its model from pretrained_file first, which the checkpoint then
    replaced: a run copied to a machine without the weights file was refused ("pretrained_file=... does not exist")."""
    import logging
    import shutil

    mine = shutil.copy(weights, tmp_path / "mine.pth")
    fit = run_cli(*_finetune(digits_dir, mine, tmp_path / "runs"), "--trainer.max_epochs", "1")
    run, saved = Path(fit.trainer.log_dir), {k: v.detach().clone() for k, v in fit.model.named_parameters()}
    Path(mine).unlink()  # the run moved to where the weights are not
    with caplog.at_level(logging.INFO):
        resumed = run_cli("fit", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt",
                          "--trainer.max_epochs", "2", "--trainer.callbacks+=helpers.probes.WeightProbe")  # fmt: skip
    assert "the pretrained weights are not read" in caplog.text
    assert resumed.trainer.global_step == 2 * 3 and resumed.model.hparams.pretrained_file == str(mine)
    for name, value in _probe(resumed, WeightProbe).before.items():  # as the second epoch starts: the checkpoint's
        torch.testing.assert_close(value, saved[name].float(), rtol=0, atol=0)


@pytest.mark.slow  # two digits fits; exact resume is the slow tests' theme
def test_unfreezing_schedule_survives_a_resume_exactly(digits_dir: Path, weights: Path, tmp_path: Path) -> None:
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(SCHEDULE)
    common = [*_finetune(digits_dir, weights, tmp_path / "whole", "--config", schedule), "--trainer.max_epochs", "4"]
    whole = run_cli(*common)
    seen = _probe(whole, TrainableProbe)
    head = {"head.weight", "head.bias"}
    top = {n for n in seen.trainable[1] if n.startswith(("blocks.3.", "blocks.4.", "blocks.5.", "norm."))}
    assert seen.trainable[0] == head
    assert seen.trainable[1] == head | top and len(top) > 3 * 4
    assert seen.trainable[2] == seen.trainable[3] == {n for n, _ in whole.model.net.named_parameters()}
    # The new groups follow the schedule at lr_factor times the head's rate, layer decay included.
    lrs = seen.lrs[3]
    stage = {name: lr for name, lr in lrs.items() if name.startswith("stage")}
    assert {name.split("_")[0] for name in stage} == {"stage1", "stage2"}
    head_lr = next(lr for name, lr in lrs.items() if seen.scales[name] == 1.0)
    assert len({seen.scales[name] for name in stage}) == 7  # a layer-decay scale per block and the embeddings
    for name, lr in stage.items():
        assert lr == pytest.approx(head_lr * seen.scales[name] * 0.5, rel=1e-6), name

    # Stopped cleanly after epoch 1 (stage 1 unfrozen, stage 2 not yet), then resumed from last.ckpt.
    stopped_root = tmp_path / "stopped"
    stopped = run_cli(
        *_finetune(digits_dir, weights, stopped_root, "--config", schedule), "--trainer.max_epochs", "4",
        "--trainer.callbacks+=helpers.probes.StopAfterEpoch", "--trainer.callbacks.init_args.epoch", "1",
    )  # fmt: skip
    assert stopped.trainer.current_epoch == 2 and _probe(stopped, TrainableProbe).trainable[1] == head | top
    run = Path(stopped.trainer.log_dir)
    resumed = run_cli("fit", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt")
    after = _probe(resumed, TrainableProbe)
    assert after.trainable[2] == seen.trainable[2] and after.lrs[3] == pytest.approx(seen.lrs[3], rel=1e-6)
    assert resumed.trainer.global_step == whole.trainer.global_step == 12
    for key, value in whole.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[key], value, rtol=0, atol=0, msg=key)


def test_schedule_this_model_cannot_follow_is_one_line_before_the_run(
    digits_dir: Path, weights: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The shipped schedule has three stages of four blocks (ViT-S/16 has 12); test_vit has six blocks.
    with pytest.raises(SystemExit) as exit_info:
        run_cli(*_finetune(digits_dir, weights, tmp_path, "--config", ADDONS / "unfreeze.yaml"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "3 unfreeze epochs but test_vit has only 2 stages" in err, err
    assert not (tmp_path / "lightning_logs").exists()


def test_an_unfreeze_epoch_past_max_steps_is_one_line_and_leaves_no_run(
    digits_dir: Path, weights: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(SCHEDULE)
    # 3 steps per epoch (limit_train_batches): 5 steps end in epoch 1, so the stage of epoch 2 would never come.
    with pytest.raises(SystemExit) as exit_info:
        run_cli(*_finetune(digits_dir, weights, tmp_path / "out", "--config", schedule), "--trainer.max_steps", "5")
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    carries(line, "epoch 2", "--trainer.max_steps=5", "epoch 1", "3 steps per epoch")
    assert not list((tmp_path / "out").rglob("*.ckpt"))


def _model(**kwargs: object) -> ViTClassifier:
    return ViTClassifier("test_vit", num_classes=10, img_size=32, patch_size=8, **kwargs)


@pytest.mark.parametrize(
    ("schedule", "trainer", "scheduler", "message"),
    [
        (dict(unfreeze_at_epochs=[3, 2], blocks_per_stage=2), None, None, "must increase"),
        (dict(unfreeze_at_epochs=[1, 2]), None, None, "without blocks_per_stage"),
        (dict(blocks_per_stage=2), None, None, "blocks_per_stage=2 sizes the stages that unfreeze_at_epochs"),
        (dict(unfreeze_at_epochs=[1, 2, 3, 4], blocks_per_stage=2), 9, None, "has only 3 stages"),
        (dict(unfreeze_at_epochs=[1, 5], blocks_per_stage=2), 5, None, "unfreezes at epoch 5"),
        (dict(unfreeze_at_epochs=[1]), 9, lambda o: torch.optim.lr_scheduler.ConstantLR(o), "no lr_factor"),
    ],
)
def test_bad_schedules_are_refused(schedule: dict, trainer: int | None, scheduler, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        callback = FreezeSchedule(**schedule)
        model = _model(scheduler=scheduler) if scheduler else _model()
        callback.check(SimpleNamespace(max_epochs=trainer, world_size=1), model)


def test_stages_follow_timms_layer_order_top_down() -> None:
    net = _model().net
    layers = backbone_layers(net)
    assert len(layers) == 6  # six blocks; the embeddings joined the bottom one, the final norm the top one
    assert all(n.startswith("blocks.5.") or n.startswith("norm") for n in layers[0])
    assert {"cls_token", "pos_embed", "patch_embed.proj.weight"} <= set(layers[-1])
    everything = {n for layer in layers for n in layer} | head_parameter_names(net)
    assert everything == {n for n, _ in net.named_parameters()}
    deit = timm.create_model("deit_tiny_distilled_patch16_224", num_classes=3, depth=2)
    assert head_parameter_names(deit) == {"head.weight", "head.bias", "head_dist.weight", "head_dist.bias"}
    # A pooled model's fc_norm is a layer of its own in timm: it goes with the top block, so a stage of 4 is 4 blocks.
    with torch.device("meta"):
        pooled = timm.create_model("vit_little_patch16_reg4_gap_256", num_classes=3)
    layers = backbone_layers(pooled)
    assert len(layers) == len(pooled.blocks) and "fc_norm.weight" in layers[0]
    assert {n.split(".")[1] for n in layers[0] if n.startswith("blocks.")} == {str(len(pooled.blocks) - 1)}
    # A run saved before goes on with the stages it started with: its resume unfreezes the blocks it would have.
    schedule, module = FreezeSchedule([1, 2], blocks_per_stage=1), SimpleNamespace(net=pooled)
    assert schedule._stages(module)[0] == layers[0] and schedule.state_dict()["norm_with_top"] is True
    schedule.load_state_dict({"stages_done": 1, "internal_optimizer_metadata": {}})  # no norm_with_top: before
    assert schedule._stages(module)[0] == ["fc_norm.weight", "fc_norm.bias"] and len(schedule._stages(module)) == 15


def test_param_groups_of_a_stage_split_decay_and_keep_layer_scale() -> None:
    net = _model().net
    names = set(backbone_layers(net)[0])
    groups = param_groups(net, skip=net.no_weight_decay(), layer_decay=0.5, names=names)
    grouped = {id(p) for g in groups for p in g["params"]}
    assert grouped == {id(p) for n, p in net.named_parameters() if n in names}
    assert {g["lr_scale"] for g in groups} == {0.5}  # the top block, one layer below the head
    assert all(p.ndim > 1 for g in groups if "weight_decay" not in g for p in g["params"])
    assert all(g["weight_decay"] == 0.0 for g in groups if "weight_decay" in g)


def test_a_group_added_mid_run_follows_the_same_curve() -> None:
    first, second = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([first], lr=1.0)
    scheduler = WarmupCosineLR(optimizer, warmup_steps=4, total_steps=40)
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    optimizer.add_param_group({"params": [second], "lr": 0.1})
    FreezeSchedule._follow(scheduler)
    for _ in range(20):
        head, added = (g["lr"] for g in optimizer.param_groups)
        assert added == pytest.approx(0.1 * head)
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[1]["lr"] < 0.1 * 0.5  # it decayed with the cosine


def test_a_lambda_schedule_takes_on_a_new_group() -> None:
    """The private names of torch that FreezeSchedule uses (`vitlit.transfer.private`) still exist and work."""
    first, second = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([first], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    assert hasattr(scheduler, "_last_lr"), "torch renamed LRScheduler._last_lr"
    optimizer.add_param_group({"params": [second], "lr": 2.0})
    follow_new_param_groups(scheduler, lambda step: 0.5)
    assert scheduler.base_lrs == [1.0, 2.0] and len(scheduler.lr_lambdas) == 2
    assert scheduler.get_last_lr() == [0.5, 1.0]
    optimizer.param_groups[0]["lr"] = 0.25
    record_last_lrs(scheduler)
    assert scheduler.get_last_lr() == [0.25, 1.0]


@pytest.mark.parametrize("probe_first", [True, False], ids=["probe-then-without", "plain-then-probe"])
def test_a_resume_with_another_freeze_schedule_is_refused_in_one_line(
    probe_first: bool, digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A linear probe's checkpoint resumed without the addon (or a plain run's with it): the optimizer's groups
    differ, and Lightning's restore ended in torch's ValueError traceback (a review's)."""
    short = ["fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.default_root_dir", tmp_path,
             "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]  # fmt: skip
    probe = ["--config", ROOT / "configs" / "addons" / "linear_probe.yaml"]
    first = run_cli(*short, *(probe if probe_first else []), "--trainer.max_epochs", "1")
    last = Path(first.trainer.log_dir) / "checkpoints" / "last.ckpt"
    line = refused(capsys, *short, *([] if probe_first else probe), "--trainer.max_epochs", "2", "--ckpt_path", last)
    assert "freeze schedule" in line and str(last) in line
    if probe_first:  # auto takes no linear probe's run for an unfreezing one (the CLI read's: it continued it)
        unfreeze = ["--config", ROOT / "configs" / "addons" / "unfreeze.yaml"]
        fresh = run_cli(*short, *unfreeze, "--trainer.callbacks.blocks_per_stage", "2", "--trainer.max_epochs", "7",
                        "--trainer.limit_train_batches", "1", "--ckpt_path", "auto")  # fmt: skip
        assert fresh.trainer.ckpt_path is None and "differs in the freeze schedule" in capsys.readouterr().err
