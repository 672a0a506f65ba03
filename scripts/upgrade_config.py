"""Rewrite a run's config.yaml saved by vitlit 0.1 to 0.5 for vitlit 0.6, so that the run can be resumed or evaluated.

A saved config lists every class a run used by its path. 0.2 moved the parts into subpackages and 0.3 names each
callback by its module (``vitlit.runs.callbacks.Snapshots`` became ``vitlit.runs.snapshots.Snapshots``), does in the
CLI what four callbacks did (run folders, checked resume, preflight, the resume line), and lists every callback of a
default run in ``src/vitlit/defaults.yaml``, whose entries a saved list lacks are added. 0.4 has one image pipeline,
whose source the data module picks itself: the ``DeviceData`` callback is gone. In 0.5 ``label_smoothing: null``
means none, where it meant 0.1 before: a saved null becomes the 0.1 it trained with. 0.1 configs also get the model as a
``class_path`` and ``trainer.nonfinite`` as the NonFiniteGuard's ``action``. 0.6 names what things are:
``data.on_device: true|false|auto`` is ``data.source: memory|workers|auto``, and ``vitlit.fast`` (batch augmentation)
is ``vitlit.regularize``. The old file is kept beside it as ``<name>.old``.

    python scripts/upgrade_config.py lightning_logs/version_0/config.yaml [more files ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

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


def main(paths: list[str]) -> None:
    """Upgrade each file in place, keeping the original beside it."""
    for name in paths:
        path = Path(name)
        old = yaml.safe_load(path.read_text(encoding="utf-8"))
        new = upgrade(old)
        if new == old:
            print(f"{path}: already in 0.6's form")
            continue
        path.with_name(path.name + ".old").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        path.write_text(yaml.safe_dump(new, sort_keys=False), encoding="utf-8")
        print(f"{path}: upgraded (the old file is {path.name}.old)")


if __name__ == "__main__":
    main(sys.argv[1:])
