"""``vitlit prepare``: any data module's splits written as LitData chunks, for `vitlit.data.streaming`.

    python -m vitlit prepare --data ImageFolderDataModule --data.root ~/photos --output ~/photos-chunks
    python -m vitlit prepare --data vitlit.data.cifar.CIFARDataModule --output s3://bucket/cifar10

The data module is read as a fit reads it (its checks, its seeded validation split, its test split where it has
one), and each split is written with ``litdata.optimize`` into ``<output>/train``, ``val`` and ``test``, with vitlit's
description of the data beside them (class names, channels, format, size, statistics). Needs the ``streaming``
extra (``pip install -e ".[streaming]"``).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import torch
from PIL import Image

from vitlit.config import PositiveInt
from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.images import PIL_MODES
from vitlit.data.pipeline import ToStoredImage
from vitlit.data.streaming import (
    MANIFEST,
    SPLITS,
    WRITE_SCHEMES,
    StreamingDataModule,
    check_scheme,
    litdata,
    optimize,
    read_meta,
    write_meta,
)
from vitlit.errors import ConfigError
from vitlit.owned import check_replaceable, digest, folders_made_for, staged_folder, write_manifest
from vitlit.text import say, shown

#: LitData's units of ``chunk_bytes`` (decimal, as its own parser reads them), and a bare number of bytes.
UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
         "tb": 10**12}  # fmt: skip


class Item:
    """Sample ``i`` of a split, as LitData stores it: the image (uint8 array or encoded bytes), label and position.

    Picklable, for ``litdata.optimize``'s worker processes.
    """

    def __init__(self, split: Any, targets: list[int], files: list[str] | None, decode: ToStoredImage | None) -> None:
        self.split, self.targets, self.files, self.decode = split, targets, files, decode

    def __call__(self, i: int) -> dict[str, Any]:
        image = self.split.dataset[self.split.indices[i]][0]
        if self.decode is not None:  # raw: the uint8 image at the stored size
            return {"image": self.decode(image).numpy(), "label": self.targets[i], "index": i}
        # encoded: the image's own bytes, as the data set holds them. A data set that embeds its images says which
        # bytes (`encoded`: a Hugging Face row's, never a file its row names outside the data set); elsewhere the
        # files are those the data module listed and admitted (an image folder's, a table's rows inside its root).
        own = getattr(self.split.dataset, "encoded", None)
        file = own(self.split.indices[i]) if own is not None else Path(self.files[i]) if self.files else None
        if isinstance(file, bytes):
            return {"image": file, "label": self.targets[i], "index": i}
        if file is not None and file.is_file():
            return {"image": file.read_bytes(), "label": self.targets[i], "index": i}
        if not isinstance(image, Image.Image):  # a tensor: encoded losslessly
            image = Image.fromarray(image.permute(1, 2, 0).squeeze(-1).numpy())
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return {"image": buffer.getvalue(), "label": self.targets[i], "index": i}


def prepare(
    data: ImageClassificationDataModule,
    output: str,
    format: Literal["raw", "encoded"] = "raw",
    chunk_bytes: str = "64MB",
    num_workers: PositiveInt = 1,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write a data module's splits as LitData chunks for ``--data vitlit.data.streaming.StreamingDataModule``.

    Args:
        data: The data module and its options, as for ``fit`` (``--data ImageFolderDataModule --data.root ...``).
        output: A new folder outside the data's own, or a URL LitData writes to (``s3://bucket/name``,
            ``gs://...``, ``r2://...``).
        format: ``raw``: each image as uint8 at the size its split is handed over at (its own where all share one,
            else training's ``--data.store_size`` or ``--data.img_size``, evaluation's ``floor(img_size /
            crop_pct)``): nothing to decode while training. ``encoded``: each image's file as it is
            (PNG of the decoded image where there is no file): smaller, decoded by the workers in training at the
            stored size (``--data.store_size``), as the in-memory source stores them.
        chunk_bytes: Size of each chunk file (LitData's ``chunk_bytes``): bytes, or with a unit (``64MB``).
        num_workers: Processes writing chunks.
        overwrite: Replace a data set an earlier ``prepare`` wrote at ``output``.

    Returns:
        The description written beside the splits.
    """
    if isinstance(data, StreamingDataModule):
        raise ConfigError(f"--data StreamingDataModule is a data set vitlit prepare wrote ({data.input_dir}); give "
                          f"the data module it was prepared from.")  # fmt: skip
    if data.in_chans not in PIL_MODES:  # vitlit's description names the channels of an image file, 1, 3 or 4
        raise ConfigError(f"--data.in_chans {data.in_chans}: vitlit prepare writes images of 1, 3 or 4 "
                          f"channels, as image files hold them; train from "
                          f"{type(data).__name__} itself instead of from prepared chunks.")  # fmt: skip
    check_scheme(output, "--output", WRITE_SCHEMES)  # another would be a local folder named after the URL
    size = chunk_size(chunk_bytes)
    local = Path(output).expanduser()
    if "://" in output:
        with sigterm_stops():
            meta = _write(data, output, format, size, num_workers, overwrite)
    else:
        if local.is_symlink():  # a link (dangling or not) would have the data set written where it points
            raise ConfigError(f"--output {output} is a symbolic link; give the path of a new folder instead.")
        check_outside(data, local)
        if local.exists() and not local.is_dir():
            raise ConfigError(f"--output {output} is a file, not a folder; give the path of a new folder.")
        if local.exists() and not overwrite:
            raise ConfigError(f"--output {output} exists; pass --overwrite true to replace an earlier prepare, or "
                              f"choose a new folder.")  # fmt: skip
        if local.exists():
            check_replaceable(local, MANIFEST, "--output", "vitlit prepare")
        output = str(local.absolute())
        # Whole or not at all: a kill leaves the earlier data set intact, and SIGTERM the staged copy removed.
        with folders_made_for(Path(output).parent), sigterm_stops(), staged_folder(Path(output)) as staged:
            meta = _write(data, str(staged), format, size, num_workers, False)
            write_manifest(staged, MANIFEST)
    for name, count in meta["splits"].items():
        say(f"vitlit: wrote {name}: {count:,} images to {output}/{name}")
    say(f"vitlit: train from it with --data vitlit.data.streaming.StreamingDataModule --data.input_dir {output}")
    return json.loads(json.dumps(meta))


