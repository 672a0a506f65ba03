"""The benchmark scripts run at tiny settings and print their figures; what each figure stands for is counted.

Tests count, benchmarks time (CONTRIBUTING.md): the figures themselves are benchmarks/RESULTS.md's, and no test here
compares a time or a rate to a number, since CI runs two test files at once on two cores. What a speed stands for is
asserted by counting what happened: images decoded, gathers per batch, Python calls per image, kernels per step.
"""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from helpers.cli import ROOT
from helpers.counting import Kernels, calls_to, python_calls

from vitlit.data.pipeline import InMemory
from vitlit.model import ViTClassifier
from vitlit.runs.monitor import SpeedMonitor, flops_per_image
from vitlit.runs.nonfinite import NonFiniteGuard


def _lines(
    script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[str]:
    """What ``benchmarks/<script> *args`` prints, line by line, run in this process."""
    monkeypatch.setattr(sys, "argv", [script, *args])
    runpy.run_path(str(ROOT / "benchmarks" / script), run_name="__main__")
    return capsys.readouterr().out.strip().splitlines()


class CountStep(L.Callback):
    """Count the kernels of one training step (``step``, from batch start to batch end, the optimizer's included)."""

    def __init__(self, step: int) -> None:
        self.step, self.kernels = step, Kernels()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object, i: int) -> None:
        if trainer.global_step == self.step:
            self.kernels.__enter__()

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step == self.step + 1:
            self.kernels.__exit__(None, None, None)


