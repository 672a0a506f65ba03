"""The benchmark scripts run at tiny settings, and each figure has the property a regression would break.

The figures themselves, at full size, are benchmarks/RESULTS.md's; here each is checked where a regression would show
even at tiny size: a batched path slower than the per-image one, an int8 file that is not smaller, FLOPs that
disagree with the model, a summary whose arithmetic is wrong.
"""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import ROOT

from vitlit.model import ViTClassifier
from vitlit.runs.flops import flops_per_image


def _lines(
    script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[str]:
    """What ``benchmarks/<script> *args`` prints, line by line, run in this process."""
    monkeypatch.setattr(sys, "argv", [script, *args])
    runpy.run_path(str(ROOT / "benchmarks" / script), run_name="__main__")
    return capsys.readouterr().out.strip().splitlines()


def _run(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """The last line ``benchmarks/<script> *args`` prints (`_lines`)."""
    return _lines(script, args, monkeypatch, capsys)[-1]


@pytest.mark.slow  # a benchmark, not the package: with the other benchmarks' smoke runs
def test_overhead_prints_the_ratio(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # bf16-mixed: both loops clip the gradients of a fused AdamW under autocast, as on a GPU.
    args = "--batches 3 --batch-size 16 --epochs 3 --precision bf16-mixed".split()
    last = _run("overhead.py", args, monkeypatch, capsys)
    assert re.fullmatch(r"overhead ratio=\d+\.\d{3}", last), last
    # vitlit's fit against the plain loop: equal within noise at full size; twice as slow would be a regression.
    assert 0.5 < float(last.split("=")[1]) < 2.0, last


def test_data_pipeline_prints_each_sources_speed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = "--images 1024 --batch-size 256 --workers 0 --epochs 1".split()
    *_, plain, policy = _lines("data_pipeline.py", args, monkeypatch, capsys)
    assert re.fullmatch(r"source ratio=\d+\.\d", plain), plain
    assert re.fullmatch(r"source ratio with autoaugment=\d+\.\d", policy), policy
    # Held in memory, a batch is one gather; streamed, every image is decoded from PIL: the first is the faster one
    # (3-6x at full size with two workers; more here, where the decoding runs in this process).
    assert float(plain.split("=")[1]) > 1.5 and float(policy.split("=")[1]) > 1.2, (plain, policy)


def test_data_pipeline_times_the_streamed_source_against_timm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    *_, times, ratio = _lines("data_pipeline.py", ["--against-timm", "--repeats", "1"], monkeypatch, capsys)
    assert re.fullmatch(r"training batch of 64, .*: vitlit \d+\.\d\d ms, timm \d+\.\d\d ms", times), times
    assert re.fullmatch(r"timm cost ratio=\d+\.\d\d", ratio), ratio
    assert float(ratio.split("=")[1]) < 2, ratio  # 0.58-0.63 at full size; twice timm's would be a regression


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
    assert set(rows) == {"test_vit", "vit_small_patch16_224"}, lines
    # ViT-S/16's 150 tensors: one foreach kernel against three per tensor is 12x on two cores; slower is a regression.
    assert rows["vit_small_patch16_224"] > 2.0, lines


def test_pipeline_device_times_the_224_px_device_half(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    last = _run("data_pipeline.py", ["--pipeline-device", "cpu", "--batch-size", "4"], monkeypatch, capsys)
    match = re.fullmatch(r"224 px pipeline from 32 px \(.*\) on cpu, batch 4: ([\d,]+) img/s", last)
    assert match and float(match.group(1).replace(",", "")) > 0, last
