"""The first hour of a new user: entry points, help, short runs that learn and log, quiet output."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from helpers.cli import CPU, DIGITS_CONFIG, ROOT, TINY_CONFIG, TINY_MODEL, run_cli, said_with, tiny_cifar_fit

import vitlit
from vitlit import ImageFolderDataModule
from vitlit.cli import TOOLS
from vitlit.data.pipeline import InMemory
from vitlit.optim import WarmupCosineLR


def _digits_fit(digits: Path, root: Path) -> list[str]:
    return [
        "fit", "--config", str(TINY_CONFIG), *CPU, *TINY_MODEL, "--data", "ImageFolderDataModule",
        "--data.root", str(digits), "--data.num_workers", "0", "--trainer.fast_dev_run", "1",
        "--trainer.default_root_dir", str(root),
    ]  # fmt: skip


@pytest.mark.slow  # two fresh processes with a fit each: 21 s
def test_both_entry_points_exit_0_after_a_run(tmp_path: Path, digits_dir: Path) -> None:
    script = Path(sys.executable).parent / ("vitlit.exe" if os.name == "nt" else "vitlit")
    procs = [  # both at once: each new process spends most of its time importing
        subprocess.Popen([*command, *_digits_fit(digits_dir, tmp_path / name)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        for name, command in (("script", [str(script)]), ("module", [sys.executable, "-m", "vitlit"]))
    ]  # fmt: skip
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert "VitLitCLI object" not in out + err


def test_version_help_and_no_abbreviations(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli("--version")
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("vitlit 0.")
    with pytest.raises(SystemExit) as exit_info:
        run_cli("--help")
    listing = " ".join(capsys.readouterr().out.split())
    assert listing.startswith(f"usage: vitlit [--version] {{fit,validate,test,predict,{','.join(TOOLS)}}}")
    assert exit_info.value.code == 0 and all(tool in listing for tool in TOOLS)
    # Each subcommand offered has its module in this copy (a fork's deleted tools/ takes its entries with it).
    assert "prepare" in TOOLS and all(importlib.util.find_spec(target.split(":")[0]) for target in TOOLS.values())
    with pytest.raises(SystemExit) as exit_info:
        run_cli("frobnicate")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and all(f"'{tool}'" in err for tool in ("fit", "predict", *TOOLS))
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", TINY_CONFIG, "--trainer.max_ep", "5", "--print_config")
    assert exit_info.value.code == 2
    assert "--trainer.max_ep" in capsys.readouterr().err  # not taken for --trainer.max_epochs


@pytest.mark.slow  # a fit (or a fresh process): the default suite stays within its time
def test_class_help_names_the_program() -> None:
    done = subprocess.run([sys.executable, "-m", "vitlit", "fit", "--data.help", "ImageFolderDataModule"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("usage: vitlit --data.root ROOT"), done.stdout[:200]


def test_a_warmup_longer_than_the_run_is_refused_in_one_line(
    tmp_path: Path, cifar_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 44: the recipe's warmup is not cut to 10% of a short run behind the config's back; it is refused."""
    with pytest.raises(SystemExit) as exit_info:
        tiny_cifar_fit(cifar_dir, tmp_path, "--trainer.max_epochs", "2", "--model.scheduler.init_args.warmup_steps",
                       "500")  # fmt: skip  # 16 steps; the recipe warms up 500
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "vitlit: error: warmup_steps=500 is not shorter than this run's 16 optimizer steps" in err
    scheduler = WarmupCosineLR(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), warmup_steps=20)
    assert scheduler.set_total_steps(1000) is None and scheduler.warmup_steps == 20  # as given
    assert scheduler.get_last_lr() == [pytest.approx(1 / 20)]
    assert "ends inside the 20-step warmup" in scheduler.set_total_steps(15)  # a budget's later estimate: said


