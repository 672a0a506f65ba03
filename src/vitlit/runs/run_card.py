"""The run card: what a run was, where it ran and how it ended, in its folder as ``run_card.json`` and ``run_card.md``.

A number is only as good as the run behind it. Every ``fit`` keeps a card next to its checkpoints: the resolved
config, the code's git commit (and whether the checkout had uncommitted changes), package versions, device,
precision and seed, then what happened: wall time, epochs, the best validation accuracy and its epoch, throughput,
peak memory and why the run ended. The card is rewritten (atomically: a reader never sees half a file) after every
validation and every epoch, and when the run ends or stops. A resumed run updates the same card (its wall time
adds up), and a later ``test`` with one of the run's checkpoints fills in ``test_acc``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import EarlyStopping, Timer
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

import vitlit
from vitlit.runs.atomic import write_atomically
from vitlit.runs.distributed import effective_batch
from vitlit.runs.folders import run_of_checkpoint
from vitlit.runs.monitor import SpeedMonitor
from vitlit.runs.nonfinite import TrainingHalted
from vitlit.tools.env import versions

CARD = "run_card.json"
CARD_MD = "run_card.md"


def git_state(folder: Path) -> dict[str, Any]:
    """The commit of the git checkout holding ``folder`` and whether it has uncommitted changes; ``{}`` outside one."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {}
    changes = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(changes)}