def unlabelled_test(data: ImageClassificationDataModule) -> int:
    """The size of the data module's own test split where every image of it is unlabelled (-1, the hub's mark), else 0.

    A test split held out of training is labelled; one partly unlabelled is refused by ``setup("test")``, naming an
    image.
    """
    if not data.has_test_split or type(data).test_dataset is ImageClassificationDataModule.test_dataset:
        return 0
    test = data.test_dataset()  # None (the base's, through super()) is refused by setup("test")
    targets = [] if test is None else data.targets_of(test)
    return len(targets) if len(targets) and all(target == -1 for target in targets) else 0


def chunk_size(chunk_bytes: str) -> int:
    """``--chunk_bytes`` in bytes (``64MB``, ``1GB``, ``500000``), or one line saying what a size is.

    Read before LitData's writer starts: its own refusal of 0 came back as its worker's traceback, naming the hidden
    folder the output is staged in.
    """
    found = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([a-z]*)\s*", str(chunk_bytes).lower())
    size = int(float(found.group(1)) * UNITS[found.group(2)]) if found and found.group(2) in UNITS else 0
    if size < 1:
        raise ConfigError(f"--chunk_bytes {shown(chunk_bytes)} is no size of a chunk; give a positive size such as "
                          f"64MB (units B, KB, MB, GB, TB).")  # fmt: skip
    return size


