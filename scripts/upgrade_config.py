"""Rewrite a run's config.yaml saved by vitlit 0.1 for vitlit 0.2, so that the run can be resumed or evaluated.

0.2 moved the opt-in parts into subpackages (class paths such as ``vitlit.monitor.SpeedMonitor`` became
``vitlit.runs.monitor.SpeedMonitor``), made the model a ``class_path`` (``vitlit.model.ViTClassifier``), replaced
``trainer.nonfinite`` by the NonFiniteGuard callback's ``action``, and added callbacks of the parts (run folders,
preflight, the device path) that a 0.1 config's callback list lacks. The old file is kept as ``<name>.v0.1``.

    python scripts/upgrade_config.py lightning_logs/version_0/config.yaml [more files ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

MOVED = {
    "atomic": "runs.atomic", "callbacks": "runs.callbacks", "checkpoint_io": "runs.checkpoint_io",
    "distributed": "runs.distributed", "interrupts": "runs.interrupts", "monitor": "runs.monitor",
    "nonfinite": "runs.nonfinite", "progress": "runs.progress", "run_card": "runs.run_card",
    "attention": "tools.attention", "env": "tools.env", "export": "tools.export", "serve": "tools.serve",
    "sweep": "tools.sweep", "distill": "transfer.distill", "finetune": "transfer.finetune",
    "data.batch_augment": "fast.batch_augment", "data.device": "fast.device", "data.policies": "fast.policies",
    "data.BatchAugment": "fast.BatchAugment",
}  # fmt: skip
PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vitlit"
_OLD = re.compile(r"\bvitlit\.(" + "|".join(re.escape(k) for k in sorted(MOVED, key=len, reverse=True)) + r")\b")


def upgrade(config: dict) -> dict:
    """The 0.2 form of a 0.1 config (a parsed YAML mapping); a 0.2 config comes back unchanged."""
    text = _OLD.sub(lambda m: "vitlit." + MOVED[m.group(1)], yaml.safe_dump(config, sort_keys=False))
    config = yaml.safe_load(text)
    trainer = config.get("trainer") or {}
    if "nonfinite" in trainer:  # a 0.1 config: it lists the callbacks without those the 0.2 parts add
        listed = {cb.get("class_path") for cb in trainer.get("callbacks") or [] if isinstance(cb, dict)}
        for part in sorted(PACKAGE.glob("*/defaults.yaml")):
            shared = (yaml.safe_load(part.read_text(encoding="utf-8")) or {}).get("trainer") or {}
            added = [cb for cb in shared.get("callbacks+") or [] if cb["class_path"] not in listed]
            trainer["callbacks"] = [*(trainer.get("callbacks") or []), *added]
            if shared.get("plugins") and not trainer.get("plugins"):
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
    return config


def main(paths: list[str]) -> None:
    """Upgrade each file in place, keeping the original beside it."""
    for name in paths:
        path = Path(name)
        old = yaml.safe_load(path.read_text(encoding="utf-8"))
        new = upgrade(old)
        if new == old:
            print(f"{path}: already in 0.2's form")
            continue
        path.with_name(path.name + ".v0.1").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        path.write_text(yaml.safe_dump(new, sort_keys=False), encoding="utf-8")
        print(f"{path}: upgraded (the 0.1 file is {path.name}.v0.1)")


if __name__ == "__main__":
    main(sys.argv[1:])
