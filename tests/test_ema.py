"""vitlit's EMA averages the weights exactly as Lightning's EMAWeightAveraging does, with PyTorch's foreach update."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.cli import DIGITS_CONFIG
from lightning.pytorch import Callback, LightningModule
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
        callback.on_train_batch_end(
            SimpleNamespace(global_step=step, is_last_batch=False), module, None, None, step - 1
        )
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


def test_before_its_first_update_the_average_is_the_training_weights() -> None:
    """An update_starting_at_step the run never reached: Lightning's average stayed the starting weights, which were
    validated, saved in every checkpoint and copied into the model at the end (the training discarded)."""
    torch.manual_seed(0)
    module = Tiny()
    start = copy.deepcopy(module.state_dict())
    trained = [{k: v + 1 for k, v in start.items()} for _ in range(3)]
    ema = EMA(decay=0.8, update_starting_at_step=100)
    final = _averaged(ema, module, trained)  # three steps, no update
    for name, value in trained[-1].items():
        torch.testing.assert_close(final[name], value, rtol=0, atol=0, msg=name)
    module.load_state_dict({k: v + 1 for k, v in trained[-1].items()})  # a step later, a checkpoint
    checkpoint = {"state_dict": module.state_dict()}
    ema.on_save_checkpoint(SimpleNamespace(), module, checkpoint)
    torch.testing.assert_close(checkpoint["state_dict"]["layer.weight"], module.layer.weight, rtol=0, atol=0)
    ema.on_validation_epoch_start(SimpleNamespace(), module)  # validated: the training weights
    torch.testing.assert_close(module.layer.weight, trained[-1]["layer.weight"] + 1, rtol=0, atol=0)


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
            callback.on_train_batch_end(
                SimpleNamespace(global_step=1, is_last_batch=False), module, None, None, 0
            )  # the first copies
            with Kernels() as kernels:
                callback.on_train_batch_end(SimpleNamespace(global_step=2, is_last_batch=False), module, None, None, 1)
            tensors = len(module.state_dict())
            counts[name, type(callback).__name__] = kernels.total, tensors
    for name in ("test_vit", "vit_small_patch16_224"):
        ours, tensors = counts[name, "EMA"]
        lightnings, _ = counts[name, "EMAWeightAveraging"]
        assert ours == counts["test_vit", "EMA"][0] < 10 and lightnings >= 3 * tensors, counts


class _Weights(Callback):
    """The weights after the last optimizer step, and those validated in each epoch."""

    def __init__(self) -> None:
        self.trained: dict[str, torch.Tensor] = {}
        self.validated: dict[int, dict[str, torch.Tensor]] = {}

    def on_train_batch_end(self, trainer, pl_module, *args, **kwargs) -> None:
        self.trained = {k: v.clone() for k, v in pl_module.state_dict().items()}

    def on_validation_batch_end(self, trainer, pl_module, *args, **kwargs) -> None:
        if not trainer.sanity_checking:
            self.validated[trainer.current_epoch] = {k: v.clone() for k, v in pl_module.state_dict().items()}


def test_epoch_updates_are_validated_as_saved_and_a_stop_in_validation_saves_the_training_weights(
    digits_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning updates an epoch's average after the epoch's validation, so the weights validated (and the best
    checkpoint chosen by them) were the previous epoch's average; and a SIGTERM during validation saved last.ckpt with
    the average and the training weights swapped, so the resume trained from the average (fifteenth session's read)."""
    from vitlit.cli import main

    monkeypatch.setenv("VITLIT_TEST_KILL", "1")
    weights = _Weights()
    args = ["fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.default_root_dir", tmp_path,
            "--trainer.max_epochs", "3", "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2",
            "--trainer.callbacks+=vitlit.runs.ema.EMA", "--trainer.callbacks.decay", "0.5",
            "--trainer.callbacks.update_every_n_steps", "0", "--trainer.callbacks.update_starting_at_epoch", "0",
            "--model.scheduler.init_args.warmup_steps", "0"]  # fmt: skip
    kill = ["--trainer.callbacks+=helpers.kill.SignalInValidation", "--trainer.callbacks.epoch", "1"]
    with pytest.raises(SystemExit):
        main([str(a) for a in [*args, *kill]], callbacks=[weights])
    checkpoints = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    best = torch.load(next(checkpoints.glob("epoch000-*.ckpt")), weights_only=True)
    assert all(torch.equal(best["state_dict"][k], v) for k, v in weights.validated[0].items())
    last = torch.load(checkpoints / "last.ckpt", weights_only=True)
    assert last["epoch"] == 1 and 1 in weights.validated
    assert all(torch.equal(last["current_model_state"][k], v) for k, v in weights.trained.items())
    assert not all(torch.equal(last["state_dict"][k], v) for k, v in weights.trained.items())
    # Its resume updates the average once an epoch, as the run without the stop: Lightning's state keeps the step of
    # the latest update, not its epoch, and epoch 1's update was made again at its end (the runs review's).
    assert last["averaging_state"]["n_averaged"] == 2
    main([str(a) for a in [*args, "--ckpt_path", "last"]])
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["averaging_state"]["n_averaged"] == 3


def test_a_run_without_the_ema_never_continues_one_with_it(
    few_digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An EMA run's checkpoint holds the average as its weights: a resume without the callback trained on from the
    average (and `auto` took such a run), while restoring the optimizer state of the training weights (a review's)."""
    from helpers.cli import refused, run_cli

    short = ["fit", "--config", DIGITS_CONFIG, "--data.root", few_digits_dir, "--trainer.default_root_dir", tmp_path,
             "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]  # fmt: skip
    ema = "--trainer.callbacks+=vitlit.runs.ema.EMA"
    first = run_cli(*short, "--trainer.max_epochs", "1", ema)
    last = Path(first.trainer.log_dir) / "checkpoints" / "last.ckpt"
    # Callbacks that leave the weights alone may change: a speed meter added to its resume.
    meter = "--trainer.callbacks+=vitlit.runs.monitor.SpeedMonitor"
    resumed = run_cli(*short, "--trainer.max_epochs", "2", "--ckpt_path", "last", ema, meter)
    assert resumed.trainer.ckpt_path == str(last)
    capsys.readouterr()
    fresh = run_cli(*short, "--trainer.max_epochs", "3", "--ckpt_path", "auto")  # the same run, without the EMA
    assert fresh.trainer.ckpt_path is None and "a weight average (EMA) there, none here" in capsys.readouterr().err
    line = refused(capsys, *short, "--trainer.max_epochs", "3", "--ckpt_path", last)
    assert "weight average (EMA)" in line and str(last) in line
    # And the EMA command's auto takes the EMA run, not the newer one without it (the average would start midway).
    again = run_cli(*short, "--trainer.max_epochs", "3", "--ckpt_path", "auto", ema)
    assert again.trainer.ckpt_path == str(last)
