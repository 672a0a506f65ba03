"""A NaN batch never reaches the weights: the guard stops the run with a resumable checkpoint, or skips the step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.cli import carries, tiny_cifar_fit
from helpers.faults import PoisonBatch

from vitlit.runs.nonfinite import NonFiniteGuard


def _fit(cifar_dir: Path, root: Path, *extra: object, poison: str = "PoisonBatch"):
    # The shared defaults (runs/defaults.yaml) list a NonFiniteGuard; the poisoned batch is appended to the callbacks.
    poison = [f"--trainer.callbacks+=helpers.faults.{poison}", "--trainer.callbacks.init_args.step", "3"]
    return tiny_cifar_fit(cifar_dir, root, "--trainer.max_epochs", "1", *extra, *poison)


@pytest.mark.parametrize(("check_every", "stopped_at"), [("1", 4), ("50", 8)], ids=["next-step", "epoch-end"])
def test_stop_skips_the_update_and_halts_with_a_resumable_checkpoint(
    check_every: str, stopped_at: int, tmp_path: Path, cifar_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        # The shared guard checks every 50 steps; one appended with other settings takes its place.
        guard = ["--trainer.callbacks+=vitlit.runs.nonfinite.NonFiniteGuard", "--trainer.callbacks.check_every_n_steps"]
        _fit(cifar_dir, tmp_path, *([*guard, check_every] if check_every != "50" else []))
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitlit: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    carries(
        lines[0],
        "NaN/inf",
        "step 3",
        f"step {stopped_at}",
        "epoch 0",
        "--model.optimizer.init_args.lr",
        "--trainer.precision bf16-mixed",
    )
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert lines[0].endswith(f"--ckpt_path {last}")
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == stopped_at
    assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values())


@pytest.mark.parametrize(
    ("fused", "precision", "poison"),
    [
        ("true", "32-true", "PoisonBatch"),
        ("false", "32-true", "PoisonBatch"),
        ("true", "bf16-mixed", "PoisonBatch"),
        ("true", "32-true", "PoisonGradients"),
        ("false", "32-true", "PoisonGradients"),
    ],
    ids=["fused-on-device", "foreach-with-sync", "fused-bf16-clipped", "fused-nan-gradient", "foreach-nan-gradient"],
)
def test_skip_drops_the_step_counts_it_and_trains_on(
    fused: str, precision: str, poison: str, tmp_path: Path, cifar_dir: Path
) -> None:
    cli = _fit(
        cifar_dir,
        tmp_path,
        "--trainer.callbacks+=vitlit.runs.nonfinite.NonFiniteGuard",
        "--trainer.callbacks.action",
        "skip",
        "--model.optimizer.init_args.fused",
        fused,
        "--trainer.precision",
        precision,
        "--trainer.log_every_n_steps",  # train/nonfinite_steps is logged at the logging steps: the last is step 8
        "4",
        poison=poison,
    )
    assert cli.trainer.precision == precision and cli.trainer.gradient_clip_val == 1.0
    [guard] = [cb for cb in cli.trainer.callbacks if isinstance(cb, NonFiniteGuard) and cb.active]  # one acts
    assert guard.action == "skip"
    poison = next(cb for cb in cli.trainer.callbacks if isinstance(cb, PoisonBatch))  # PoisonGradients too
    assert poison.poisoned
    assert guard.action == "skip" and guard.skipped == 1
    assert cli.trainer.global_step == 8  # the whole epoch ran
    for name, before in poison.before.items():  # the poisoned step changed nothing
        torch.testing.assert_close(poison.after[name], before, rtol=0, atol=0, msg=name)
    assert all(torch.isfinite(p).all() for p in cli.model.parameters())
    assert float(cli.trainer.callback_metrics["train/nonfinite_steps"]) == 1.0
    adam_steps = {int(state["step"]) for state in cli.model.optimizers().optimizer.state.values()}
    assert adam_steps == {7}  # eight steps, one of them skipped: AdamW's bias correction did not count it


@pytest.mark.parametrize(("precision", "suggested"), [("32-true", True), ("16-mixed", True), ("bf16-mixed", False)])
def test_the_stop_suggests_bf16_only_to_a_run_not_in_bf16(precision: str, suggested: bool) -> None:
    from types import SimpleNamespace

    from vitlit.errors import TrainingHalted
    from vitlit.runs.nonfinite import NonFiniteGuard

    guard = NonFiniteGuard(action="stop")
    guard._counts = torch.tensor([1, 3, 1, 1])  # one skipped step, the first at step 3
    trainer = SimpleNamespace(precision=precision, global_step=5, current_epoch=0)
    with pytest.raises(TrainingHalted) as halted:
        guard._check(trainer)
    assert "step 3" in str(halted.value) and "--model.optimizer.init_args.lr" in str(halted.value)
    assert ("--trainer.precision bf16-mixed" in str(halted.value)) == suggested


def test_under_accumulation_the_flags_are_read_once_per_check_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step count stays put for the micro-batches of the next step: each one read the flags (a host sync)."""
    from types import SimpleNamespace

    from helpers.counting import calls_to

    guard = NonFiniteGuard(check_every_n_steps=2)
    guard._counts = torch.tensor([0, -1, 0, 0])  # on_train_start's, on the CPU
    module = SimpleNamespace(log=lambda *args, **kwargs: None)
    with calls_to(monkeypatch, guard, "_check") as checks:
        for micro_batch in range(12):  # accumulate_grad_batches 4: the step count after each micro-batch
            trainer = SimpleNamespace(optimizers=[], global_step=(micro_batch + 1) // 4, log_every_n_steps=50)
            guard.on_train_batch_end(trainer, module)
    assert [args[0].global_step for args, _ in checks] == [2]  # not before the first step; once at step 2
