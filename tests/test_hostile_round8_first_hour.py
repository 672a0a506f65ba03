"""Hostile round 8 (issue 73): a new user's first hour with a fork (the export's half: tests/tools/).

The commands a fork's fit ends with carry the ``PYTHONPATH`` its module needs; the epoch line's ETA ends with the
time budget; the docs and the refusal give one ``label_smoothing`` for a loss of one's own.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from helpers.cli import CPU, ROOT, TINY_CONFIG, TINY_MODEL, run_cli
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Timer

from vitlit.checks import check_drawn_seed
from vitlit.errors import ConfigError
from vitlit.model import ViTClassifier
from vitlit.runs import records as run_card
from vitlit.runs.progress import epoch_line

FORK = "coco_data_r8"  # a module name no other test imports: sys.modules keeps what a test imported


def _next_commands(err: str) -> list[str]:
    """The commands the fit's summary offers (``next`` and the lines below it)."""
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("next "))
    return [lines[start].split("next", 1)[1].strip()] + [line.strip() for line in lines[start + 1 : start + 3]]


def test_a_forks_next_commands_carry_the_pythonpath_its_module_needs(
    tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pasted into a new shell, ``python -m vitlit test --config ...`` failed: "No module named 'coco_data'"."""
    fork = tmp_path / "fork"
    fork.mkdir()
    (fork / f"{FORK}.py").write_text(
        "from vitlit import ImageFolderDataModule\n\n\n"
        'class CocoData(ImageFolderDataModule):\n    """A fork\'s data module, in a module of its own."""\n'
    )
    monkeypatch.chdir(tmp_path)  # the paths printed are the ones to type here
    monkeypatch.syspath_prepend(str(fork))  # what `PYTHONPATH=fork vitlit fit` does
    monkeypatch.setenv("PYTHONPATH", str(fork))
    monkeypatch.delitem(sys.modules, FORK, raising=False)
    monkeypatch.setattr(run_card, "_near_chance", lambda card, trainer: None)  # a short run learns little
    run_cli(
        "fit", "--config", TINY_CONFIG, *CPU, *TINY_MODEL, "--data", f"{FORK}.CocoData", "--data.root", digits_dir,
        "--data.img_size", "16", "--data.batch_size", "4", "--data.num_workers", "0", "--data.val_size", "4",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
    )  # fmt: skip
    test, predict, _export = _next_commands(capsys.readouterr().err)
    for command in (test, predict):
        env, *argv = shlex.split(command)
        assert env == "PYTHONPATH=fork" and argv[:3] == ["python", "-m", "vitlit"], command
    # In a new shell (no PYTHONPATH) in this folder: the module is found with the prefix, and only with it.
    fresh = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # Found, not imported: importing it would load torch (seconds); a module not found is what the commands met.
    imports = [sys.executable, "-c", f"import importlib.util, sys; sys.exit(not importlib.util.find_spec('{FORK}'))"]
    assert subprocess.run(imports, env=fresh, cwd=tmp_path, capture_output=True).returncode != 0
    assert subprocess.run(imports, env={**fresh, "PYTHONPATH": "fork"}, cwd=tmp_path).returncode == 0


def test_classes_of_installed_packages_need_no_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """vitlit (an editable install's folder), Lightning (site-packages): no prefix; a PYTHONPATH folder: quoted."""
    monkeypatch.delenv("PYTHONPATH", raising=False)  # vitlit itself from a PYTHONPATH folder would need it too
    config = "model:\n  class_path: vitlit.model.ViTClassifier\ntrainer:\n  callbacks:\n  - class_path: " \
             "lightning.pytorch.callbacks.Timer\n"  # fmt: skip
    assert run_card._pythonpath(config) == ""
    folder = tmp_path / "my forks"  # a space: the prefix is quoted for the shell
    folder.mkdir()
    (folder / f"{FORK}_b.py").write_text("X = 1\n")
    monkeypatch.setattr(sys, "path", [sys.path[0], str(folder), *sys.path[1:]])  # second, as PYTHONPATH puts it
    monkeypatch.setenv("PYTHONPATH", str(folder))
    monkeypatch.delitem(sys.modules, f"{FORK}_b", raising=False)
    __import__(f"{FORK}_b")
    prefix = run_card._pythonpath(f"{config}data:\n  class_path: {FORK}_b.X\n")
    assert shlex.split(prefix) == [f"PYTHONPATH={folder}"], prefix


