"""What a run writes down beside its checkpoints: the run card, the images it left out, its predictions.

``run_card.json`` and ``run_card.md`` (`RunCard`) say what a run was, where it ran and how it ended. A number is only
as good as the run behind it. Every ``fit`` keeps a card next to its checkpoints: the code's git commit (and whether
the checkout had uncommitted changes), the versions, device, precision, seed and effective batch, then what
happened: wall time, epochs, the best validation accuracy and its epoch, throughput, peak memory and why the run
ended. It is rewritten (atomically) after every epoch and when the run ends or stops; a resumed run carries the same
card on (its wall time adds up), and a ``test`` of one of the run's checkpoints adds ``test_acc``. The resolved
config is the run's ``config.yaml`` beside it.

``skipped_images.txt`` (`SkippedImages`) lists the files a data module left out; ``predictions.csv``
(`PredictionWriter`) holds what ``predict`` computed, one row per image.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning
import timm
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import EarlyStopping, Timer
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

import vitlit
from vitlit.atomic import write_atomically
from vitlit.cli import TOOLS
from vitlit.config import PositiveInt
from vitlit.exits import STOP
from vitlit.optim import UNBOUNDED_STEPS, length_reached, planned_steps, schedule_of
from vitlit.run_dir import CARD, read_card, saved_config
from vitlit.text import markdown, redacted, shell_word, shown, tell


def git_state(folder: Path) -> dict[str, Any]:
    """The commit of the git checkout holding ``folder`` and whether it has uncommitted changes; ``{}`` outside one.

    Untracked files count (a fork's new module is code the commit does not hold); ignored ones (runs, data) do not.
    One ``git status`` says both: its ``# branch.oid`` header names the commit, and every other line is a change.
    """
    command = ["git", "-C", str(folder), "status", "--porcelain=v2", "--branch", "--untracked-files=normal"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    lines = done.stdout.splitlines() if done.returncode == 0 else []
    commit = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), None)
    if commit is None or commit == "(initial)":  # not a checkout, or one without a commit yet
        return {}
    return {"git_commit": commit, "git_dirty": any(not line.startswith("#") for line in lines)}


def write_card(run_dir: Path, card: dict[str, Any]) -> None:
    """Write ``run_card.json`` and a Markdown table of the same fields, ``run_card.md``."""
    write_atomically(run_dir / CARD, redacted(json.dumps(card, indent=2, default=str)) + "\n")
    rows = "\n".join(f"| {key} | {'—' if value is None else markdown(value)} |" for key, value in card.items())
    title = markdown(card.get("run_dir"))
    write_atomically(run_dir / "run_card.md", f"# Run card: {title}\n\n| | |\n| --- | --- |\n{rows}\n")


class RunCard(Callback):
    """Keep ``run_card.json``/``.md`` in the run's folder through ``fit``, and add ``test_acc`` in ``test``.

    Only the main process writes. The exit reason is ``running``, ``finished``, ``early stop``, ``time budget``
    (``--trainer.max_time``), ``stopped`` (another callback asked to stop), or the exception that ended it
    (``SIGTERMException`` for a signal or a first Ctrl-C, its name in ``signal``; ``TrainingHalted`` for the NaN
    guard, ...).
    """

    def __init__(self) -> None:
        self.card: dict[str, Any] = {}
        self.run_dir: Path | None = None
        self._started = self._wall_before = 0.0

    @rank_zero_only
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.fast_dev_run or trainer.logger is None:  # no run folder of its own: no card
            return
        self.run_dir, self._started = Path(trainer.logger.log_dir), time.monotonic()
        earlier = {}
        if trainer.ckpt_path:  # a resume: its card goes on, but for what this fit ends or rewrites
            # The signal that stopped it, and the latest test's line (the file tested may be rewritten, last.ckpt;
            # each file's accuracy stays below its size and time, `record_test`).
            ended = ("signal", "test_acc", "test_checkpoint")
            earlier = {k: v for k, v in read_card(self.run_dir).items() if k not in ended}
        self._wall_before = float(earlier.get("wall_seconds") or 0.0)
        batch = getattr(trainer.datamodule, "batch_size", 0) or 0
        root = trainer.strategy.root_device
        device = torch.cuda.get_device_name(root) if root.type == "cuda" else platform.processor() or root.type
        seed = os.environ.get("PL_GLOBAL_SEED")  # set by Lightning's seed_everything (the CLI's seed_everything)
        seed = int(seed) if seed is not None and seed.lstrip("-").isdigit() else None
        plan = {
            "planned_steps": planned_steps(trainer),
            "warmup_steps": getattr(schedule_of(trainer), "warmup_steps", None),
        }
        if plan["planned_steps"] == UNBOUNDED_STEPS:  # a time budget plans from the run's first steps, and says so
            plan = dict.fromkeys(plan)
        self.card = {
            "epochs_done": 0, "best_val_acc": None, "best_epoch": None, "test_acc": None, **earlier,
            "run_dir": str(self.run_dir), "model_name": pl_module.hparams.get("model_name"), "exit_reason": "running",
            "data": getattr(trainer.datamodule, "description", None) or type(trainer.datamodule).__name__,
            **git_state(Path(vitlit.__file__).parent), "device": device, "precision": str(trainer.precision),
            "versions": {m.__name__: m.__version__ for m in (vitlit, torch, timm, lightning)},
            "processes": trainer.world_size, "seed": seed, "effective_batch": batch * trainer.accumulate_grad_batches
            * trainer.world_size, "resumed_from": str(trainer.ckpt_path or "") or earlier.get("resumed_from"),
            "loggers": [{"logger": type(lg).__name__, "name": str(lg.name), "run": str(lg.version)}
                        for lg in trainer.loggers],  # MLflow's and W&B's own run ids, to find the run there
            # What the options left to the run, as it took it (the schedule's length already asked for the loaders).
            "resolved": {**getattr(trainer.datamodule, "resolved", dict)(), **plan},
        }  # fmt: skip
        config = saved_config(trainer, self.run_dir)
        if config.is_file():  # the saved config says what its options left to the run, as comments (YAML reads on)
            with config.open("a", encoding="utf-8") as f:
                f.writelines(f"# resolved {k}: {redacted(json.dumps(v))}\n" for k, v in self.card["resolved"].items())
        if self.card["effective_batch"] != batch:  # the learning rate depends on it
            parts = f"{batch} per device x {trainer.accumulate_grad_batches} accumulated x {trainer.world_size} procs"
            rank_zero_info(f"vitlit: effective batch {self.card['effective_batch']} ({parts})")
        self._write(trainer)

    @rank_zero_only
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        value = trainer.callback_metrics.get("val/acc")
        if self.card and not trainer.sanity_checking and value is not None:
            best = self.card.get("best_val_acc")
            if best is None or float(value) > best:  # the one host read per validation
                self.card["best_val_acc"], self.card["best_epoch"] = float(value), trainer.current_epoch

    @rank_zero_only
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.card:
            self.card["epochs_done"] = trainer.current_epoch + 1
            self._write(trainer)

    @rank_zero_only
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.card:
            self.card["epochs_done"], self.card["exit_reason"] = trainer.current_epoch, _why_stopped(trainer)
            self._write(trainer)
            tell(*summary(self.card, trainer))

    @rank_zero_only
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self.card:
            self.card["exit_reason"] = type(exception).__name__
            if isinstance(exception, SIGTERMException):  # which one: a closed terminal leaves no line to read it in
                self.card["signal"] = STOP.signal_name or "SIGTERM"
            self._write(trainer)

    @rank_zero_only
    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Put ``test/acc`` on the card of the run whose checkpoint was tested (``<run>/checkpoints/*.ckpt``).

        Only a test of the whole test split, of the data module the run trained on (its ``data`` on the card), its
        images prepared as the run prepared them (its ``resolved`` inputs, which exports and model cards use), is its
        test accuracy; another is said not recorded.
        """
        if not trainer.ckpt_path or "test/acc" not in trainer.callback_metrics:
            return
        ckpt, limit, data = Path(trainer.ckpt_path), trainer.limit_test_batches, trainer.datamodule
        card = read_card(ckpt.resolve().parent.parent)  # as on_fit_start wrote it
        ran, trained, now = card.get("data"), card.get("resolved") or {}, getattr(data, "resolved", dict)()
        other = next((key for key in ("mean", "std", "crop_pct", "interpolation")
                      if key in trained and key in now and trained[key] != now[key]), None)  # fmt: skip
        if not (isinstance(limit, float) and limit == 1.0):  # an int is a number of batches
            rank_zero_info(f"vitlit: test/acc not recorded on the run card: --trainer.limit_test_batches {limit} "
                           f"tests a part of the split")  # fmt: skip
        elif ran and ran not in (getattr(data, "description", None), type(data).__name__):  # older cards: the class
            rank_zero_info(f"vitlit: test/acc not recorded on the run card: the run trained on {shown(ran)}")
        elif other is not None:
            rank_zero_info(f"vitlit: test/acc not recorded on the run card: this test prepares images with {other} "
                           f"{now[other]!r}, the run with {trained[other]!r}")  # fmt: skip
        else:
            record_test(ckpt, float(trainer.callback_metrics["test/acc"]))

    def _write(self, trainer: Trainer) -> None:
        self.card["wall_seconds"] = round(self._wall_before + time.monotonic() - self._started, 1)
        speed = next((cb for cb in trainer.callbacks if hasattr(cb, "average_images_per_sec")), None)
        if speed is not None and speed.average_images_per_sec is not None:
            self.card["images_per_sec"] = round(speed.average_images_per_sec, 1)
        device = trainer.strategy.root_device
        if device.type == "cuda":  # SpeedMonitor resets CUDA's peak every epoch, and keeps the run's
            peak = max(torch.cuda.max_memory_allocated(device), getattr(speed, "peak_memory_bytes", 0))
            self.card["peak_memory_gib"] = round(peak / 2**30, 3)
        write_card(self.run_dir, self.card)


def record_test(ckpt: Path, test_acc: float) -> None:
    """Put ``test_acc`` on the card of the run whose checkpoint ``ckpt`` was tested (where the run has a card).

    Each checkpoint's accuracy is kept under its file name with the file's size and modification time: a resume
    rewrites ``last.ckpt`` (a new file), and what quotes the accuracy (the timm folder's README) compares them.
    """
    run = ckpt.resolve().parent.parent
    card = read_card(run)
    if card:
        card["test_acc"], card["test_checkpoint"] = test_acc, ckpt.name  # the last tested; each one's below
        card.setdefault("test_acc_by_checkpoint", {})[ckpt.name] = test_acc
        stat = ckpt.stat()
        card.setdefault("tested_files", {})[ckpt.name] = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        write_card(run, card)


def _short(path: str | Path) -> str:
    """``path`` relative to the current directory where it lies below it (what the user types), else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def summary(card: dict[str, Any], trainer: Trainer) -> list[str]:
    """The lines a fit ends with: how it ended, where its checkpoints are, and the commands that use them."""
    run = Path(card["run_dir"])
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback is not None else ""
    last = run / "checkpoints" / "last.ckpt"
    pick = best or (str(last) if last.is_file() else "")
    rate = f", {card['images_per_sec']:,.0f} images/s" if card.get("images_per_sec") else ""
    lines = [f"vitlit: fit {card['exit_reason']} after {card['epochs_done']} epochs in {card['wall_seconds']:.0f} s"
             f"{rate}", f"  run folder  {_short(run)}"]  # fmt: skip
    if best:
        score = f", val/acc {card['best_val_acc']:.4f}" if card.get("best_val_acc") is not None else ""
        lines.append(f"  best        {_short(best)} (epoch {card.get('best_epoch')}{score})")
    if last.is_file():
        lines.append(f"  last        {_short(last)}")
    saved = saved_config(trainer, run)
    arg = lambda path: shell_word(_short(path))  # noqa: E731 (a command to paste: a path's spaces quoted)
    config = f"--config {arg(saved)} --ckpt_path {arg(pick)}"
    export = f"python -m vitlit export --ckpt_path {arg(pick)} --output {arg(run / 'model.onnx')}"
    commands = [export] if "export" in TOOLS else []
    if getattr(trainer.datamodule, "has_test_split", True):  # test and predict need one (predict: or a folder)
        env = _pythonpath(saved.read_text(encoding="utf-8") if saved.is_file() else "")
        commands[:0] = [f"{env}python -m vitlit test {config}", f"{env}python -m vitlit predict {config}"]
    chance = _near_chance(card, trainer)
    if chance:  # no test, predict or export commands for a model that learned nothing
        lines.append(f"  {'warning':<10}  {chance}")
    elif pick:
        lines += [f"  {'next' if i == 0 else '':<10}  {c}" for i, c in enumerate(commands)]
    return lines


def _pythonpath(config: str) -> str:
    """``PYTHONPATH=<folders> `` where a class ``config`` names was imported from a folder a new shell does not search.

    Such a folder (a fork's module beside the command, or in a folder of ``PYTHONPATH``) is on ``sys.path`` through
    ``PYTHONPATH`` or as the script's or current folder, its first entry; those of installed packages (site-packages,
    an editable install's) are on every Python's. Without it, the commands fail with "No module named ...".
    """
    given = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    lasting = {os.path.abspath(p) for p in sys.path[1:] if p} - given
    tops = [sys.modules.get(name.split(".")[0]) for name in re.findall(r"class_path: ['\"]?([\w.]+)", config)]
    where = [(list(getattr(m, "__path__", None) or []) or [getattr(m, "__file__", None)])[0] for m in tops]  # package
    needed = [f for f in dict.fromkeys(os.path.dirname(os.path.abspath(w)) for w in where if w) if f not in lasting]
    return f"PYTHONPATH={shell_word(os.pathsep.join(map(_short, needed)))} " if needed else ""


def _near_chance(card: dict[str, Any], trainer: Trainer) -> str | None:
    """Say so where the best val/acc is within noise of guessing: below 1/k plus three binomial standard errors."""
    k, best = trainer.lightning_module.hparams.get("num_classes"), card.get("best_val_acc")
    n = len(getattr(trainer.val_dataloaders, "dataset", None) or ())
    if not k or best is None or not n or best >= 1 / k + 3 * ((1 / k) * (1 - 1 / k) / n) ** 0.5:
        return None
    epochs = card.get("epochs_done") or 0
    helps = ["a pretrained start (configs/own_images.yaml; offline, its --model.pretrained_file)", "more images",
             "more epochs"]  # fmt: skip
    if epochs < 20:  # a short run first needs a longer one: nothing learns much in a few epochs
        helps = [f"more epochs (this run trained {epochs}; configs/own_images_scratch.yaml trains 100)", *helps[:2]]
    return (f"the best val/acc, {best:.2f} on {n} images, is within noise of guessing one of {k} classes "
            f"({1 / k:.2f}): the model learned little. What helps: {', '.join(helps)} "
            f"(docs/your-data.md: \"When a run learns nothing\")")  # fmt: skip


def _why_stopped(trainer: Trainer) -> str:
    """Why a ``fit`` that returned normally ended."""
    if any(isinstance(cb, EarlyStopping) and cb.stopping_reason != EarlyStoppingReason.NOT_STOPPED
           for cb in trainer.callbacks):  # fmt: skip
        return "early stop"
    timer = next((cb for cb in trainer.callbacks if isinstance(cb, Timer)), None)
    if timer is not None and timer.time_remaining() is not None and timer.time_remaining() <= 0:
        return "time budget"
    return "finished" if length_reached(trainer, trainer.current_epoch) else "stopped"


class SkippedImages(Callback):
    """List the images a data module left out (``--data.bad_images skip``) in the run's ``skipped_images.txt``.

    Reads the data module's ``skipped`` list (`vitlit.data.ImageFolderDataModule`) after each setup, appends the new
    entries (path and problem) and logs their count as ``data/skipped_images``.
    """

    #: The entries listed so far (this process's).
    listed: int = 0

    @rank_zero_only
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        skipped = getattr(trainer.datamodule, "skipped", None) or []
        if len(skipped) <= self.listed or not trainer.log_dir:
            return
        where = Path(trainer.log_dir)
        where.mkdir(parents=True, exist_ok=True)
        listed = where / "skipped_images.txt"
        # One line per file: a name's newlines, tabs and terminal escapes are written as escapes. A resume's process
        # starts its count afresh: the lines its run wrote are not written again.
        lines = [f"{shown(bad.path)}\t{shown(bad.problem)}\n" for bad in skipped[self.listed :]]
        there = set(listed.read_text(encoding="utf-8").splitlines(keepends=True)) if listed.is_file() else set()
        with listed.open("a", encoding="utf-8") as f:
            f.writelines(line for line in lines if line not in there)
        self.listed = len(skipped)
        for logger in trainer.loggers:
            logger.log_metrics({"data/skipped_images": float(len(skipped))}, step=0)
        rank_zero_info(f"vitlit: {len(skipped)} skipped image(s) listed in {where / 'skipped_images.txt'}")


class PredictionWriter(Callback):
    """Write what ``predict`` computes to ``<run>/predictions.csv``, one row per image, in data order.

    A plain callback, not Lightning's ``BasePredictionWriter``: that one makes Lightning track the data indices of
    every batch, and the rows are in data order without them.

    Columns: ``index`` (position in what was predicted: ``--data.predict_dir``'s images or the test split),
    ``source`` (the image file, where the data module knows it:
    `vitlit.data.ImageClassificationDataModule.files_of`), for the test split ``label`` (the true class) and
    ``correct`` (``true``/``false``), ``predicted`` (class name), ``confidence`` (its
    probability), then ``top2``, ``p_top2``, ... up to ``top_k``, then one ``p_<class>`` column per class. Class
    names are those the model was trained with (kept in its checkpoint). The file goes into the log folder of this
    ``predict`` (for a run's checkpoint, ``<run>/predict/version_K``), so earlier predictions are never overwritten.

    Args:
        filename: Name of the CSV file inside the run directory.
        probabilities: Also write every class's probability (one column per class).
        top_k: Name the ``top_k`` most probable classes of each image (1: only ``predicted``).
    """

    def __init__(self, filename: str = "predictions.csv", probabilities: bool = True, top_k: PositiveInt = 3) -> None:
        self.filename = filename
        self.probabilities = probabilities
        self.top_k = int(top_k)
        self._predictions: list[torch.Tensor] = []

    def on_predict_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._predictions = []

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._predictions.append(outputs.detach().float().cpu())

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        from vitlit.runs.prediction_table import write_predictions  # the CSV's code runs (and loads) in predict only

        probs, self._predictions = torch.cat(self._predictions), []
        write_predictions(trainer, pl_module, probs, self.filename, self.top_k, self.probabilities)
