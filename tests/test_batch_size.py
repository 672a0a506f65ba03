"""Small GPUs: the batch size search on both data paths, and the memory benchmark in a tiny form."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from helpers.cli import DIGITS_CONFIG, ROOT, carries, refused, run_cli, said_with


# The DataLoader path goes with the slow tests: its batches come from the same data module, which many tests train.
@pytest.mark.parametrize(
    "source", [pytest.param("workers", marks=pytest.mark.slow), "memory"], ids=["dataloader", "on-device"]
)
def test_the_batch_size_finder_grows_the_batch_on_both_data_paths(
    source: str, digits_dir: Path, tmp_path: Path
) -> None:
    cli = run_cli(
        "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.source", source,
        "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch", "--trainer.callbacks.init_val", "8",
        "--trainer.callbacks.max_trials", "3", "--trainer.callbacks.steps_per_trial", "1",
        "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1", "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    assert cli.datamodule.batch_size == 32  # trials of 8, 16 and 32 images: every one fits on the CPU
    images, _ = next(iter(cli.trainer.train_dataloader))
    assert len(images) == 32


def test_the_search_stops_at_the_training_split_and_the_rate_schedule_and_config_follow(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45: 1,348 images got a batch of 8192, the learning rate of batch 64, and a config that resumed at 64."""
    cli = run_cli(
        "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.source", "memory", "--data.img_size", "16",
        "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch", "--trainer.callbacks.init_val", "64",
        "--trainer.callbacks.steps_per_trial", "1", "--trainer.max_epochs", "2", "--trainer.limit_val_batches", "1",
        "--trainer.callbacks.min_steps", "1", "--trainer.callbacks.max_lr_scale", "16",  # issue 45's search, unbounded
        "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    images = len(cli.datamodule.train_set)
    assert cli.datamodule.batch_size == 1024 < images < 2048  # 64, 128, ... 1024 ran; 2048 passes the split
    assert cli.trainer.global_step == 2  # one step an epoch, and the schedule was sized for those two
    schedule = cli.trainer.lr_scheduler_configs[0].scheduler
    assert schedule.total_steps == 2 and schedule.base_lrs[0] == pytest.approx(2e-3 * 1024 / 64)
    saved = yaml.safe_load((Path(cli.trainer.log_dir) / "config.yaml").read_text())
    assert saved["data"]["init_args"]["batch_size"] == 1024
    assert saved["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(2e-3 * 16)
    assert (
        f"vitlit: batch size 1024 (was 64; at most {images:,}, 1 optimizer steps an epoch of the {images:,} training "
        "images); learning rate x16 (linear)" in capsys.readouterr().err
    )


def test_the_search_keeps_steps_in_an_epoch_and_bounds_the_learning_rate(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 55, 3: on digits it took 1,024 of 1,213 images (one step an epoch) and x16 the learning rate.

    Hostile round 7, class 6: Lightning's "continue with full run using batch size 128" contradicted vitlit's 64.
    """
    caplog.set_level("INFO")
    cli = run_cli(
        "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.source", "memory", "--data.batch_size",
        "8", "--data.img_size", "16", "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch",
        "--trainer.callbacks.steps_per_trial", "1",
        "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "1", "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    images = len(cli.datamodule.train_set)
    assert cli.datamodule.batch_size == 64 and cli.trainer.global_step == images // 64 >= 10  # 128 > 1,213 / 10
    assert cli.trainer.lr_scheduler_configs[0].scheduler.base_lrs[0] == pytest.approx(2e-3 * 4)  # x8 bounded at 4
    said_with(capsys.readouterr().err, "learning rate", "x4", "x8", "max_lr_scale")
    assert not [r for r in caplog.records if "batch size finder" in r.getMessage()]  # one line says the batch
    # Under accumulation a step takes several batches: the epoch keeps min_steps optimizer steps (was 5 of 10).
    cli = run_cli(
        "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.source", "memory", "--data.batch_size",
        "8", "--data.img_size", "16", "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch",
        "--trainer.callbacks.steps_per_trial", "1",
        "--trainer.accumulate_grad_batches", "4", "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "1",
        "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    assert cli.datamodule.batch_size == 16 and cli.trainer.global_step >= 10  # 32 x 4 x 10 > 1,213


def test_lightnings_finder_alone_is_refused_for_what_it_leaves_behind(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir,
                   "--trainer.callbacks+=BatchSizeFinder", "--trainer.default_root_dir", tmp_path)  # fmt: skip
    carries(line, "BatchSizeFinder", "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch")


@pytest.mark.slow  # about 13 s: ViT-S/16 steps at 224 px with and without checkpointing
def test_memory_benchmark_prints_both_ratios(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--model", "test_vit", "--img-size", "32", "--batch-size", "4", "--steps", "1", "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", ["memory.py", *args])
    runpy.run_path(str(ROOT / "benchmarks" / "memory.py"), run_name="__main__")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"checkpointing memory ratio=\d+\.\d\d time ratio=\d+\.\d\d", last), last


def test_a_search_on_too_few_images_names_what_to_lower(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Hostile round 7, class 6: on 5 images it asked for a smaller init_val when init_val was already 1."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(8):
        (folder := tmp_path / "data" / "train" / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", tmp_path / "data", "--data.val_size",
                   "3", "--data.test_size", "1", "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch",
                   "--trainer.callbacks.init_val", "1", "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "init_val=1 leaves the 5 training images" in line and "--trainer.callbacks.min_steps (at most 5)" in line
    assert "smaller --trainer.callbacks.init_val" not in line
    # Under accumulation an optimizer step takes 2 batches: at most 2 such steps (the diff's read: it said 5).
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", tmp_path / "data", "--data.val_size",
                   "3", "--data.test_size", "1", "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch",
                   "--trainer.callbacks.init_val", "1", "--trainer.callbacks.min_steps", "3", "--trainer"
                   ".accumulate_grad_batches", "2", "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "min_steps=3 optimizer steps" in line and "--trainer.callbacks.min_steps (at most 2)" in line, line


@pytest.mark.part("regularize")
@pytest.mark.parametrize("search", [["--trainer.callbacks.init_val", "3"], ["--trainer.callbacks.mode", "binsearch"]])
def test_a_search_that_would_try_odd_batches_under_mixup_is_refused(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], search: list[str]
) -> None:
    """An odd size tried (init_val 3, or a binary search's midpoint) ended in timm's AssertionError traceback, with
    the odd size written into the run's config (fifteenth session's read)."""
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir,
                   "--data.batch_augment", "vitlit.regularize.batch_augment.BatchAugment",
                   "--data.batch_augment.mixup_alpha", "0.8", "--trainer.default_root_dir", tmp_path,
                   "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch", *search)  # fmt: skip
    assert "would try odd batch sizes; give an even --trainer.callbacks.init_val and mode power" in line, line


def test_a_search_decodes_once_says_its_warmup_again_and_no_lightning_note(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 65, 3: "decoding 1213 images once" nine times; the warmup line said before the search was stale after
    it; Lightning's "`weights_only` was not set" read against the README's weights-only loading."""
    caplog.set_level("INFO")
    cli = run_cli(
        "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.source", "memory", "--data.batch_size",
        "8", "--data.img_size", "16", "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch",
        "--trainer.callbacks.steps_per_trial", "1",
        "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "1", "--model.scheduler.init_args.warmup_steps",
        "0.1", "--trainer.default_root_dir", tmp_path,
    )  # fmt: skip
    said = [r.getMessage() for r in caplog.records] + capsys.readouterr().err.splitlines()
    decoded = [line for line in said if "decoding" in line and "images once" in line]
    assert len(decoded) == 2, decoded  # the training split and the validation split, once each, for every trial
    steps = cli.trainer.lr_scheduler_configs[0].scheduler.total_steps
    warmups = [line for line in said if "warmup_steps 0.1:" in line]
    assert warmups[-1].endswith(f"of the run's {steps} optimizer steps"), warmups  # said again after the search
    assert not [line for line in said if "weights_only" in line]


def test_a_resume_of_a_searched_run_keeps_its_training_state_and_its_batch(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The search's trial fits ran before Lightning restored the checkpoint's training state, and dropped it: a
    resume started over at step 0 with fresh optimizer moments (helper-11, fourteenth session)."""
    from lightning.pytorch import Callback

    class Start(Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            self.step, self.moments = trainer.global_step, len(trainer.optimizers[0].state)

    args = ["fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.source", "memory",
            "--data.img_size", "16", "--trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch",
            "--trainer.callbacks.init_val", "16", "--trainer.callbacks.max_trials", "2",
            "--trainer.callbacks.steps_per_trial", "1", "--trainer.limit_val_batches", "1",
            "--trainer.default_root_dir", tmp_path]  # fmt: skip
    first = run_cli(*args, "--trainer.max_epochs", "1")
    steps, lr = first.trainer.global_step, first.trainer.optimizers[0].defaults["lr"]
    assert first.datamodule.batch_size == 32 and lr == pytest.approx(2e-3 * 32 / 64)  # the default rate follows
    last = Path(first.trainer.log_dir) / "checkpoints" / "last.ckpt"
    from vitlit.cli import main

    start = Start()
    # The same flags as the first run (its batch 64), not its saved config: the checkpoint names the batch it chose.
    resumed = main([str(a) for a in [*args, "--trainer.max_epochs", "2", "--ckpt_path", last,
                                     "--model.scheduler.init_args.warmup_steps", "0"]], callbacks=[start])  # fmt: skip
    assert (start.step, resumed.trainer.global_step) == (steps, 2 * steps) and start.moments > 0
    assert resumed.datamodule.batch_size == 32 and resumed.trainer.optimizers[0].defaults["lr"] == pytest.approx(lr)
    assert "vitlit: a resume trains at batch size 32 (the one its run chose)" in capsys.readouterr().err
    # The resume's saved config says what it trained at, as the first run's does: its summary's commands name it.
    saved = yaml.safe_load((Path(resumed.trainer.log_dir) / "config.resume-1.yaml").read_text())
    assert saved["data"]["init_args"]["batch_size"] == 32
    assert saved["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(lr)


def test_a_resume_takes_the_default_rate_its_run_ended_at_whatever_the_flags_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A resume inferred the default rate from a batch mismatch: the first run's flags with ``--data.batch_size`` typed
    at the chosen batch kept the unscaled rate, where `FreezeSchedule`'s later groups start (fourteenth session's
    read)."""
    from vitlit.runs.batch_size import BatchSizeSearch

    search = BatchSizeSearch()
    search.load_state_dict({"batch_size": 32, "default_lrs": [1e-3]})
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=2e-3)  # the first run's flags
    trainer = SimpleNamespace(ckpt_path="last.ckpt", datamodule=SimpleNamespace(batch_size=32),
                              optimizers=[optimizer], is_global_zero=True)  # fmt: skip
    search.on_fit_start(trainer, None)
    assert optimizer.defaults["lr"] == 1e-3 and search.state_dict() == {"batch_size": 32, "default_lrs": [1e-3]}


def test_a_checkpoint_that_kept_the_rates_factor_still_scales_the_default_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint written before ``default_lrs`` keeps ``lr_factor``: its resume from the first run's flags scales
    the default rate as before (the fifteenth session's review of its own change)."""
    import vitlit.runs.batch_size as batch_size

    monkeypatch.setattr(batch_size, "set_batch_size", lambda trainer, size: None)
    search = batch_size.BatchSizeSearch()
    search.load_state_dict({"batch_size": 32, "lr_factor": 0.5})
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=2e-3)
    trainer = SimpleNamespace(ckpt_path="last.ckpt", datamodule=SimpleNamespace(batch_size=64),
                              optimizers=[optimizer], is_global_zero=True)  # fmt: skip
    search.on_fit_start(trainer, None)
    assert optimizer.defaults["lr"] == pytest.approx(1e-3)
