"""Rewrite a run's config.yaml saved by vitlit 0.1 to 0.5 for vitlit 0.6, so that the run can be resumed or evaluated.

A saved config lists every class a run used by its path. 0.2 moved the parts into subpackages and 0.3 names each
callback by its module (``vitlit.runs.callbacks.Snapshots`` became ``vitlit.runs.snapshots.Snapshots``), does in the
CLI what four callbacks did (run folders, checked resume, preflight, the resume line), and lists every callback of a
default run in ``src/vitlit/defaults.yaml``, whose entries a saved list lacks are added. 0.4 has one image pipeline,
whose source the data module picks itself: the ``DeviceData`` callback is gone. In 0.5 ``label_smoothing: null``
means none, where it meant 0.1 before: a saved null becomes the 0.1 it trained with. 0.1 configs also get the model as a
``class_path`` and ``trainer.nonfinite`` as the NonFiniteGuard's ``action``. 0.6 names what things are:
``data.on_device: true|false|auto`` is ``data.source: memory|workers|auto``, and ``vitlit.fast`` (batch augmentation)
is ``vitlit.regularize``. The old file is kept beside it as ``<name>.old`` (``.old.1``, ... where that exists: a backup
never replaces a file). A file that cannot be upgraded is one line and status 2.

    python scripts/upgrade_config.py lightning_logs/version_0/config.yaml [more files ...]
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import yaml

from vitlit.atomic import write_atomically
from vitlit.config import load_yaml
from vitlit.errors import ConfigError
from vitlit.text import shown

#: Class paths of 0.1 to 0.4 -> 0.5 (None: the CLI or the data module does it now, the callback is dropped).
MOVED = {
    "vitlit.callbacks.PredictionWriter": "vitlit.runs.predictions.PredictionWriter",
    "vitlit.runs.callbacks.PredictionWriter": "vitlit.runs.predictions.PredictionWriter",
    "vitlit.callbacks.RNGStateCheckpoint": "vitlit.runs.resume.RNGStateCheckpoint",
    "vitlit.runs.callbacks.RNGStateCheckpoint": "vitlit.runs.resume.RNGStateCheckpoint",
    "vitlit.callbacks.Snapshots": "vitlit.runs.snapshots.Snapshots",
    "vitlit.runs.callbacks.Snapshots": "vitlit.runs.snapshots.Snapshots",
    "vitlit.runs.callbacks.SkippedImages": "vitlit.runs.logs.SkippedImages",
    "vitlit.monitor.SpeedMonitor": "vitlit.runs.monitor.SpeedMonitor",
    "vitlit.monitor.WeightHistograms": "vitlit.runs.histograms.WeightHistograms",
    "vitlit.runs.monitor.WeightHistograms": "vitlit.runs.histograms.WeightHistograms",
    "vitlit.run_card.RunCard": "vitlit.runs.run_card.RunCard",
    "vitlit.nonfinite.NonFiniteGuard": "vitlit.runs.nonfinite.NonFiniteGuard",
    "vitlit.runs.NonFiniteGuard": "vitlit.runs.nonfinite.NonFiniteGuard",
    "vitlit.progress.DefaultBar": "vitlit.runs.progress.DefaultBar",
    "vitlit.interrupts.StopTogetherOnSigterm": "vitlit.runs.ddp.StopTogetherOnSigterm",
    "vitlit.runs.interrupts.StopTogetherOnSigterm": "vitlit.runs.ddp.StopTogetherOnSigterm",
    "vitlit.checkpoint_io.AtomicCheckpointIO": "vitlit.runs.checkpoint_io.AtomicCheckpointIO",
    "vitlit.fast.DeviceData": None,
    "vitlit.data.DeviceData": None,
    "vitlit.fast.loader.DeviceData": None,
    "vitlit.fast.BatchAugment": "vitlit.regularize.batch_augment.BatchAugment",
    "vitlit.data.BatchAugment": "vitlit.regularize.batch_augment.BatchAugment",
    "vitlit.data.batch_augment.BatchAugment": "vitlit.regularize.batch_augment.BatchAugment",
    "vitlit.distill.Distillation": "vitlit.transfer.distill.Distillation",
    "vitlit.distill.DistilledViTClassifier": "vitlit.transfer.distill.DistilledViTClassifier",
    "vitlit.finetune.FreezeSchedule": "vitlit.transfer.finetune.FreezeSchedule",
    "vitlit.runs.resume.CheckedResume": None,
    "vitlit.runs.preflight.Preflight": None,
    "vitlit.runs.placement.RunFolders": None,
    "vitlit.runs.interrupts.ResumableStop": None,
    "vitlit.runs.callbacks.LogEveryEpoch": None,
    "vitlit.fast.batch_augment.BatchAugment": "vitlit.regularize.batch_augment.BatchAugment",
}
DEFAULTS = Path(__file__).resolve().parents[1] / "src" / "vitlit" / "defaults.yaml"
#: 0.5's ``data.on_device`` -> 0.6's ``data.source``.
SOURCES = {True: "memory", False: "workers", "auto": "auto"}


def _path(entry: object) -> str | None:
    return entry if isinstance(entry, str) else entry.get("class_path") if isinstance(entry, dict) else None


def upgrade(config: dict) -> dict:
    """The 0.6 form of a 0.1 to 0.5 config (a parsed YAML mapping); an upgraded config comes back unchanged."""
    text = yaml.safe_dump(config, sort_keys=False)
    for old, new in MOVED.items():
        if new is not None:
            text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    config = yaml.safe_load(text)
    trainer = config.get("trainer") or {}
    callbacks = [c for c in trainer.get("callbacks") or [] if _path(c) not in MOVED]  # what the CLI does now
    if "callbacks" in trainer:
        trainer["callbacks"] = callbacks
    if callbacks and any(str(_path(c)).startswith("vitlit.") for c in callbacks):  # a saved list: add what 0.4 adds
        shared = yaml.safe_load(DEFAULTS.read_text(encoding="utf-8"))["trainer"]
        listed = {_path(c) for c in callbacks}
        added = [c for c in shared["callbacks"] if str(c).startswith("vitlit.") and _path(c) not in listed]
        if added:
            trainer["callbacks"] = [*callbacks, *added]
        if not trainer.get("plugins"):
            trainer["plugins"] = shared["plugins"]
    action = trainer.pop("nonfinite", None)
    if action not in (None, "stop"):  # the shared guard stops; another action is a guard of its own
        guard = {"class_path": "vitlit.runs.nonfinite.NonFiniteGuard", "init_args": {"action": action}}
        trainer["callbacks"] = [*(trainer.get("callbacks") or []), guard]
    model = config.get("model")
    if isinstance(model, dict) and "class_path" not in model:
        distillation = model.pop("distillation", None)
        name = "vitlit.transfer.distill.DistilledViTClassifier" if distillation else "vitlit.model.ViTClassifier"
        config["model"] = {
            "class_path": name,
            "init_args": {**model, **({"distillation": distillation} if distillation else {})},
        }
    init = (config.get("model") or {}).get("init_args") or {}
    if "label_smoothing" in init and init["label_smoothing"] is None and init.get("loss") is None:
        init["label_smoothing"] = 0.1  # what null meant up to 0.4
    data = (config.get("data") or {}).get("init_args") or {}
    if "on_device" in data:  # 0.6: the option says what it chooses, the source of the images
        data["source"] = SOURCES.get(data.pop("on_device"), "auto")
    return config


def _backup(path: Path, data: bytes) -> Path:
    """Write ``data`` to a new file beside ``path``: ``<name>.old``, or ``.old.1``, ... where one exists already.

    Created exclusively: a backup never replaces a file, an earlier backup or one of the user's own included.
    """
    for n in range(1000):
        backup = path.with_name(f"{path.name}.old" + (f".{n}" if n else ""))
        try:
            with backup.open("xb") as f:
                f.write(data)
            return backup
        except FileExistsError:
            continue
    raise ConfigError(f"{path}: {path.name}.old to .old.999 all exist; move some of them away.")


def _read(path: Path) -> tuple[bytes, dict]:
    """The file's bytes and its config, read by the CLI's own bounded YAML loader, or one line saying why not."""
    try:
        data = path.read_bytes()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(f"{path} cannot be read ({reason}); give a run's config.yaml.") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; give a run's config.yaml.") from None
    config = load_yaml(text, str(path))  # the bounds on size and aliases, and no Python tags: as `vitlit fit` reads
    if not isinstance(config, dict) or not config:
        what = "is empty" if config is None else f"holds a {type(config).__name__}, not a mapping of options"
        raise ConfigError(f"{path} {what}; give a run's config.yaml (model, data, trainer).")
    return data, config


def main(paths: list[str]) -> None:
    """Upgrade each file in place, keeping the original beside it; a file it cannot upgrade is one line, status 2."""
    for name in paths:
        path = Path(name)
        try:
            data, old = _read(path)
            try:
                new = upgrade(copy.deepcopy(old))
            except (AttributeError, TypeError, KeyError) as err:  # a section of another shape (a list, a number)
                raise ConfigError(f"{path} is not a config of vitlit 0.1 to 0.6 ({type(err).__name__}: {err}); "
                                  f"give a run's config.yaml.") from None  # fmt: skip
            if new == old:
                print(f"{shown(path)}: already in 0.6's form")
                continue
            backup = _backup(path, data)
        except ConfigError as err:
            print(f"upgrade_config: error: {shown(err)}", file=sys.stderr)
            raise SystemExit(2) from None
        write_atomically(path, yaml.safe_dump(new, sort_keys=False))
        print(f"{shown(path)}: upgraded (the old file is {shown(backup.name)})")


if __name__ == "__main__":
    main(sys.argv[1:])
