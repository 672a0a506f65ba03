"""``predictions.csv`` (`vitlit.runs.records.PredictionWriter`): gathered, checked, written whole, text made safe.

Loaded by ``predict`` only.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info

from vitlit.atomic import replacing
from vitlit.data import ImageClassificationDataModule
from vitlit.errors import CheckFailed
from vitlit.runs.ddp import all_gather_objects, interleave
from vitlit.text import shown

#: `_ACTIVE` less the newline and the undecodable bytes that are no C1 control: a file name's part CSV can hold.
_IN_PATH = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\udc80-\udc9f]")
#: What a spreadsheet reads as the start of a formula in a cell (OWASP's CSV injection list).
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def cell(text: object, path: bool = False) -> str:
    """``text`` as a CSV cell a spreadsheet shows as text: escapes shown, and a formula's first character quoted.

    OWASP's advice for CSV injection: a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
    gets a leading ``'``, so ``=HYPERLINK(...)`` or ``-2+3`` is shown, never evaluated. A ``path`` keeps what names
    its file byte for byte (a newline, which CSV quotes; undecodable bytes, written back as they were) and shows only
    what a terminal acts on (escapes, C1 controls as raw bytes, direction overrides).
    """
    value = _IN_PATH.sub(lambda m: ascii(m.group())[1:-1], str(text)) if path else shown(text)
    return f"'{value}" if str(text).startswith(_FORMULA) else value


def write_predictions(
    trainer: Trainer, pl_module: LightningModule, probs: torch.Tensor, filename: str, top_k: int, probabilities: bool
) -> None:
    """Gather every process's class probabilities in data order, refuse any that are not finite, write the CSV.

    Args:
        trainer: The ``predict`` run's Trainer (its log folder, processes and data module).
        pl_module: The model (its class names, from its checkpoint).
        probs: This process's probabilities, one row per image, in its shard's order.
        filename: The CSV's name in the run's log folder.
        top_k: How many of the most probable classes each row names.
        probabilities: Also one ``p_<class>`` column per class.
    """
    stored = _stored_indices(trainer.datamodule, len(probs))
    if stored is not None:  # a stream's items, in the order its workers and processes handed them out
        shards = all_gather_objects((probs, *stored), trainer)
        probs, stored_order = in_stored_order([p for p, _, _ in shards], [i for _, i, _ in shards])
        stream_labels = in_stored_order([t.unsqueeze(1) for _, _, t in shards], [i for _, i, _ in shards])[0]
    elif trainer.world_size > 1:  # each process predicted its shard: back in data order (collectives: all call)
        probs = interleave(all_gather_objects(probs, trainer))
    path = Path(trainer.log_dir or trainer.default_root_dir) / filename
    broken = int((~torch.isfinite(probs).all(dim=1)).sum())
    if broken:  # on every process: a row of NaN would still name a class (argmax), and look like a prediction
        raise CheckFailed(
            f"the model gave {broken} of {len(probs)} images probabilities that are not finite numbers (NaN or "
            f"infinity); nothing was written to {path}; predict with an earlier checkpoint of the run"
        )
    if not trainer.is_global_zero:
        return
    data = trainer.datamodule
    files, labels = _files(data), _true_labels(data, None if stored is None else stream_labels.squeeze(1).tolist())
    # Items are predicted in order: under --trainer.limit_predict_batches the rows are the files' first ones.
    sources = files[: len(probs)] if files is not None and len(files) >= len(probs) else [""] * len(probs)
    if stored is not None:  # a stream keeps no file names: each row names its item's stored position
        sources = [str(i) for i in stored_order]
    labels = labels[: len(probs)] if labels is not None and len(labels) >= len(probs) else None
    write_table(path, probs, _class_names(trainer, pl_module, probs.shape[1]), sources, top_k, probabilities, labels)
    rank_zero_info(f"vitlit: wrote {len(probs)} predictions to {path}")


def _stored_indices(data: object, count: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Each predicted item's stored position in its split and its class index, where a stream handed them over.

    Args:
        data: The data module (a `vitlit.data.streaming.StreamingDataModule` keeps ``predicted_indices`` and
            ``predicted_labels``).
        count: The predictions this process made: the positions are this process's, one per prediction.

    Returns:
        ``(positions, class indices)``, one each per prediction; ``None`` for data that is not a stream.
    """
    kept, labels = getattr(data, "predicted_indices", None), getattr(data, "predicted_labels", None)
    if not isinstance(kept, list):  # not a stream: every process takes the other way, as the collectives need
        return None
    stored = torch.cat(kept).long() if kept else torch.zeros(0, dtype=torch.long)
    targets = torch.cat(labels).long() if labels else torch.zeros(0, dtype=torch.long)
    if not len(stored) == len(targets) == count:  # a row with another item's position or label would be wrong
        raise CheckFailed(f"the stream handed over {len(stored)} items but {count} were predicted; predict again")
    return stored, targets