def _run(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """The last line ``benchmarks/<script> *args`` prints (`_lines`)."""
    return _lines(script, args, monkeypatch, capsys)[-1]


def test_cli_parse_prints_a_commands_cost_and_its_phases(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    last = _run("cli_parse.py", ["--repeats", "1"], monkeypatch, capsys)
    phases = r"\(setup_parser \d\.\d{3}, parse_arguments \d\.\d{3}; mean of 1\)"
    assert re.fullmatch(rf"one command: \d\.\d{{3}} s of CPU {phases}", last), last


@pytest.mark.slow  # a benchmark, not the package: with the other benchmarks' smoke runs
def test_overhead_prints_the_ratio(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # bf16-mixed: both loops clip the gradients of a fused AdamW under autocast, as on a GPU.
    args = "--batches 3 --batch-size 16 --epochs 3 --precision bf16-mixed".split()
    last = _run("overhead.py", args, monkeypatch, capsys)
    assert re.fullmatch(r"overhead ratio=\d+\.\d{3}", last), last  # the figure; its cause is counted below


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_vitlit_step_adds_fewer_kernels_than_the_model_has_weights(precision: str) -> None:
    """What overhead.py times, counted: vitlit's step against the plain loop's, kernel by kernel.

    The metrics, the loss's log, the guard's flag and the schedule cost a fixed few kernels a step (50 for test_vit);
    anything vitlit did per weight tensor (a clip, a check, a copy each) would add at least one kernel per weight.
    """
    script = runpy.run_path(str(ROOT / "benchmarks" / "overhead.py"), run_name="benchmark")
    args = SimpleNamespace(model="test_vit", img_size=32, patch_size=4, batch_size=8, batches=3, device="cpu",
                           precision=precision, fused=True)  # fmt: skip
    torch.manual_seed(0)
    model = script["make_model"](args)
    weights = sum(1 for p in model.parameters() if p.requires_grad)
    plain = script["PlainLoop"](model, args)
    plain.loader = [next(iter(plain.loader))] * 2  # one warm-up step (lazy state), then the counted one
    plain.train_epoch()
    with Kernels() as plain_kernels:
        plain.loader = plain.loader[:1]
        plain.train_epoch()
    counted = CountStep(step=1)
    trainer = L.Trainer(accelerator="cpu", devices=1, precision=precision, max_steps=2, gradient_clip_val=1.0,
                        limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[NonFiniteGuard(), SpeedMonitor(), counted])  # fmt: skip
    trainer.fit(model, train_dataloaders=script["make_loader"](args))
    added = counted.kernels.total - plain_kernels.total
    assert plain_kernels.ops["aten.mm.default"] == counted.kernels.ops["aten.mm.default"] > 0  # the same model's work
    assert 0 < added < weights, (added, weights, counted.kernels.ops - plain_kernels.ops)


def test_data_pipeline_prints_each_sources_speed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = "--images 1024 --batch-size 256 --workers 0 --epochs 1".split()
    *_, plain, policy = _lines("data_pipeline.py", args, monkeypatch, capsys)
    assert re.fullmatch(r"source ratio=\d+\.\d", plain), plain  # the figures; why memory is faster is counted below
    assert re.fullmatch(r"source ratio with autoaugment=\d+\.\d", policy), policy


@pytest.mark.parametrize("source", ["memory", "workers"])
def test_held_in_memory_a_batch_is_one_gather_and_streamed_each_image_is_decoded(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the source ratio stands for: in memory, no image is decoded after the first pass; streamed, each once."""
    script = runpy.run_path(str(ROOT / "benchmarks" / "data_pipeline.py"), run_name="benchmark")
    data = script["training"](script["FakeCIFARData"](n=96, batch_size=16, val_size=16, source=source, num_workers=0))
    loader = data.train_dataloader()
    with calls_to(monkeypatch, script["FakeCIFAR"], "__getitem__") as decoded, \
            calls_to(monkeypatch, InMemory, "__getitems__") as gathered:  # fmt: skip
        batches = [data.on_after_batch_transfer(batch, 0) for batch in loader]
    images = sum(len(images) for images, _ in batches)
    assert len(batches) == 5 and images == 80
    if source == "memory":  # the array taken as it is: nothing decoded, one gather of the whole batch
        assert (len(decoded), len(gathered)) == (0, len(batches))
    else:
        assert (len(decoded), len(gathered)) == (images, 0)


def test_data_pipeline_times_the_streamed_source_against_timm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    *_, times, ratio = _lines("data_pipeline.py", ["--against-timm", "--repeats", "1"], monkeypatch, capsys)
    assert re.fullmatch(r"training batch of 64, .*: vitlit \d+\.\d\d ms, timm \d+\.\d\d ms", times), times
    assert re.fullmatch(r"timm cost ratio=\d+\.\d\d", ratio), ratio  # the figure; its cause is counted below


def test_a_streamed_image_costs_fewer_python_calls_than_timms(tmp_path: Path) -> None:
    """What the timm cost ratio stands for: the per-image work of vitlit's streamed batch against timm's loader.

    Per image, vitlit's worker decodes and collates uint8; the crop and the normalisation run once per batch on the
    device. timm's loader runs its transforms (resize, crop, to tensor, normalise) on each image. Counted over the
    same digits files, batch 64: vitlit 258 calls an image, timm 374 (torch 2.14, timm 1.0). A crop and a flip per
    image in vitlit's workers (torchvision's v2, as timm's loader would) make it 530.
    """
    from timm.data import ImageDataset, create_transform
    from torch.utils.data import DataLoader

    from vitlit.data import ImageFolderDataModule
    from vitlit.data.digits import write_digits_folder

    script = runpy.run_path(str(ROOT / "benchmarks" / "data_pipeline.py"), run_name="benchmark")
    folder = write_digits_folder(tmp_path / "digits")
    data = script["training"](ImageFolderDataModule(root=folder, batch_size=64, num_workers=0, hflip=False,
                                                    source="workers"))  # fmt: skip
    theirs = ImageDataset(str(folder / "train"))
    theirs.transform = create_transform(32, is_training=True, no_aug=True, mean=data.mean, std=data.std)

    def per_image(loader: DataLoader, step: object) -> float:
        batches = iter(loader)
        next(batches)  # the iterator's own start is not per image
        return python_calls(lambda: [step(next(batches)) for _ in range(3)]) / (3 * 64)

    ours = per_image(data.train_dataloader(), lambda batch: data.on_after_batch_transfer(batch, 0))
    timm = per_image(DataLoader(theirs, batch_size=64, shuffle=True, drop_last=True), lambda batch: batch)
    assert ours < timm, (ours, timm)


def test_gpu_script_smoke_writes_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gpu.json"
    last = _run("gpu.py", ["--smoke", "--out", str(out)], monkeypatch, capsys)
    assert last.startswith("gpu test_vit/4@32 images_per_sec=")
    (result,) = json.loads(out.read_text())["results"]
    assert result["images_per_sec"] > 0
    # FLOPs per image are the monitor's for the same model: three forward passes of timm's test_vit at 32 px, patch 4.
    model = ViTClassifier("test_vit", num_classes=100, img_size=32, patch_size=4)
    assert result["gflops_per_image"] == pytest.approx(flops_per_image(model) / 1e9, abs=1e-3)


@pytest.mark.slow  # a benchmark, not the package: with the other benchmarks' smoke runs
def test_export_prints_speedup_size_and_accuracy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A tiny form: test_vit at 32 px, one digits epoch; the real figures (ViT-S/16, 50 epochs) are in RESULTS.md.
    args = "--model test_vit --img-size 32 --repeats 2 --epochs 1".split()
    last = _run("export.py", args, monkeypatch, capsys)
    assert re.fullmatch(r"int8 speedup=\d+\.\d\d size_ratio=\d\.\d{3} acc_drop=-?\d\.\d{4}", last), last
    figures = dict(item.split("=") for item in last.split()[1:])
    assert float(figures["size_ratio"]) < 0.6  # int8 weights: a quarter of the fp32 file, plus what stays fp32


@pytest.mark.slow  # about 16 s: six models built, timed and measured
def test_model_choice_prints_a_row_per_choice_and_the_table() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "model_choice.py"), "--only", "1", "--steps", "1",
         "--batch-size", "4"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith("| vit_tiny, 32 px, patch 8 | 17 | 5.6 M |"), lines  # (32/8)^2 + 1 tokens, timm's size


@pytest.mark.slow  # a benchmark, not the package: with the other benchmarks' smoke runs
def test_data_pipeline_times_photos_of_many_sizes_from_each_source(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = "--many-sizes 60 --img-size 32 --batch-size 8 --workers 0 --epochs 1".split()
    lines = _lines("data_pipeline.py", args, monkeypatch, capsys)[-3:]
    said = [re.fullmatch(r"(memory|workers|workers, loader alone): ([\d,]+) img/s", line) for line in lines]
    rates = dict(match.groups() for match in said if match)
    assert set(rates) == {"memory", "workers", "workers, loader alone"} and all(rates.values()), lines


@pytest.mark.parametrize("source", ["memory", "workers"])
def test_the_timm_comparison_runs_vitlit_with_options_it_takes(
    source: str, digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """benchmarks/timm_train.py's vitlit command parses (0.6.0's rename of --data.on_device broke it unnoticed)."""
    from helpers.cli import run_cli

    script = runpy.run_path(str(ROOT / "benchmarks" / "timm_train.py"), run_name="benchmark")
    command = script["vitlit_command"](digits_dir, tmp_path / "out", 2, 0, source)
    assert command[1:4] == ["-m", "vitlit", "fit"]
    with pytest.raises(SystemExit) as exit_info:
        run_cli(*command[3:], "--print_config")
    assert exit_info.value.code == 0
    assert f"source: {source}" in capsys.readouterr().out


@pytest.mark.slow  # a benchmark, not the package: with the other benchmarks' smoke runs
def test_ema_prints_both_updates(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _lines("ema.py", ["--repeats", "3"], monkeypatch, capsys)
    number = r"\d+\.\d\d"
    pattern = rf"(\S+): Lightning's EMAWeightAveraging {number} ms an update, vitlit's EMA {number} ms \((\d+\.\d)x\)"
    rows = {m.group(1): float(m.group(2)) for m in (re.fullmatch(pattern, line) for line in lines) if m}
    assert set(rows) == {"test_vit", "vit_small_patch16_224"}, lines  # why one is faster: tests/test_ema.py counts


def test_pipeline_device_times_the_224_px_device_half(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    last = _run("data_pipeline.py", ["--pipeline-device", "cpu", "--batch-size", "4"], monkeypatch, capsys)
    match = re.fullmatch(r"224 px pipeline from 32 px \(.*\) on cpu, batch 4: ([\d,]+) img/s", last)
    assert match and float(match.group(1).replace(",", "")) > 0, last