def test_a_short_run_of_a_recipe_warms_up_for_its_share(
    tmp_path: Path, digits_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 55, 1: `--trainer.max_epochs 1` of the digits recipe, and the README's own-images line through the
    CIFAR recipe on a folder of a few hundred images, train (they were refused: a warmup longer than the run)."""
    from vitlit.cli import main  # not run_cli: its fits warm up for none, and these take the recipes' own warmups

    fit = main(["fit", "--config", str(DIGITS_CONFIG), "--trainer.max_epochs", "1", "--trainer.limit_val_batches",
                "1", "--trainer.default_root_dir", str(tmp_path / "digits")])  # fmt: skip
    steps = fit.trainer.global_step
    assert steps == 1213 // 64 and fit.model.lr_schedulers().warmup_steps == round(0.1 * steps)
    assert f"warmup_steps 0.1: {round(0.1 * steps)} of the run's {steps} optimizer steps" in capsys.readouterr().err
    few = tmp_path / "few"
    for label in ("0", "1", "2"):
        (few / label).mkdir(parents=True)
        for image in sorted((digits_dir / "train" / label).iterdir())[:100]:
            (few / label / image.name).symlink_to(image)
    fit = main(["fit", "--config", str(TINY_CONFIG), *CPU, *TINY_MODEL, "--data", "ImageFolderDataModule",
                "--data.root", str(few), "--data.num_workers", "0", "--trainer.max_epochs", "3",
                "--trainer.default_root_dir", str(tmp_path / "own")])  # fmt: skip
    assert fit.trainer.global_step == 3 and fit.model.lr_schedulers().warmup_steps == 0
    # Issue 55, 6: the offline own-images line, MobileViT-XXS from scratch, trains on the same folder as shipped
    # (its accuracy over seeds: benchmarks/small_data.py, RESULTS.md "Few images, from scratch").
    scratch = main(["fit", "--config", str(ROOT / "configs" / "own_images_scratch.yaml"), "--data.root", str(few),
                    "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1", "--trainer.default_root_dir",
                    str(tmp_path / "scratch")])  # fmt: skip
    assert scratch.trainer.global_step == 2 and scratch.model.hparams.model_name == "mobilevit_xxs"


def test_workers_are_capped_at_the_cores(digits_dir: Path) -> None:
    data = ImageFolderDataModule(digits_dir, num_workers=64)
    assert data.workers == len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def test_calling_main_from_python_warns_nothing_about_sys_argv(tmp_path: Path, cifar_dir: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_cifar_fit(cifar_dir, tmp_path, "--trainer.fast_dev_run", "1")
    assert not [w for w in caught if "args parameter" in str(w.message)]


def test_version_answers_without_loading_torch() -> None:
    code = "import runpy, sys; sys.argv = ['vitlit', '--version']; runpy.run_module('vitlit', run_name='__main__')\n"
    code += "assert 'torch' not in sys.modules and 'lightning' not in sys.modules, 'loaded for --version'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"vitlit {vitlit.__version__}"


def test_a_run_starts_without_notes_nobody_can_act_on(
    tmp_path: Path, digits_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What a terminal would show: Lightning's log records, and warnings (which pytest would otherwise record).
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.fast_dev_run", "1",
                "--trainer.default_root_dir", tmp_path)  # fmt: skip
    assert "GPU available" in caplog.text  # Lightning's notes do reach the capture
    assert "litlogger" not in caplog.text
    assert not [w for w in caught if "LeafSpec" in str(w.message)]


@pytest.mark.slow  # a fit (or a fresh process): the default suite stays within its time
def test_evaluations_warn_nothing_nobody_can_act_on(tmp_path: Path, digits_dir: Path) -> None:
    """No "dirpath has changed" on test/predict; no "batch indices" on predict from the in-memory source's loader."""
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.max_epochs", "1",
                  "--trainer.limit_train_batches", "2", "--trainer.default_root_dir", tmp_path)  # fmt: skip
    run = Path(fit.trainer.log_dir)
    assert isinstance(fit.datamodule.train_dataloader().dataset, InMemory)  # the source auto chose here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for subcommand in ("test", "predict"):
            run_cli(subcommand, "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt",
                    "--trainer.limit_test_batches", "1")  # fmt: skip
    assert not [str(w.message) for w in caught if "dirpath" in str(w.message) or "batch indices" in str(w.message)]
    rows = (run / "predict" / "version_0" / "predictions.csv").read_text().splitlines()
    assert len(rows) == 1 + 449  # every test image, in data order, without Lightning's batch indices


