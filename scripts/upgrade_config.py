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

Only whole class paths are renamed (a ``class_path`` value, or a value that is an old path and nothing else), never
text inside another string (a user's ``my.vitlit.data.BatchAugment``, a folder of that name). The changes are made on
the file's own lines where they can be (its comments kept); where they cannot (0.1's model section, the callbacks
0.4 adds), the file is written anew and the line says that its comments are only in the ``.old`` copy. A config that
is a symbolic link is upgraded where it points (a shared config stays shared); one with other hard links is refused.

    python scripts/upgrade_config.py lightning_logs/version_0/config.yaml [more files ...]
"""

from __future__ import annotations

import copy
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

from vitlit.atomic import write_atomically
from vitlit.config import load_yaml
from vitlit.errors import ConfigError
from vitlit.text import shown

#: Class paths of 0.1 to 0.4 -> 0.5 (None: the CLI or the data module does it now, the callback is dropped).
MOVED = {
    "vitlit.callbacks.PredictionWriter": "vitlit.runs.records.PredictionWriter",
    "vitlit.runs.callbacks.PredictionWriter": "vitlit.runs.records.PredictionWriter",
    "vitlit.callbacks.RNGStateCheckpoint": "vitlit.runs.checkpoint_io.RNGStateCheckpoint",
    "vitlit.runs.callbacks.RNGStateCheckpoint": "vitlit.runs.checkpoint_io.RNGStateCheckpoint",
    "vitlit.callbacks.Snapshots": "vitlit.runs.snapshots.Snapshots",
    "vitlit.runs.callbacks.Snapshots": "vitlit.runs.snapshots.Snapshots",
    "vitlit.runs.callbacks.SkippedImages": "vitlit.runs.records.SkippedImages",
    "vitlit.monitor.SpeedMonitor": "vitlit.runs.monitor.SpeedMonitor",
    "vitlit.monitor.WeightHistograms": "vitlit.runs.histograms.WeightHistograms",
    "vitlit.runs.monitor.WeightHistograms": "vitlit.runs.histograms.WeightHistograms",
    "vitlit.run_card.RunCard": "vitlit.runs.records.RunCard",
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
    "vitlit.runs.bar.ProgressBar": "vitlit.runs.progress.ProgressBar",  # 0.6: Rich's bar beside the epoch lines
    # 0.6.x: the run's records in one module, the random state beside the checkpoint's writer (old paths still load).
    "vitlit.runs.logs.SkippedImages": "vitlit.runs.records.SkippedImages",
    "vitlit.runs.predictions.PredictionWriter": "vitlit.runs.records.PredictionWriter",
    "vitlit.runs.run_card.RunCard": "vitlit.runs.records.RunCard",
    "vitlit.runs.resume.RNGStateCheckpoint": "vitlit.runs.checkpoint_io.RNGStateCheckpoint",
}
DEFAULTS = Path(__file__).resolve().parents[1] / "src" / "vitlit" / "defaults.yaml"
#: 0.5's ``data.on_device`` -> 0.6's ``data.source``.
SOURCES = {True: "memory", False: "workers", "auto": "auto"}
USAGE = "usage: python scripts/upgrade_config.py CONFIG.yaml [more files ...]"
#: A line whose value is one dotted name: ``- class_path: a.b.C``, ``- a.b.C``, ``key: a.b.C`` (quoted or not).
_NAMED = re.compile(r"^(?P<lead>[ \t]*(?P<dash>-[ \t]+)?(?:[\w.\-]+:[ \t]+)?)(?P<q>[\"']?)(?P<value>[\w.]+)(?P=q)"
                    r"(?P<tail>[ \t]*(?:#.*)?)$")  # fmt: skip
#: A line setting one of the keys the upgrade gives a new value: ``on_device: true``, ``label_smoothing: null``.
_KEY = re.compile(r"^(?P<lead>[ \t]*)(?P<key>on_device|label_smoothing):(?P<value>[^#\n]*?)(?P<tail>[ \t]*(?:#.*)?)$")
#: A comment: a ``#`` at the start of a line or after a blank (inside a quoted value it is text, which only makes
#: the upgrade say that the comments are in the ``.old`` copy when there are none).
_COMMENT = re.compile(r"(?m)(?:^|[ \t])#")


def _path(entry: object) -> str | None:
    return entry if isinstance(entry, str) else entry.get("class_path") if isinstance(entry, dict) else None


def _renamed(node: Any) -> Any:
    """``node`` with every value that is an old class path, whole, renamed; text inside other strings is left."""
    if isinstance(node, dict):
        return {key: _renamed(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_renamed(value) for value in node]
    if isinstance(node, str) and MOVED.get(node) is not None:
        return MOVED[node]
    return node  # a dropped callback's path stays, for `upgrade` to drop its entry


def upgrade(config: dict) -> dict:
    """The 0.6 form of a 0.1 to 0.5 config (a parsed YAML mapping); an upgraded config comes back unchanged."""
    config = _renamed(config)
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


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _edited(text: str, new: dict) -> str | None:
    """``text`` with the upgrade made on its own lines, comments kept; None where its lines cannot say ``new``.

    Old class paths are renamed, a dropped callback's list entry removed with its lines, ``on_device`` and a null
    ``label_smoothing`` given their new values. The result counts only where it reads back as ``new`` exactly.
    """
    kept, dropped = [], None
    try:
        for line in text.splitlines(keepends=True):
            if dropped is not None and (not line.strip() or _indent(line) > dropped):
                continue  # a line of the dropped entry (its init_args), or a blank line within it
            dropped, body = None, line.rstrip("\r\n")
            end = line[len(body) :]
            if (named := _NAMED.match(body)) and named["value"] in MOVED:
                if MOVED[named["value"]] is None and named["dash"]:  # a callback the CLI does now: its entry goes
                    dropped = _indent(line)
                    continue
                if MOVED[named["value"]] is not None:
                    line = f"{named['lead']}{named['q']}{MOVED[named['value']]}{named['q']}{named['tail']}{end}"
            elif (key := _KEY.match(body)) and key["key"] == "on_device":
                source = SOURCES.get(yaml.safe_load(key["value"] or "null"), "auto")
                line = f"{key['lead']}source: {source}{key['tail']}{end}"
            elif key and yaml.safe_load(key["value"] or "null") is None:  # label_smoothing: null meant 0.1 up to 0.4
                line = f"{key['lead']}label_smoothing: 0.1{key['tail']}{end}"
            kept.append(line)
        edited = "".join(kept)
        return edited if yaml.safe_load(edited) == new else None
    except yaml.YAMLError:  # a value the lines cannot be edited around: the file is written anew
        return None


def _target(path: Path) -> Path:
    """The file to rewrite: ``path``, or the file a symbolic link ``path`` names (a shared config stays shared).

    A file with other hard links is refused: replacing it would leave the other names with the old config.
    """
    target = path.resolve() if path.is_symlink() else path
    try:
        links = target.stat().st_nlink
    except OSError:
        return target  # `_read` says why it cannot be read
    if links > 1:
        raise ConfigError(f"{path} has {links - 1} other hard link(s), which an upgrade would leave as they are; "
                          f"upgrade a copy and link the other names to it.")  # fmt: skip
    return target


def _backup(path: Path, data: bytes, mode: int) -> Path:
    """Write ``data`` to a new file beside ``path``: ``<name>.old``, or ``.old.1``, ... where one exists already.

    Created exclusively: a backup never replaces a file, an earlier backup or one of the user's own included. It gets
    the file's ``mode``: a config only its owner may read stays so in its copy.
    """
    for n in range(1000):
        backup = path.with_name(f"{path.name}.old" + (f".{n}" if n else ""))
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return backup
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
    if not paths or paths[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if paths else sys.stderr)
        raise SystemExit(0 if paths else 2)
    for name in paths:
        path = Path(name)
        try:
            target = _target(path)
            data, old = _read(target)
            try:
                new = upgrade(copy.deepcopy(old))
            except (AttributeError, TypeError, KeyError) as err:  # a section of another shape (a list, a number)
                raise ConfigError(f"{path} is not a config of vitlit 0.1 to 0.6 ({type(err).__name__}: {err}); "
                                  f"give a run's config.yaml.") from None  # fmt: skip
            if new == old:
                print(f"{shown(path)}: already in 0.6's form")
                continue
            mode = stat.S_IMODE(target.stat().st_mode)
            backup = _backup(target, data, mode)
        except ConfigError as err:
            print(f"upgrade_config: error: {shown(err)}", file=sys.stderr)
            raise SystemExit(2) from None
        text = data.decode("utf-8")
        edited = _edited(text, new)
        write_atomically(target, edited if edited is not None else yaml.safe_dump(new, sort_keys=False))
        os.chmod(target, mode)  # a new file gets the umask's mode: a shared config keeps its own
        where = f" through the link to {shown(target)}" if target != path else ""
        old_file = shown(backup.name if target == path else backup)
        lost = edited is None and _COMMENT.search(text)
        said = ", the only copy of its comments: the upgrade rewrote the whole file" if lost else ""
        print(f"{shown(path)}: upgraded{where} (the old file is {old_file}{said})")


if __name__ == "__main__":
    main(sys.argv[1:])
