"""The rows of ``predictions.csv`` (`vitlit.runs.predictions.PredictionWriter`): written whole, text made safe."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import torch

from vitlit.atomic import replacing
from vitlit.text import cell


def write_table(
    path: Path, probs: torch.Tensor, classes: Sequence[str], sources: Sequence[str], top_k: int, probabilities: bool
) -> None:
    """Write one row per image of ``probs`` (N, classes) to ``path``: its source, top classes and probabilities.

    Args:
        path: The CSV file (its folder is made).
        probs: Class probabilities, one row per image, in data order.
        classes: Class names, in index order.
        sources: The file of each image ("" where unknown).
        top_k: How many of the most probable classes each row names.
        probabilities: Also one ``p_<class>`` column per class.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    k = min(top_k, probs.shape[1])
    top_p, top_i = probs.topk(k, dim=1)
    header = ["index", "source", "predicted", "confidence"]
    header += [name for j in range(2, k + 1) for name in (f"top{j}", f"p_top{j}")]
    if probabilities:
        header += [f"p_{c}" for c in classes]
    # Whole or not at all (a full disk or a size limit leaves no half file), and names as the file system has
    # them: bytes that are not UTF-8 are written as they are (Python's surrogateescape), and read back the same.
    with replacing(path) as tmp, tmp.open("w", newline="", encoding="utf-8", errors="surrogateescape") as f:
        writer = csv.writer(f)
        # Text from the data (file and class names) as cells a spreadsheet shows, never runs (`vitlit.text.cell`).
        writer.writerow([cell(name) for name in header])
        names = [cell(name) for name in classes]
        for i in range(len(probs)):
            row: list[object] = [i, cell(sources[i], path=True)]
            for j in range(k):
                row += [names[top_i[i, j]], f"{top_p[i, j]:.6f}"]
            if probabilities:
                row += [f"{p:.6f}" for p in probs[i].tolist()]
            writer.writerow(row)