def test_the_epoch_lines_eta_ends_with_the_time_budget() -> None:
    """``ETA 10388 s`` from max_epochs 1000 on a 4-minute budget: the budget ends the run first."""
    metrics = {"train/loss": torch.tensor(1.0)}
    budget = Timer(duration=timedelta(minutes=4))  # not started: all 240 s left
    trainer = SimpleNamespace(current_epoch=2, max_epochs=1000, callback_metrics=metrics, callbacks=[budget],
                              max_steps=-1, num_training_batches=10, accumulate_grad_batches=1)  # fmt: skip
    line = epoch_line(trainer, seconds=31.2, epochs_timed=3)
    assert re.search(r"ETA 240 s\b", line) and "10" not in line.split("ETA")[1], line
    trainer.callbacks = []  # no budget: the epochs left
    assert "ETA 10369 s" in epoch_line(trainer, seconds=31.2, epochs_timed=3)
    trainer.max_epochs, trainer.callbacks = 5, [budget]  # the epochs end first
    assert re.search(r"ETA 21 s$", epoch_line(trainer, seconds=31.2, epochs_timed=3))
    trainer.max_epochs = -1  # max_time alone (Lightning's max_epochs -1)
    assert re.search(r"ETA 240 s\b", epoch_line(trainer, seconds=31.2, epochs_timed=3))


def test_the_epoch_lines_count_the_epochs_max_steps_leaves() -> None:
    # The scratch recipe's max_steps 12000 ends its run in epoch 18 of max_epochs 100: the lines said "epoch 3/40",
    # and an ETA for all 40.
    trainer = SimpleNamespace(current_epoch=0, max_epochs=40, callback_metrics={}, callbacks=[], max_steps=7,
                              num_training_batches=6, accumulate_grad_batches=2)  # fmt: skip
    assert epoch_line(trainer, seconds=2.0, epochs_timed=1) == "epoch 1/3  2.0 s/epoch  ETA 4 s"  # 3 steps an epoch
    trainer.current_epoch, trainer.max_epochs = 2, -1
    assert epoch_line(trainer, seconds=6.0, epochs_timed=3) == "epoch 3/3  2.0 s/epoch"


def test_the_docs_and_the_refusal_give_one_label_smoothing_for_a_loss_of_ones_own() -> None:
    """docs/your-data.md said ``--model.label_smoothing null``, the refusal ``0``: both work; they now say one."""
    docs = (ROOT / "docs" / "your-data.md").read_text(encoding="utf-8")
    (given,) = re.findall(r"--model\.loss your_module\.FocalLoss.*?--model\.label_smoothing ([^`]+)`", docs, re.S)

    def model(label_smoothing: object) -> ViTClassifier:
        return ViTClassifier("test_vit", num_classes=4, img_size=32, patch_size=4, pretrained=False,
                             loss=torch.nn.CrossEntropyLoss(), label_smoothing=label_smoothing)  # fmt: skip

    with pytest.raises(ConfigError) as refusal:
        model(0.1)
    assert f"--model.label_smoothing {given}." in str(refusal.value), (given, str(refusal.value))
    assert model(yaml.safe_load(given)).criterion.label_smoothing == 0.0  # the value as the CLI reads it: taken


def test_a_drawn_seed_in_an_interactive_slurm_allocation_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """``salloc -n 4`` then ``vitlit fit --seed_everything true``: one process, refused as if SLURM had started 4."""
    for name in ("WORLD_SIZE", "PL_GLOBAL_SEED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "")  # no srun: Lightning's hint to use it stays out of the test's output
    monkeypatch.setenv("SLURM_NTASKS", "4")
    for job, started in (("interactive", False), ("bash", False), ("train", True)):  # srun started 4 processes
        monkeypatch.setenv("SLURM_JOB_NAME", job)
        assert SLURMEnvironment.detect() is started  # Lightning's own rule, which the check follows
        if started:
            with pytest.raises(ConfigError, match="each of the 4 processes its own random seed"):
                check_drawn_seed(os.environ)
        else:
            check_drawn_seed(os.environ)