def check_outside(data: ImageClassificationDataModule, output: Path) -> None:
    """Refuse an output folder inside the folder the data module reads (links resolved), or around it.

    Inside, the chunks would become part of the data: the next ``fit`` of the same root read ``chunks/`` as a class
    folder and failed. Around it, ``--overwrite`` would replace the data with the chunks. The data's folder is its
    ``root`` (image folders, tables, forks) or its ``data_dir`` (CIFAR, SVHN).
    """
    out = output.resolve()
    for flag in ("root", "data_dir"):
        root = getattr(data, flag, None)
        if not isinstance(root, (str, Path)) or "://" in str(root):
            continue
        root = Path(root).expanduser().resolve()
        if out.is_relative_to(root):
            raise ConfigError(f"--output {output} is inside --data.{flag} {root}, so the chunks would become part of "
                              f"the data it reads; give a folder outside it.")  # fmt: skip
        if root.is_relative_to(out):
            raise ConfigError(f"--output {output} holds --data.{flag} {root}, which writing it would replace; give a "
                              f"folder outside the data.")  # fmt: skip


@contextlib.contextmanager
def sigterm_stops() -> Iterator[None]:
    """SIGTERM (a job's time limit, ``kill``) ends the write as Ctrl-C does: the staged copy removed, status 143."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (a notebook's worker): the default stays
        yield
        return
    try:
        yield
    except SystemExit as stopped:
        if stopped.code == 128 + signal.SIGTERM:
            say("vitlit: prepare stopped by SIGTERM; nothing was kept", error=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _write(
    data: ImageClassificationDataModule, output: str, format: str, chunk_bytes: int, num_workers: int, overwrite: bool
) -> dict[str, Any]:
    """Write the splits and vitlit's description into ``output``; return the description."""
    litdata()  # where LitData is missing, one line before any data is read
    data.prepare_data()  # as a fit's Trainer does first: CIFAR's and SVHN's download, or their archive extracted
    data.setup("fit")
    splits = {"train": data.train_set, "val": data.val_set}
    unlabelled = unlabelled_test(data)
    if unlabelled:  # a fit leaves such a split alone, and a streamed test would have nothing to score
        say(f"vitlit: the test split of {type(data).__name__} is unlabelled (its {unlabelled:,} images are -1): not "
            f"written; predict it from {type(data).__name__} itself")  # fmt: skip
    elif data.has_test_split:
        data.setup("test")
        splits["test"] = data.test_set
    # Raw: each split at the size the data module's own sources store it (training's, evaluation's
    # floor(img_size / crop_pct)), so a streamed evaluation crops the pixels a folder's evaluation crops.
    sizes = {"train": data.stored_size(True), "eval": data.stored_size(False)}
    counts, indexes = {}, {}
    for name in SPLITS:
        split = splits.get(name)
        if split is None:
            continue
        files = data.files_of(split.dataset)
        size = sizes["train" if name == "train" else "eval"]
        item = Item(split, data.split_targets(split), None if files is None else [files[i] for i in split.indices],
                    ToStoredImage(data.in_chans, size, data.interpolation) if format == "raw" else None)  # fmt: skip
        # Training items in a seeded random order: LitData shuffles the order of the chunks and of the items within
        # each, never across them, so a class-ordered folder written in order streamed batches of 2-3 classes.
        order = list(range(len(split)))
        if name == "train":
            order = torch.randperm(len(split), generator=torch.Generator().manual_seed(data.seed)).tolist()
        optimize(fn=item, inputs=order, output_dir=f"{output}/{name}", chunk_bytes=chunk_bytes,
                 num_workers=int(num_workers), mode="overwrite" if overwrite else None, keep_data_ordered=True,
                 verbose=False)  # fmt: skip
        counts[name] = len(split)
        if "://" not in output:  # each split's index as written: a fit refuses a description of other splits
            indexes[name] = digest(Path(output) / name / "index.json")
    meta = {"class_names": data.class_names, "in_chans": data.in_chans, "format": format, "size": sizes["train"],
            "eval_size": sizes["eval"], "native_size": data.native_size, "interpolation": data.interpolation,
            "mean": data.mean, "std": data.std, "splits": counts, "source": type(data).__name__,
            "indexes": indexes}  # fmt: skip
    write_meta(output, meta)
    if "://" not in output:
        read_meta(output)  # read back as training will
    return meta