@pytest.mark.slow  # a fit (or a fresh process): the default suite stays within its time
def test_the_digits_recipe_needs_no_prior_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """configs/digits.yaml as the README's first offline run: the images are written once into the cache and kept."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    short = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2"]
    fit = run_cli("fit", "--config", DIGITS_CONFIG, *short, "--trainer.default_root_dir", tmp_path / "runs")
    cache = tmp_path / "cache" / "vitlit" / "digits"
    assert fit.datamodule.root == cache and len(list(cache.glob("train/*/*.png"))) == 1348
    assert not [p for p in cache.parent.iterdir() if p.name != "digits"]  # no temporary copy left beside it
    # Not a terminal (pytest captures): a line per epoch instead of a bar.
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 2 and "val/acc" in lines[0] and "ETA" in lines[0] and "ETA" not in lines[1]
    written = {p: p.stat().st_mtime_ns for p in cache.rglob("*.png")}
    run_cli("fit", "--config", DIGITS_CONFIG, *short, "--trainer.default_root_dir", tmp_path / "runs")
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*.png")} == written  # read, not written again
    # A folder given by hand is read as it is, never filled with digits: a mistyped path stops the run.
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", tmp_path / "typo", *short)
    assert exit_info.value.code == 2 and "typo/train does not exist" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()


@pytest.mark.slow  # a fit (or a fresh process): the default suite stays within its time
def test_a_saved_config_works_from_any_folder(
    tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative paths are made absolute in the run's config: a notebook in another folder can test the run."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "digits").symlink_to(digits_dir)
    monkeypatch.chdir(work)
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", "data/digits", "--trainer.default_root_dir",
                  "runs", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2")  # fmt: skip
    config = Path(fit.trainer.log_dir).resolve() / "config.yaml"
    saved = yaml.safe_load(config.read_text())
    assert saved["data"]["init_args"]["root"] == str(work / "data" / "digits")
    assert saved["trainer"]["default_root_dir"] == str(work / "runs")
    elsewhere = tmp_path / "notebooks"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    best = fit.trainer.checkpoint_callback.best_model_path
    test = run_cli("test", "--config", config, "--ckpt_path", best, "--trainer.limit_test_batches", "1")
    assert Path(test.trainer.log_dir).resolve().is_relative_to(config.parent)  # beside the run, not in ./runs
    assert not list(elsewhere.iterdir())
    # A run given no root, and a logger's relative folder, are saved as the folders they were: its resume from
    # another folder continues it (the CLI read's: auto started afresh there, and last took another run).
    monkeypatch.chdir(work)
    short = ["--data.root", "data/digits", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
             "--trainer.limit_val_batches", "1"]  # fmt: skip
    first = run_cli("fit", "--config", DIGITS_CONFIG, *short)
    logged = run_cli("fit", "--config", DIGITS_CONFIG, *short, "--trainer.logger", "TensorBoardLogger",
                     "--trainer.logger.save_dir", "tb")  # fmt: skip
    monkeypatch.chdir(elsewhere)
    for run in (first, logged):
        saved = Path(run.trainer.log_dir).resolve() / "config.yaml"
        resumed = run_cli("fit", "--config", saved, "--ckpt_path", "auto", "--trainer.max_epochs", "2")
        assert resumed.trainer.ckpt_path == str(saved.parent / "checkpoints" / "last.ckpt")
    assert not list(elsewhere.iterdir())


def test_an_unwritable_cache_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no/such/cache")
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.default_root_dir", tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and err[-1].startswith("vitlit: error: the digits cannot be written into")
    assert not list(tmp_path.iterdir())


def test_an_incomplete_digits_cache_is_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36, class 7: a half-written cache (two class folders) trained a 2-class model without a word."""
    from vitlit.data.digits import DigitsDataModule, default_digits_root, write_digits_folder

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = write_digits_folder(default_digits_root())
    for folder in [*cache.glob("*/[2-9]")]:  # what a copy cut short leaves: classes 0 and 1
        for image in folder.iterdir():
            image.unlink()
        folder.rmdir()
    data = DigitsDataModule(num_workers=0)
    assert "are incomplete; writing them again" in capsys.readouterr().err
    assert len(data.class_names) == 10 and len(list(cache.glob("*/*/*.png"))) == 1797
    assert [p.name for p in cache.parent.iterdir()] == ["digits"]  # nothing stale left beside it


