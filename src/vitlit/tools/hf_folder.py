"""``vitlit export --format timm``: a trained model as the folder timm and the Hugging Face hub share.

The folder is what timm's ``save_for_hf`` writes (``config.json`` with the architecture, the class names as
``label_names`` and the normalisation as ``pretrained_cfg``, and ``model.safetensors``) plus a ``README.md`` model
card. ``timm.create_model("local-dir:<folder>", pretrained=True)`` loads it, and so does ``hf-hub:<user>/<name>``
once uploaded. Like the other formats, it is written beside its destination, loaded back with timm alone, compared
with the checkpoint's logits, and takes its name only once it agrees.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import timm
import torch
from timm.models import save_for_hf  # timm's own writer of hub folders (push_to_hf_hub's too)

from vitlit.atomic import umask
from vitlit.checkpoints import read_checkpoint, run_of_checkpoint
from vitlit.data.images import PIL_MODES
from vitlit.errors import CheckFailed, ConfigError
from vitlit.owned import check_replaceable, staged_folder, write_manifest
from vitlit.run_dir import check_writable_folder, read_card
from vitlit.text import markdown, shown
from vitlit.trained import PREPROCESS, ModelCard

#: The manifest written into every folder this export makes (`vitlit.owned`): ``--overwrite true`` replaces a folder
#: only if it holds the files it lists, unchanged, and nothing else, so a mistyped ``--output`` (``.``, ``~``, a
#: project) or a planted marker never costs a user's file.
MARKER = ".vitlit-export"
#: A model card's license: one of the Hugging Face hub's identifiers (``mit``, ``apache-2.0``, ``cc-by-nc-4.0``,
#: ``other``), which go into the card's YAML front matter as they are.
LICENSE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")


def check_folder_output(output: Path, ckpt_path: Path, overwrite: bool, license: str) -> None:
    """Refuse a destination that is not a new folder or an earlier export's, and a license that is no identifier.

    Raises:
        ConfigError: For the current folder or one above it, a link, a file, the checkpoint's own folder, an existing
            folder without ``overwrite`` or one that an export did not write (or holds other files too).
    """
    if not LICENSE.fullmatch(license):
        raise ConfigError(f"--license {license!r} is not a license identifier of the Hugging Face hub; give "
                          f"one such as mit, apache-2.0, cc-by-4.0 or other (lowercase, digits, . + -).")  # fmt: skip
    output, ckpt = output.expanduser(), ckpt_path.expanduser().resolve()
    if str(output) in ("", "."):  # jsonargparse reads --output '' as the current folder
        raise ConfigError("--output names the current folder; give a new folder's name for the export, e.g. vit-timm.")
    if output.is_symlink():
        target = "a missing path" if not output.exists() else os.readlink(output)
        raise ConfigError(f"output={output} is a symbolic link (to {target}); give the path of a new folder instead.")
    output = output.absolute()
    if Path.cwd().resolve().is_relative_to(output.resolve()):
        raise ConfigError(f"output={output} holds the current folder; give a new folder's name, e.g. vit-timm.")
    if ckpt.is_relative_to(output.resolve()):
        raise ConfigError(f"output={output} holds the checkpoint being exported; give a new folder, e.g. vit-timm.")
    if output.exists() and not output.is_dir():
        raise ConfigError(f"output={output} is a file; --format timm writes a folder: give a new folder's name.")
    if output.exists() and not overwrite:
        raise ConfigError(f"output={output} already exists; pass --overwrite true to replace it, or choose another.")
    if output.exists():
        check_replaceable(output, MARKER, "output=", "vitlit export")
    check_writable_folder(output.parent, "--output")  # the runs' check (a missing folder: created by export)


def write_timm_folder(
    net: torch.nn.Module, card: ModelCard, batch: torch.Tensor, output: Path, ckpt_path: Path, license: str,
    tolerance: float, weights_only: bool | None = True,
) -> dict[str, Any]:  # fmt: skip
    """Write, load back with timm, compare on ``batch``, and move into ``output``; return the figures.

    Raises:
        CheckFailed: When timm's model from the folder disagrees with the checkpoint (nothing is left then).
    """
    output, ckpt_path = output.expanduser().absolute(), Path(ckpt_path).expanduser().absolute()
    with staged_folder(output) as staged:
        data_config = {"mean": _rounded(card.mean), "std": _rounded(card.std), "crop_pct": card.crop_pct,
                       "input_size": (card.in_chans, card.img_size, card.img_size),
                       "interpolation": card.interpolation}  # fmt: skip
        save_for_hf(net, str(staged), model_config={"label_names": list(card.class_names)}, data_config=data_config,
                    safe_serialization=True)  # fmt: skip
        # timm keeps the base model's pretrained_cfg: its license, tag, test-time sizes and crop mode (squash for
        # some) are not this model's; vitlit evaluated with a centre crop at input_size and crop_pct.
        config = json.loads((staged / "config.json").read_text(encoding="utf-8"))
        inherited = ("tag", "test_input_size", "test_crop_pct")
        cfg = {key: value for key, value in config["pretrained_cfg"].items() if key not in inherited}
        config["pretrained_cfg"] = cfg | {"license": license, "crop_mode": "center"}
        (staged / "config.json").write_text(json.dumps(config, indent=4) + "\n", encoding="utf-8")
        text = model_card(card, run_of_checkpoint(ckpt_path), license, output.name, ckpt_path, weights_only)
        (staged / "README.md").write_text(text, encoding="utf-8")  # `markdown` wrote undecodable bytes as escapes
        for file in staged.iterdir():  # safetensors writes its file for its owner alone (0600): as every other file
            os.chmod(file, 0o666 & ~umask())
        write_manifest(staged, MARKER)  # what --overwrite may replace later: these files, as they are now
        loaded = timm.create_model(f"local-dir:{staged}", pretrained=True).eval()
        with torch.no_grad():
            expected, got = net(batch), loaded(batch)
        difference = float((got - expected).abs().max())
        if not difference <= tolerance:  # NaN fails too
            raise CheckFailed(f"timm's model from the folder differs from the checkpoint by {difference:.2e} (more "
                              f"than {tolerance:g}); nothing was written to {output}")  # fmt: skip
        size = sum(p.stat().st_size for p in staged.iterdir())
    return {"max_abs_diff": difference, "bytes": size, "files": sorted(p.name for p in output.iterdir())}


def _tested(facts: dict[str, Any], checkpoint: Path | None) -> float | None:
    """The test accuracy the run card holds for this checkpoint file, not the last one tested nor an older file.

    A resume rewrites ``last.ckpt``: an accuracy recorded under its name with another size or modification time
    (`vitlit.runs.records.record_test`) is the older model's. A card from before those were recorded is taken as is.
    """
    if checkpoint is None:
        return None
    by_name, files = facts.get("test_acc_by_checkpoint"), facts.get("tested_files")
    tested = by_name.get(checkpoint.name) if isinstance(by_name, dict) else None
    recorded = files.get(checkpoint.name) if isinstance(files, dict) else None
    stat = checkpoint.stat()
    if recorded is not None and recorded != {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}:
        return None
    return tested if isinstance(tested, float) else None


def _saved_at(checkpoint: Path | None, weights_only: bool | None = True) -> str | None:
    """Where in its run a checkpoint was saved (``epoch 2, step 9``, as Lightning counts them), or ``None``.

    Read memory-mapped, as the export read it (``weights_only``); ``None`` where the file does not say.
    """
    try:
        saved = read_checkpoint(checkpoint, weights_only) if checkpoint is not None else {}
    except ConfigError:
        return None
    epoch, step = saved.get("epoch"), saved.get("global_step")
    counted = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (epoch, step))
    return f"epoch {epoch}, step {step}" if counted else None


def _rounded(values: Any) -> tuple[float, ...]:
    """Statistics as they were meant (0.485, not float32's 0.48500001430511475): six significant digits."""
    return tuple(float(f"{float(v):.6g}") for v in values)


def model_card(
    card: ModelCard, run: Path | None, license: str, name: str, checkpoint: Path | None = None,
    weights_only: bool | None = True,
) -> str:  # fmt: skip
    """The folder's README.md: what the model is, how it was trained and scored, how to load and upload it.

    Every text that comes from the data, the checkpoint or the run card (class names, the model's and folder's names,
    the run's facts) is written as literal Markdown text (`vitlit.text.markdown`), as a Python string literal in the
    code (``repr``) or as a quoted shell word: none of it can add HTML, a heading, a code fence or a front-matter key.
    ``license`` is an identifier (`check_folder_output`).
    """
    facts = read_card(run) if run else {}
    names = [markdown(c) for c in card.class_names[:20]]
    classes = ", ".join(names) + (f", ... ({len(card.class_names)} in all)" if len(card.class_names) > 20 else "")
    if isinstance(facts.get("versions"), dict):
        facts["versions"] = ", ".join(f"{k} {v}" for k, v in facts["versions"].items())
    tested = _tested(facts, checkpoint)
    facts["test_acc"] = "not measured for this checkpoint" if tested is None else f"{tested:.4f} (this checkpoint)"
    facts |= {key: f"{facts[key]:.4f}" for key in ("best_val_acc",) if isinstance(facts.get(key), float)}
    facts["saved_at"] = _saved_at(checkpoint, weights_only)
    # The run card's facts are the run's: this file may be an earlier snapshot than its best or last checkpoint.
    trained = [f"- {label}: {markdown(facts[key])}" for key, label in (
        ("saved_at", "this checkpoint"), ("epochs_done", "epochs the run trained"), ("seed", "seed"),
        ("precision", "precision"), ("effective_batch", "effective batch"),
        ("best_val_acc", "the run's best validation accuracy"), ("best_epoch", "at epoch"),
        ("test_acc", "test accuracy"), ("versions", "versions"), ("git_commit", "vitlit commit"))
        if facts.get(key) is not None]  # fmt: skip
    data = _data(run)
    recipe = "exported from a loose checkpoint"
    if run is not None:
        recipe = f"its options are the run's config.yaml (run folder {markdown(run.name)})"
    local, folder = repr(f"local-dir:{name}"), shlex.quote(shown(name))  # repr escapes what a terminal acts on
    return f"""---
library_name: timm
license: {license}
tags: [image-classification, timm, vitlit]
---
# {markdown(name)}

A timm Vision Transformer ({markdown(card.model_name)}, {card.img_size} px, {card.in_chans} channels) trained with
vitlit (PyTorch Lightning and timm) to classify {len(card.class_names)} classes: {classes}.

## Training

Trained with `python -m vitlit fit`; {recipe}.

{chr(10).join(trained) or "- (no run card was found beside the checkpoint)"}

## Data

{data}

## Use it with timm

```python
import numpy as np
import timm
from PIL import Image, ImageOps

model = timm.create_model({local}, pretrained=True).eval()  # or "hf-hub:<user>/<name>" once uploaded
config = timm.data.resolve_data_config({{}}, model=model)  # mean, std, input size, as trained
labels = model.pretrained_cfg["label_names"]


def open_as_trained(path):  # as training did: upright, 16-bit grey scaled to 8 bits (PIL's convert clips it to white)
    image = ImageOps.exif_transpose(Image.open(path))  # a photo taken sideways, as its viewer shows it
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N"):
        pixels = np.asarray(image, dtype=np.float64).clip(0, 65535) * (255 / 65535)
        image = Image.fromarray(pixels.round().astype(np.uint8))
    return image.convert({PIL_MODES.get(card.in_chans, "RGB")!r})
```

vitlit's own preprocessing, for inputs identical to training's evaluation: {PREPROCESS}.

## Upload

```sh
hf upload <user>/<name> {folder} .   # huggingface_hub's command line, or huggingface_hub.upload_folder
```

Check the license field above first: it is what you chose at export (`--license`), and must fit the data and any
pretrained weights used. The file {MARKER} lists the files the export wrote, with their hashes (`--overwrite` replaces
only such a folder, unchanged); leave it out of an upload if you like.
"""


def _data(run: Path | None) -> str:
    """What the model was trained on, from the run's config: the data module, the data set or folder, the splits."""
    import yaml

    try:
        config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) if run else None
        data = config["data"]
        module, options = data["class_path"].rpartition(".")[2], data.get("init_args") or {}
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError):
        return "- (the run's config.yaml was not found beside the checkpoint)"
    source = options.get("dataset") or options.get("path") or options.get("root") or options.get("input_dir")
    lines = [f"- data module: {markdown(module)}"]
    if source:  # a folder by its name only (the local path is nobody's business), a URL without its credentials
        source = str(source) if "://" in str(source) else Path(str(source)).name
        lines.append(f"- data: {markdown(source)}")
    held = (("val_size", "held out for validation"), ("test_size", "held out for test"), ("seed", "split seed"))
    for key, label in held:
        if options.get(key) is not None:
            lines.append(f"- {label}: {markdown(options[key])}")
    return "\n".join(lines)