def device_name(trainer: Trainer) -> str:
    """The training device as a person would name it (the GPU's model, or the CPU's)."""
    device = trainer.strategy.root_device
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def peak_host_memory_gib() -> float | None:
    """This process's peak resident memory (Linux, macOS); ``None`` where the OS does not say (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**30 if platform.system() == "Darwin" else peak / 2**20  # bytes on macOS, KiB on Linux


def read_card(run_dir: Path) -> dict[str, Any]:
    """The card of the run in ``run_dir``, or ``{}`` if it has none (or an unreadable one)."""
    try:
        card = json.loads((run_dir / CARD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return card if isinstance(card, dict) else {}


def write_card(run_dir: Path, card: dict[str, Any]) -> None:
    """Write ``run_card.json`` and its human-readable ``run_card.md`` into ``run_dir``."""
    write_atomically(run_dir / CARD, json.dumps(card, indent=2, default=str) + "\n")
    write_atomically(run_dir / CARD_MD, render_markdown(card))


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def render_markdown(card: dict[str, Any]) -> str:
    """A short Markdown summary of a card: the outcome first, then where and how the run ran."""
    commit = card.get("git_commit")
    code = f"{commit[:12]}{' (uncommitted changes)' if card.get('git_dirty') else ''}" if commit else "not in git"
    rows = [
        ("exit", card.get("exit_reason")),
        ("best val/acc", f"{_fmt(card.get('best_val_acc'))} (epoch {_fmt(card.get('best_epoch'))})"),
        ("test/acc", card.get("test_acc")),
        ("epochs", card.get("epochs_done")),
        ("wall time", f"{_fmt(card.get('wall_seconds'))} s"),
        ("images/s", card.get("images_per_sec")),
        ("peak memory", f"{_fmt(card.get('peak_memory_gib'))} GiB ({card.get('peak_memory_kind', '—')})"),
        ("model", card.get("model_name")),
        ("device", card.get("device")),
        ("processes", f"{_fmt(card.get('devices'))} device(s) x {_fmt(card.get('num_nodes'))} node(s)"),
        ("effective batch", card.get("effective_batch")),
        ("precision", card.get("precision")),
        ("seed", card.get("seed")),
        ("loggers", ", ".join(f"{g['logger']} {g['name']}/{g['run']}" for g in card.get("loggers") or []) or None),
        ("code", code),
        ("versions", ", ".join(f"{k} {v}" for k, v in (card.get("versions") or {}).items())),
    ]
    lines = [f"# Run card: {card.get('run_dir', '')}", "", "| | |", "| --- | --- |"]
    lines += [f"| {name} | {_fmt(value)} |" for name, value in rows]
    return (
        "\n".join(lines)
        + f"\n\nThe resolved config is `{card.get('config_file', 'config.yaml')}`; all fields: `{CARD}`.\n"
    )


class RunCard(Callback):
    """Keep ``run_card.json``/``run_card.md`` in the run's folder through ``fit``, and add ``test_acc`` in ``test``.

    Part of vitlit's shared settings (``src/vitlit/defaults.yaml``). Only the main process writes. The exit reason
    is one of ``running``, ``finished``, ``early stop``, ``time budget`` (``--trainer.max_time``), ``stopped`` (another
    callback asked to stop), ``SIGTERM`` (also a first Ctrl-C, which vitlit turns into one), ``non-finite`` (the NaN
    guard halted it), ``interrupted`` (a second Ctrl-C), ``pruned`` (a sweep stopped the trial) or ``error: ...``.
    """

    def __init__(self) -> None:
        self.card: dict[str, Any] = {}
        self.run_dir: Path | None = None
        self._started = 0.0
        self._wall_before = 0.0  # seconds of this run's earlier sessions (a resume adds to them)

    # -- fit ---------------------------------------------------------------------------------------------------------

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.fast_dev_run:  # a smoke test: Lightning writes no run folder, so there is no card to keep
            return
        # Every process asks: under DDP trainer.log_dir is the main process's folder, sent to all (a collective).
        run_dir = Path(trainer.log_dir or trainer.default_root_dir)
        if trainer.is_global_zero:
            self._start(trainer, pl_module, run_dir)

    def _start(self, trainer: Trainer, pl_module: LightningModule, run_dir: Path) -> None:
        self._started = time.monotonic()
        self.run_dir = run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        earlier: dict[str, Any] = {}
        if trainer.ckpt_path:  # a resume: this run's card, or that of the run it continues beside
            source = run_of_checkpoint(Path(trainer.ckpt_path).resolve())
            earlier = read_card(self.run_dir) or (read_card(source) if source is not None else {})
        self._wall_before = float(earlier.get("wall_seconds") or 0.0)
        hp = pl_module.hparams
        self.card = {
            **earlier,
            "run_dir": str(self.run_dir),
            "config_file": self._config_file(),
            "config": None,
            **git_state(Path(vitlit.__file__).parent),
            "versions": {**versions(), "vitlit": vitlit.__version__},
            "device": device_name(trainer),
            "precision": str(trainer.precision),
            "devices": trainer.num_devices,
            "num_nodes": trainer.num_nodes,
            "strategy": type(trainer.strategy).__name__,
            "seed": _seed(),
            "model_name": hp.get("model_name"),
            "resumed_from": str(trainer.ckpt_path) if trainer.ckpt_path else earlier.get("resumed_from"),
            # Where each logger put this run: for MLflow the experiment and run ids, for W&B the project and run id.
            "loggers": [
                {"logger": type(lg).__name__, "name": str(lg.name), "run": str(lg.version)} for lg in trainer.loggers
            ],
            "exit_reason": "running",
        }
        self.card.setdefault("epochs_done", 0)
        self.card.setdefault("best_epoch", None)
        self.card.setdefault("best_val_acc", None)
        self.card.setdefault("test_acc", None)
        self._write(trainer)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # After the batch size finder (on_fit_start), so the batch size is the one training uses.
        batch_size = getattr(trainer.datamodule, "batch_size", None)
        if not isinstance(batch_size, int):
            return
        total, parts = effective_batch(trainer, batch_size)
        if total != batch_size:  # say it where it differs from --data.batch_size: the learning rate depends on it
            rank_zero_info(f"vitlit: effective batch {total} ({parts})")
        if self.card:
            self.card["effective_batch"] = total
            self._write(trainer)

    @rank_zero_only
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or not self.card or trainer.state.fn != "fit":
            return
        value = trainer.callback_metrics.get("val/acc")
        if value is not None:
            value = float(value)  # one host read per validation
            best = self.card.get("best_val_acc")
            if best is None or value > best:
                self.card["best_val_acc"], self.card["best_epoch"] = value, trainer.current_epoch
        self._write(trainer)

    @rank_zero_only
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.card:
            self.card["epochs_done"] = trainer.current_epoch + 1
            self._write(trainer)

    @rank_zero_only
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.card:
            self.card["epochs_done"] = trainer.current_epoch
            self.card["exit_reason"] = _why_stopped(trainer)
            self._write(trainer)
            print(summary(self.card, trainer), file=sys.stderr)

    @rank_zero_only
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if not self.card or trainer.state.fn != "fit":
            return
        if isinstance(exception, SIGTERMException):
            reason = "SIGTERM"
        elif isinstance(exception, TrainingHalted):
            reason = "non-finite"
        elif isinstance(exception, KeyboardInterrupt):
            reason = "interrupted"
        elif type(exception).__name__ == "TrialPruned":  # Optuna stopped a sweep's trial (vitlit.tools.sweep)
            reason = "pruned"
        else:
            reason = f"error: {type(exception).__name__}"
        self.card["exit_reason"] = reason
        self._write(trainer)

    # -- test --------------------------------------------------------------------------------------------------------

    @rank_zero_only
    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Put ``test/acc`` on the card of the run whose checkpoint was tested (``test --ckpt_path <run>/...``)."""
        if not trainer.ckpt_path or "test/acc" not in trainer.callback_metrics:
            return
        ckpt = Path(trainer.ckpt_path).resolve()
        run = run_of_checkpoint(ckpt)
        if run is None or not (run / CARD).is_file():
            return
        card = read_card(run)
        card["test_acc"] = float(trainer.callback_metrics["test/acc"])
        card["test_checkpoint"] = str(ckpt.relative_to(run))
        write_card(run, card)

    # -- helpers ------------------------------------------------------------------------------------------------------

    def _config_file(self) -> str:
        """The config this session saved: ``config.yaml``, or ``config.resume-K.yaml`` for a resume."""
        saved = sorted(self.run_dir.glob("config*.yaml"), key=lambda p: p.stat().st_mtime) if self.run_dir else []
        return saved[-1].name if saved else "config.yaml"

    def _config(self) -> Any:
        path = self.run_dir / self.card.get("config_file", "config.yaml") if self.run_dir else None
        try:
            return yaml.safe_load(path.read_text(encoding="utf-8")) if path else None
        except (OSError, yaml.YAMLError):
            return None

    def _write(self, trainer: Trainer) -> None:
        if self.run_dir is None:
            return
        self.card["wall_seconds"] = round(self._wall_before + time.monotonic() - self._started, 1)
        speed = next((cb for cb in trainer.callbacks if isinstance(cb, SpeedMonitor)), None)
        rate = speed.average_images_per_sec if speed is not None else None
        if rate is not None:
            self.card["images_per_sec"] = round(rate, 1)
        device = trainer.strategy.root_device
        if device.type == "cuda":
            peak, kind = torch.cuda.max_memory_allocated(device) / 2**30, "CUDA allocated"
        else:
            peak, kind = peak_host_memory_gib(), "process peak RSS"
        if peak is not None:
            self.card["peak_memory_gib"] = round(max(peak, float(self.card.get("peak_memory_gib") or 0.0)), 3)
            self.card["peak_memory_kind"] = kind
        if self.card.get("config") is None:  # Lightning saves config.yaml at setup; read it once it is there
            self.card["config"] = self._config()
        write_card(self.run_dir, self.card)