def test_lightning_lines_nobody_can_act_on_are_left_out(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36, stumble 11: a pruned trial or a double Ctrl-C printed "An TrialPruned was raised with message"."""
    from vitlit.cli import quiet

    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    with caplog.at_level(logging.INFO), quiet():
        for name in ("TrialPruned", "KeyboardInterrupt", "SIGTERMException"):
            log.info(f"An {name} was raised with message: stop, saved checkpoint to x.ckpt")
        log.info("vitlit: data path: on the device")
    assert [r.getMessage() for r in caplog.records] == ["vitlit: data path: on the device"]


def test_a_resumes_notes_nobody_can_act_on_are_left_out() -> None:
    """Issue 36, stumble 11: a resume warned of its own checkpoint folder and of a mid-epoch resume that is exact."""
    from lightning.pytorch.utilities import rank_zero_warn

    from vitlit.cli import quiet

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet():
            rank_zero_warn("Checkpoint directory /runs/version_0/checkpoints exists and is not empty.")
            rank_zero_warn("You're resuming from a checkpoint that ended before the epoch ended and your dataloader")
            rank_zero_warn("The number of training batches (3) is smaller than the logging interval")
    assert [str(w.message)[:14] for w in caught] == ["The number of "]  # that one the user can act on


def test_a_folder_named_nan_is_a_folder(tmp_path: Path, digits_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53: `--data.root nan` was refused as "not a finite number"; a name is never a number."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nan").symlink_to(digits_dir)
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data", "ImageFolderDataModule", "--data.root", "nan",
                  "--trainer.fast_dev_run", "1", "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert fit.trainer.global_step == 1 and (tmp_path / "nan").is_dir()


def test_auto_and_last_resume_only_a_run_of_this_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 55, 4: `--ckpt_path auto`/`last` took the newest run under the root, another experiment's included."""
    from helpers.cli import refused

    short = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--trainer.default_root_dir",
             tmp_path]  # fmt: skip
    first = run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "1", *short)
    other = run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "1", "--data.hflip", "true", *short)
    resumed = run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "2", "--ckpt_path", "auto", *short)
    assert resumed.trainer.ckpt_path == str(Path(first.trainer.log_dir) / "checkpoints" / "last.ckpt")
    assert resumed.trainer.global_step == 4  # one epoch more of the first run, not of the newer, other one
    # The words in any case (a job script's LAST, a stray space): they were taken for files (the CLI read's).
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.crop", "none", "--ckpt_path", " Last", *short)
    assert "no run under" in line and "differs in data.init_args.crop: 'pad' there, 'none' here" in line
    fresh = run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "1", "--data.crop", "none",
                    "--ckpt_path", "auto", *short)  # fmt: skip
    assert fresh.trainer.ckpt_path is None and "a fresh start" in capsys.readouterr().err
    assert Path(other.trainer.log_dir).name == "version_1"


