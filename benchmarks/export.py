"""fp32 against int8 ONNX on the CPU: latency per image, file size, and agreement and accuracy on real images.

Two parts. Speed and size: a ViT-S/16 at 224 px (``--model``; random weights, which do not change the arithmetic)
exported with `vitlit.tools.export.export_onnx` and quantized with `vitlit.tools.export.quantize_int8`, timed in
ONNX Runtime
at batch 1 and 32. Accuracy: the digits recipe (``configs/digits.yaml``) trained for ``--epochs`` epochs, exported
with ``vitlit export`` as onnx and int8, both run on the 449 held-out test images.

    python benchmarks/export.py            # last line: int8 speedup=<x> size_ratio=<y> acc_drop=<z>

Goals (issue 13): speedup >= 1.5 at batch 32 on a ViT-S-sized model, size ratio <= 0.3, accuracy drop <= 0.01.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import onnxruntime as ort
import timm
import torch

from vitlit.cli import main
from vitlit.data.digits import write_digits_folder
from vitlit.data.images import image_files
from vitlit.tools.export import export, export_onnx, quantize_int8
from vitlit.trained import load_classifier

CONFIG = Path(__file__).parents[1] / "configs" / "digits.yaml"


def latency_ms(path: Path, batch: torch.Tensor, repeats: int) -> float:
    """Median milliseconds per image of ``repeats`` runs of ``batch`` in ONNX Runtime, after two warm-up runs."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {"images": batch.numpy()}
    for _ in range(2):
        session.run(None, feed)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times) / len(batch)


def speed_and_size(model: str, img_size: int, work: Path, repeats: int) -> tuple[float, float]:
    """Print the latencies and sizes; return (speedup at batch 32, int8 size / fp32 size)."""
    net = timm.create_model(model, pretrained=False, img_size=img_size, num_classes=10).eval()
    fp32, int8 = work / "speed_fp32.onnx", work / "speed_int8.onnx"
    export_onnx(net, torch.randn(2, 3, img_size, img_size), fp32)
    quantize_int8(fp32, int8)
    ratio = int8.stat().st_size / fp32.stat().st_size
    sizes = f"fp32 {fp32.stat().st_size / 2**20:.1f} MiB, int8 {int8.stat().st_size / 2**20:.1f} MiB"
    print(f"{model} at {img_size} px: {sizes}")
    speedups = {}
    for n in (1, 32):
        batch = torch.randn(n, 3, img_size, img_size)
        slow, fast = latency_ms(fp32, batch, repeats), latency_ms(int8, batch, repeats)
        speedups[n] = slow / fast
        print(f"batch {n}: fp32 {slow:.2f} ms/image, int8 {fast:.2f} ms/image, speedup {slow / fast:.2f}")
    return speedups[32], ratio


def accuracy_drop(epochs: int, work: Path) -> float:
    """Train the digits recipe, export it both ways, and return fp32 accuracy minus int8 accuracy on the test split."""
    data = write_digits_folder(work / "digits")
    # A 40-step warmup (about 4 epochs of 10 steps), shorter in a shorter run: one as long as the run is refused.
    fit = main([str(a) for a in ["fit", "--config", CONFIG, "--data.root", data, "--trainer.default_root_dir", work,
                                 "--trainer.max_epochs", epochs, "--data.batch_size", "128", "--data.source", "memory",
                                 "--model.optimizer.init_args.lr", "4e-3",
                                 "--model.scheduler.init_args.warmup_steps", min(40, 4 * epochs)]])  # fmt: skip
    ckpt = Path(fit.trainer.checkpoint_callback.best_model_path)  # chosen on validation, as a user would
    _, card = load_classifier(ckpt)
    files = list(image_files(data / "test"))
    labels = torch.tensor([int(p.parent.name) for p in files])
    images = card.batch(files)
    predicted = {}
    for fmt in ("onnx", "int8"):
        path = work / f"digits.{fmt}.onnx"
        export(ckpt, path, fmt)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        predicted[fmt] = torch.from_numpy(session.run(None, {"images": images.numpy()})[0]).argmax(1)
    acc = {fmt: float((p == labels).float().mean()) for fmt, p in predicted.items()}
    agreement = float((predicted["onnx"] == predicted["int8"]).float().mean())
    print(f"digits test split ({len(files)} images): fp32 accuracy {acc['onnx']:.4f}, int8 accuracy {acc['int8']:.4f}, "
          f"same class for {agreement:.2%}")  # fmt: skip
    return acc["onnx"] - acc["int8"]


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=50, help="digits training epochs for the accuracy part")
    args = parser.parse_args()
    print(f"cpu threads={torch.get_num_threads()} onnxruntime={ort.__version__}")
    with tempfile.TemporaryDirectory(prefix="vitlit-export-") as tmp:
        speedup, ratio = speed_and_size(args.model, args.img_size, Path(tmp), args.repeats)
        drop = accuracy_drop(args.epochs, Path(tmp))
    print(f"int8 speedup={speedup:.2f} size_ratio={ratio:.3f} acc_drop={drop:.4f}")


if __name__ == "__main__":
    main_()