def in_stored_order(probs: list[torch.Tensor], indices: list[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """Every process's predictions as one table in the order of their items' stored positions, each item once.

    LitData hands a stream's batches out worker by worker and gives each process a block of the split, whose
    lengths may differ; an item a process repeats to even out the blocks is kept once.

    Args:
        probs: One tensor of class probabilities per process, in rank order, a row per item.
        indices: One tensor per process of each row's stored position.

    Returns:
        The probabilities in stored order, and the stored position of each row.
    """
    rows, where = torch.cat(probs), torch.cat(indices).long()
    where, order = where.sort(stable=True)
    first = torch.ones_like(where, dtype=torch.bool)
    first[1:] = where[1:] != where[:-1]
    return rows[order][first], where[first].tolist()


def _files(data: object) -> list[str] | None:
    """The file behind each predicted image, in order (`files_of`); ``None`` where unknown (a stream keeps none)."""
    split = getattr(data, "predict_set", None)
    if not isinstance(data, ImageClassificationDataModule) or not hasattr(split, "indices"):
        return None
    files = data.files_of(split.dataset)
    return None if files is None else [files[i] for i in split.indices]


def _true_labels(data: object, streamed: list[int] | None = None) -> list[int] | None:
    """Each predicted image's class index where the data knows it (the test split), else ``None`` (a predict_dir).

    A stream's are ``streamed``, those it handed over with its items, in stored order.
    """
    split = getattr(data, "predict_set", None)
    if streamed is None:
        if not isinstance(data, ImageClassificationDataModule) or not hasattr(split, "indices"):
            return None
        if data.is_predict_dir_images(split.dataset):  # new images: no labels
            return None
    targets = data.split_targets(split) if streamed is None else streamed
    return None if any(target < 0 for target in targets) else targets  # -1: a split without labels (predict reads it)


def _class_names(trainer: Trainer, pl_module: LightningModule, n: int) -> list[str]:
    """The model's class names (from its checkpoint), else the data module's, else the class indices."""
    names = getattr(pl_module, "hparams", {}).get("class_names")
    if not names and isinstance(trainer.datamodule, ImageClassificationDataModule):
        names = trainer.datamodule.class_names
    return list(names) if names and len(names) == n else [str(i) for i in range(n)]


def write_table(
    path: Path, probs: torch.Tensor, classes: Sequence[str], sources: Sequence[str], top_k: int, probabilities: bool,
    labels: Sequence[int] | None = None,
) -> None:  # fmt: skip
    """Write one row per image of ``probs`` (N, classes) to ``path``: its source, top classes and probabilities.

    Args:
        path: The CSV file (its folder is made).
        probs: Class probabilities, one row per image, in data order.
        classes: Class names, in index order.
        sources: The file of each image ("" where unknown).
        top_k: How many of the most probable classes each row names.
        probabilities: Also one ``p_<class>`` column per class.
        labels: Each image's true class index where known (the test split): then ``label`` and ``correct`` columns
            follow ``source``, so the errors are one filter away.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    k = min(top_k, probs.shape[1])
    top_p, top_i = probs.topk(k, dim=1)
    header = ["index", "source", *(["label", "correct"] if labels is not None else []), "predicted", "confidence"]
    header += [name for j in range(2, k + 1) for name in (f"top{j}", f"p_top{j}")]
    if probabilities:
        header += [f"p_{c}" for c in classes]
    # Whole or not at all (a full disk or a size limit leaves no half file), and names as the file system has
    # them: bytes that are not UTF-8 are written as they are (Python's surrogateescape), and read back the same.
    with replacing(path) as tmp, tmp.open("w", newline="", encoding="utf-8", errors="surrogateescape") as f:
        writer = csv.writer(f)
        # Text from the data (file and class names) as cells a spreadsheet shows, never runs (`cell`).
        writer.writerow([cell(name) for name in header])
        names = [cell(name) for name in classes]
        for i in range(len(probs)):
            row: list[object] = [i, cell(sources[i], path=True)]
            if labels is not None:
                row += [names[labels[i]], str(int(top_i[i, 0]) == labels[i]).lower()]
            for j in range(k):
                row += [names[top_i[i, j]], f"{top_p[i, j]:.6f}"]
            if probabilities:
                row += [f"{p:.6f}" for p in probs[i].tolist()]
            writer.writerow(row)
