"""Hugging Face data sets written in the test, in the formats users keep them: Parquet shards and save_to_disk."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

#: The bytes of a PostScript program: what a hostile row holds instead of an image (PIL would hand it to Ghostscript).
POSTSCRIPT = b"%!PS-Adobe-3.0\n/Times-Roman findfont 12 scalefont setfont 72 720 moveto (hello) show showpage\n"


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert("RGB").resize((32, 32)).save(buffer, format="PNG")
    return buffer.getvalue()


def digits_rows(n: int | None = None) -> tuple[list[dict], list[int]]:
    """scikit-learn's digits as PNG bytes (as the hub's Image feature stores them) and their labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = [{"bytes": _png((a * 16).clip(0, 255).astype(np.uint8)), "path": None} for a in digits.images[:n]]
    return images, digits.target[:n].tolist()


def write_parquet(folder: Path, labels: str = "classlabel", splits: tuple[str, ...] = ("train", "test"),
                  n: int | None = None, bad_row: int | None = None) -> Path:  # fmt: skip
    """The digits as Parquet shards named as the hub names them (``train-00000-of-00001.parquet``)."""
    from datasets import ClassLabel, Dataset, Features, Value
    from datasets import Image as HFImage

    images, targets = digits_rows(n)
    if bad_row is not None:
        images[bad_row] = {"bytes": POSTSCRIPT, "path": None}
    label = {"classlabel": ClassLabel(names=[f"digit {d}" for d in range(10)]), "string": Value("string"),
             "float": Value("float32")}[labels]  # fmt: skip
    values = {"classlabel": targets, "string": [f"d{t}" for t in targets], "float": [t / 10 for t in targets]}[labels]
    data = Dataset.from_dict(
        {"image": images, "label": values}, features=Features({"image": HFImage(), "label": label})
    )
    parts = data.train_test_split(test_size=0.25, seed=0) if len(splits) > 1 else {"train": data}
    folder.mkdir(parents=True, exist_ok=True)
    for split in splits:
        parts[split].to_parquet(str(folder / f"{split}-00000-of-00001.parquet"))
    return folder


def write_saved(folder: Path, labels: str = "string", n: int | None = None) -> Path:
    """The digits as ``DatasetDict.save_to_disk`` writes them, with a train split only (no validation, no test)."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
    from datasets import Image as HFImage

    images, targets = digits_rows(n)
    label = ClassLabel(names=[str(d) for d in range(10)]) if labels == "classlabel" else Value("string")
    values = targets if labels == "classlabel" else [f"d{t}" for t in targets]
    data = Dataset.from_dict(
        {"image": images, "label": values}, features=Features({"image": HFImage(), "label": label})
    )
    DatasetDict({"train": data}).save_to_disk(str(folder))
    return folder


def write_rows(file: Path, images: list[dict], targets: list[int]) -> Path:
    """A Parquet file whose image column holds ``images`` as given (``bytes`` and ``path`` each as they are).

    `datasets` drops a row's bytes where it also names a path, so the rows are written with pyarrow, under the schema
    (and the feature metadata) `datasets` gives the column: the file is what a hostile or hand-made data set holds.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import ClassLabel, Dataset, Features
    from datasets import Image as HFImage

    schema = Dataset.from_dict(
        {"image": [{"bytes": b"", "path": None}], "label": [0]},
        features=Features({"image": HFImage(), "label": ClassLabel(names=[str(d) for d in range(10)])}),
    ).data.table.schema
    column = pa.array(images, type=schema.field("image").type)
    file.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"image": column, "label": pa.array(targets, pa.int64())}, schema=schema), file)
    return file


def write_hub_cache(cache: Path, repo_id: str, n: int | None = None) -> None:
    """The digits as ``datasets`` caches a hub data set it loaded once (``<cache>/<user>___<name>/default/...``)."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    parquet, (user, name) = write_parquet(cache.parent / "hub-source", n=n), repo_id.split("/")
    files = {split: str(parquet / f"{split}-00000-of-00001.parquet") for split in ("train", "test")}
    builder = Parquet(cache_dir=str(cache), dataset_name=name, config_id="default", data_files=files, hash="0")
    builder.download_and_prepare()
    (cache / name).rename(cache / f"{user}___{name}")  # where a load by the hub name put it