def test_auto_and_last_take_a_run_of_this_seed_recipe_and_optimizer(tmp_path: Path) -> None:
    """`auto`/`last` matched runs on model and data alone: a job of another seed or accumulation continued another
    experiment's run, and one of another learning rate took a run it then refused (fifteenth session's read)."""
    from vitlit.checkpoints import newest_checkpoint

    def run(name: str, seed: int = 42, accumulate: int = 1, lr: float = 1e-3, batch: int = 64) -> dict:
        config = {"seed_everything": seed, "trainer": {"accumulate_grad_batches": accumulate, "max_epochs": 5},
                  "data": {"class_path": "vitlit.data.DigitsDataModule", "init_args": {"batch_size": batch}},
                  "model": {"class_path": "vitlit.ViTClassifier", "init_args": {"optimizer": {
                      "class_path": "torch.optim.AdamW", "init_args": {"lr": lr}}}}}  # fmt: skip
        if name:
            (tmp_path / name / "checkpoints").mkdir(parents=True)
            (tmp_path / name / "config.yaml").write_text(yaml.safe_dump(config))
            (tmp_path / name / "checkpoints" / "last.ckpt").touch()
            os.utime(tmp_path / name / "checkpoints" / "last.ckpt", (len(os.listdir(tmp_path)),) * 2)  # newer
        return config

    ours = run("version_0")
    run("version_1", seed=7)
    run("version_2", accumulate=4)
    run("version_3", lr=2e-3)
    ours["trainer"]["max_epochs"] = 10  # a resume that extends the run
    assert newest_checkpoint("last", tmp_path, ours) == tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    assert newest_checkpoint("auto", tmp_path, run("", seed=7)).parent.parent.name == "version_1"
    assert newest_checkpoint("auto", tmp_path, run("", lr=3e-3)) is None  # a fresh start
    # A job restarted on a machine of other cores or memory: its workers, source and checkpointing are its own.
    faster = run("", seed=7)
    faster["data"]["init_args"] |= {"num_workers": 16, "source": "workers", "pin_memory": False}
    faster["model"]["init_args"] |= {"grad_checkpointing": True, "compile": True}
    assert newest_checkpoint("auto", tmp_path, faster).parent.parent.name == "version_1"
    # Another batch is another experiment (a review's: auto continued a run of batch 64 at 32), unless the run's
    # BatchSizeSearch chose it: the saved config then holds the batch the search found.
    assert newest_checkpoint("auto", tmp_path, run("", batch=32), callbacks=[]) is None
    # An evaluation's batch is its own: `validate --ckpt_path last --data.batch_size 32` takes the run.
    assert newest_checkpoint("last", tmp_path, run("", batch=32)).parent.parent.name == "version_0"
    searched = run("version_4", batch=128)
    searched["trainer"]["callbacks"] = search = [{"class_path": "vitlit.runs.batch_size.BatchSizeSearch"}]
    (tmp_path / "version_4" / "config.yaml").write_text(yaml.safe_dump(searched))
    again = run("", batch=32)
    again["trainer"]["callbacks"] = search
    assert newest_checkpoint("auto", tmp_path, again, callbacks=[]).parent.parent.name == "version_4"
    # Without the search the run would go on at the batch typed, not the one it found (a review's).
    assert newest_checkpoint("auto", tmp_path, run("", batch=32), callbacks=[]) is None


def test_resuming_a_finished_run_says_that_nothing_is_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 55, 5: a resume of a run that had trained its max_epochs trained nothing and said nothing."""
    short = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
    fit = run_cli("fit", "--config", DIGITS_CONFIG, *short, "--trainer.default_root_dir", tmp_path)
    run = Path(fit.trainer.log_dir)
    capsys.readouterr()
    again = run_cli("fit", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt")
    assert again.trainer.global_step == 2  # nothing more trained, and said:
    said_with(capsys.readouterr().err, "1 epochs", "--trainer.max_epochs 1")


def test_a_resume_to_fewer_epochs_than_trained_is_refused_and_leaves_the_run_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lightning refused it with its loops restored and the optimizer not: the last.ckpt saved on the way out held a
    fresh optimizer and schedule, which a later resume continued from without a word (a review's)."""
    from helpers.cli import refused

    short = ["--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1"]
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--trainer.max_epochs", "3", *short,
                  "--trainer.default_root_dir", tmp_path)  # fmt: skip
    run = Path(fit.trainer.log_dir)
    before = {p.name: p.read_bytes() for p in [*run.glob("*.*"), *(run / "checkpoints").iterdir()] if p.is_file()}
    line = refused(capsys, "fit", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt",
                   "--trainer.max_epochs", "1")  # fmt: skip
    assert "has trained 3 epochs, more than --trainer.max_epochs 1; give --trainer.max_epochs 4 or more" in line
    after = {p.name: p.read_bytes() for p in [*run.glob("*.*"), *(run / "checkpoints").iterdir()] if p.is_file()}
    assert after == before  # last.ckpt, the card and the configs, byte for byte
