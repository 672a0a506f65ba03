"""Images per second of three ways to keep the same small PNG images: class folders, Parquet, LitData chunks.

``--images`` random 32 px RGB PNGs in 10 class folders are written once, then the same images as a Parquet data set
(the hub's layout: an ``Image`` column of encoded bytes and a ``ClassLabel``) and as LitData chunks written by
``vitlit prepare`` (``raw``: uint8 pixels; ``encoded``: the PNG files' bytes). Each is read as a fit reads it:
training batches of 256 through ``--workers`` DataLoader workers and then vitlit's pipeline (crop with padding 4,
flip, normalise) on this CPU, one warm-up pass and then ``--epochs`` timed passes. Needs the ``hf`` and
``streaming`` extras.

    python benchmarks/data_sources.py --workers 0 2    # one line per way and worker count: images/s

On two cores, LitData's worker processes cost far more than they save for images this small (RESULTS.md).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from PIL import Image


def write_folder(root: Path, n: int) -> Path:
    rng = np.random.default_rng(0)
    for i in range(n):
        folder = root / "train" / f"c{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


def write_parquet(folder: Path, out: Path) -> Path:
    from datasets import ClassLabel, Dataset, Features
    from datasets import Image as HFImage

    files = sorted((folder / "train").rglob("*.png"))
    images = [{"bytes": f.read_bytes(), "path": None} for f in files]
    features = Features({"image": HFImage(), "label": ClassLabel(names=[f"c{i}" for i in range(10)])})
    data = Dataset.from_dict({"image": images, "label": [int(f.parent.name[1:]) for f in files]}, features=features)
    out.mkdir(parents=True)
    data.to_parquet(str(out / "train-00000-of-00001.parquet"))
    return out


def training(data):
    """``data`` as a Trainer's ``fit`` sees it: training batches, one process, the CPU."""
    data.trainer = SimpleNamespace(training=True, global_rank=0, world_size=1, num_devices=1,
                                   strategy=SimpleNamespace(root_device=torch.device("cpu")))  # fmt: skip
    data.setup("fit")
    return data


def images_per_second(data, epochs: int) -> float:
    loader = data.train_dataloader()
    for batch in loader:  # warm-up: workers start, caches fill
        data.on_after_batch_transfer(batch, 0)
    count, start = 0, time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            count += len(data.on_after_batch_transfer(batch, 0)[0])
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    from vitlit.cli import main as vitlit
    from vitlit.data import ImageFolderDataModule
    from vitlit.data.hf import HFDataModule
    from vitlit.data.streaming import StreamingDataModule

    common = {"img_size": 32, "batch_size": 256, "source": "workers", "val_size": 0.05}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        folder = write_folder(root / "folder", args.images)
        parquet = write_parquet(folder, root / "parquet")
        for fmt in ("raw", "encoded"):
            vitlit(["prepare", "--data", "ImageFolderDataModule", "--data.root", str(folder), "--data.val_size", "0.05",
                    "--output", str(root / fmt), "--format", fmt, "--num_workers", "2"])  # fmt: skip
        print(f"wrote {args.images:,} PNG images four ways in {time.perf_counter() - started:.0f} s", flush=True)
        ways = {
            "image folder": lambda **kw: ImageFolderDataModule(root=folder, **kw),
            "Parquet (Hugging Face datasets)": lambda **kw: HFDataModule(path=str(parquet), test_size=0.05, **kw),
            "LitData chunks, raw uint8": lambda **kw: StreamingDataModule(input_dir=str(root / "raw"), **kw),
            "LitData chunks, encoded PNG": lambda **kw: StreamingDataModule(input_dir=str(root / "encoded"), **kw),
        }
        for workers in args.workers:
            for name, make in ways.items():
                rate = images_per_second(training(make(num_workers=workers, **common)), args.epochs)
                print(f"{name}: {rate:,.0f} img/s ({workers} workers, batch 256)", flush=True)


if __name__ == "__main__":
    main()