def _short(path: str | Path) -> str:
    """``path`` relative to the current directory where it lies below it (what the user types), else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def summary(card: dict[str, Any], trainer: Trainer) -> str:
    """The lines a fit ends with: how it ended, where its checkpoints are, and the commands that use them."""
    run = Path(card["run_dir"])
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback is not None else ""
    last = run / "checkpoints" / "last.ckpt"
    pick = best or (str(last) if last.is_file() else "")
    rate = f", {card['images_per_sec']:,.0f} images/s" if card.get("images_per_sec") else ""
    lines = [
        f"vitlit: fit {card['exit_reason']} after {card['epochs_done']} epochs in {card['wall_seconds']:.0f} s{rate}",
        f"  run folder  {_short(run)}",
    ]
    if best:
        score = f", val/acc {card['best_val_acc']:.4f}" if card.get("best_val_acc") is not None else ""
        lines.append(f"  best        {_short(best)} (epoch {card.get('best_epoch')}{score})")
    if last.is_file():
        lines.append(f"  last        {_short(last)}")
    if pick:
        config = f"--config {_short(run / card['config_file'])} --ckpt_path {_short(pick)}"
        lines += [
            f"  next        python -m vitlit test {config}",
            f"              python -m vitlit predict {config}",
            f"              python -m vitlit export --ckpt_path {_short(pick)} --output {_short(run / 'model.onnx')}",
        ]
    return "\n".join(lines)


def _seed() -> int | None:
    seed = os.environ.get("PL_GLOBAL_SEED")  # set by Lightning's seed_everything (the CLI's seed_everything)
    return int(seed) if seed is not None and seed.lstrip("-").isdigit() else None


def _why_stopped(trainer: Trainer) -> str:
    """Why a ``fit`` that returned normally ended."""
    stopped_early = (
        isinstance(cb, EarlyStopping)
        and getattr(cb, "stopping_reason", None) not in (None, EarlyStoppingReason.NOT_STOPPED)
        for cb in trainer.callbacks
    )
    if any(stopped_early):
        return "early stop"
    timer = next((cb for cb in trainer.callbacks if isinstance(cb, Timer)), None)
    if timer is not None and timer.time_remaining() is not None and timer.time_remaining() <= 0:
        return "time budget"
    max_epochs, max_steps = trainer.max_epochs, trainer.max_steps
    if (max_epochs not in (None, -1) and trainer.current_epoch >= max_epochs) or (
        max_steps not in (None, -1) and trainer.global_step >= max_steps
    ):
        return "finished"
    return "stopped"
