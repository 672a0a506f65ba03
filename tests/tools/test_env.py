"""``vitlit env``: the machine's facts and the flags that suit it, exit 0 without a GPU."""

from __future__ import annotations

import pytest
import torch
from helpers.cli import run_cli

from vitlit.tools import env


def test_env_prints_versions_cores_and_a_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_cli("env", "--compile_check", "false")
    out = capsys.readouterr().out
    assert f"torch: {torch.__version__}" in out and "lightning: " in out and "timm: " in out
    assert f"cpu cores for DataLoader workers: {report['cpu_cores']}" in out
    lines = out.strip().splitlines()
    assert lines[-1] == report["verdict"] and "--trainer.precision" in lines[-1]
    if not torch.cuda.is_available():
        assert "gpus: none" in out and "--trainer.accelerator cpu" in lines[-1]


def test_the_verdict_follows_the_gpus() -> None:
    ampere = {"name": "A100", "memory_gib": 80.0, "capability": "8.0", "bf16": True}
    turing = {"name": "T4", "memory_gib": 15.0, "capability": "7.5", "bf16": False}
    assert "--trainer.precision bf16-mixed" in env.verdict([ampere])
    assert "--trainer.precision 16-mixed" in env.verdict([turing])
    assert "--trainer.precision 16-mixed" in env.verdict([ampere, turing])  # what every GPU of a run can do
    assert "--trainer.accelerator cpu" in env.verdict([])


def test_a_failing_compile_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env, "_COMPILE_PROBE", "raise SystemExit('no C compiler found')")
    works, detail = env.compile_works(timeout=60)
    assert not works and "no C compiler found" in detail
    monkeypatch.setattr(env, "_COMPILE_PROBE", "print('ok')")
    assert env.compile_works(timeout=60) == (True, "works")


def test_env_says_what_it_checks_before_the_long_compile(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    said: list[str] = []
    monkeypatch.setattr(env, "compile_works", lambda: (said.append(capsys.readouterr().out), (True, "works"))[1])
    run_cli("env")
    assert "torch.compile: checking" in said[0] and "--compile_check false skips it" in said[0]  # before it ran
    assert "torch.compile: yes (works)" in capsys.readouterr().out
