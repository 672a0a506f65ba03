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
from helpers.cli import DIGITS_CONFIG, ROOT, run_cli

from vitlit.model import ViTClassifier
from vitlit.runs.flops import flops_per_image


def _run(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setattr(sys, "argv", [script, *args])
    runpy.run_path(str(ROOT / "benchmarks" / script), run_name="__main__")
    return capsys.readouterr().out.strip().splitlines()[-1]


@pytest.mark.slow  # a benchmark, not the package: with the other benchmarks' smoke runs
def test_overhead_prints_the_ratio(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # bf16-mixed: both loops clip the gradients of a fused AdamW under autocast, as on a GPU.
    args = "--batches 3 --batch-size 16 --epochs 3 --precision bf16-mixed".split()
    last = _run("overhead.py", args, monkeypatch, capsys)
    assert re.fullmatch(r"overhead ratio=\d+\.\d{3}", last), last
    # vitlit's fit against the plain loop: equal within noise at full size; twice as slow would be a regression.
    assert 0.5 < float(last.split("=")[1]) < 2.0, last


def test_data_pipeline_prints_the_speedup(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    args = "--images 1024 --batch-size 256 --workers 0 --epochs 1".split()
    monkeypatch.setattr(sys, "argv", ["data_pipeline.py", *args])
    runpy.run_path(str(ROOT / "benchmarks" / "data_pipeline.py"), run_name="__main__")
    *_, data, policy = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"data speedup=\d+\.\d", data), data
    assert re.fullmatch(r"policy speedup=\d+\.\d", policy), policy
    # The batched path is the faster one, with a policy and without (20-40x and 10-13x at full size).
    assert float(data.split("=")[1]) > 2 and float(policy.split("=")[1]) > 2, (data, policy)


def test_data_pipeline_times_the_per_image_path_against_timm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["data_pipeline.py", "--against-timm", "--repeats", "1"])
    runpy.run_path(str(ROOT / "benchmarks" / "data_pipeline.py"), run_name="__main__")
    *_, times, ratio = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"per-image training batch of 64, .*: vitlit \d+\.\d\d ms, timm \d+\.\d\d ms", times), times
    assert re.fullmatch(r"timm cost ratio=\d+\.\d\d", ratio), ratio
    assert float(ratio.split("=")[1]) < 4, ratio  # torchvision's per-image transforms, timm's order of cost


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
@pytest.mark.parametrize("mode", [[], ["--pipeline"]], ids=["policies", "pipelines"])
def test_policy_hardness_prints_a_paired_difference_per_checkpoint(
    mode: list[str],
    digits_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.max_epochs", "1",
                  "--trainer.limit_train_batches", "2", "--trainer.default_root_dir", tmp_path)  # fmt: skip
    capsys.readouterr()
    last = _run("policy_hardness.py", [fit.trainer.checkpoint_callback.best_model_path, "--repeats", "2", *mode],
                monkeypatch, capsys)  # fmt: skip
    number = r"\d\.\d{4}"
    row = rf"\| all \| ({number}) \| ({number}) \| ([+-]{number}) \(({number})\) \| {number} \| {number} \|"
    found = re.fullmatch(row, last)
    assert found, last
    batched, torchvision, difference, _ = (float(v) for v in found.groups())
    assert difference == pytest.approx(batched - torchvision, abs=2e-4)  # the paired difference of the two losses


def test_policy_parity_summarizes_logged_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The pooled figures of benchmarks/RESULTS.md come from --summarize over benchmarks/policy_parity_runs.jsonl.
    rows = [("device", 0.96, 0.97, 100.0), ("device", 0.98, 0.99, 120.0), ("per-image", 0.97, 0.975, 200.0),
            ("per-image", 0.99, 0.985, None), ("per-image", 0.98, None, None)]  # fmt: skip
    log = tmp_path / "runs.jsonl"
    log.write_text("".join(
        json.dumps({"policy": "autoaugment", "path": path, "seed": i, "test_acc": best, "test_acc_last": last,
                    "fit_seconds": seconds}) + "\n" for i, (path, best, last, seconds) in enumerate(rows)
    ))  # fmt: skip
    last_line = _run("policy_parity.py", ["--summarize", str(log)], monkeypatch, capsys)
    # best: 0.97 - 0.98 = -1.00 points, Welch's SE sqrt(2e-4/2 + 1e-4/3) = 1.15; last: 0.98 - 0.98 = 0, SE
    # sqrt(2e-4/2 + 5e-5/2) = 1.12 (the run without one is left out); time: 110 s / 200 s (only one run timed it).
    assert last_line.startswith("autoaugment: device - per-image, in points: best checkpoint -1.00 (SE 1.15), "
                                "last checkpoint +0.00 (SE 1.12); fit time ratio 0.55"), last_line  # fmt: skip


@pytest.mark.slow  # a benchmark, not the package: with the other benchmarks' smoke runs
def test_policy_checks_find_the_paths_alike(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every operation at magnitude 5 pixel for pixel, the draws independent and uniform, the normalisation bit for bit.
    assert _run("policy_checks.py", ["--epochs", "3"], monkeypatch, capsys) == "checks ok=True"
