"""End to end against timm's train.py: the same digits recipe, wall-clock seconds of each whole run.

The recipe of issue 42's measurement: scikit-learn's digits at 32 px in class folders (1,205 train / 143 val / 449
test images), timm's ``test_vit`` at patch 8, batch 64, AdamW 2e-3 with weight decay 0.05, a warmup then cosine,
label smoothing 0.1, RandAugment with one operation at magnitude 5, a weight EMA of decay 0.998, no flip, validation
every epoch. timm's ``train.py`` is not part of the timm package: give its path (a checkout of
github.com/huggingface/pytorch-image-models). Its nearest flags: ``--aa rand-n1-m5`` (timm's own RandAugment),
``--model-ema`` (which validates the model and its EMA every epoch), ``--scale 1 1 --ratio 1 1`` (its crop with
nothing cut: a resize; vitlit's digits recipe pads and crops by 4 px instead), CPU, no prefetcher. ``--recipe
plain`` is the same without augmentation or EMA, 40 epochs (timm: no RandAugment, no colour jitter; vitlit: no crop,
no policy). Each run is a fresh process with ``--threads`` torch threads; the arms alternate over ``--repeats``, repeat
``k`` with seed ``k`` in all three. Beside each time, the run's best validation accuracy (the EMA's where there is
one; timm's ``summary.csv``, vitlit's run card), on the same 143 validation images. vitlit's digits recipe runs AdamW
fused (the same update in one kernel); timm's ``train.py`` runs torch's default, on a CPU a loop over the weights,
unless ``--timm-opt-kwargs fused=True`` gives it the same kernel.

    python benchmarks/timm_train.py --timm-train ~/pytorch-image-models/train.py --workers 2
    # last line: streamed/timm time ratio=<vitlit through workers / timm train.py> (goal <= 1)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


#: Each recipe's own flags, timm's and vitlit's: RandAugment n1 m5 and a weight EMA, or no augmentation at all.
RECIPES = {
    "ema_randaugment": (["--aa", "rand-n1-m5", "--model-ema", "--model-ema-decay", "0.998"],
                        ["--data.augment", "randaugment", "--data.randaugment_num_ops", "1",
                         "--data.randaugment_magnitude", "5", "--trainer.callbacks+=vitlit.runs.ema.EMA",
                         "--trainer.callbacks.decay", "0.998"]),
    "plain": (["--color-jitter", "0"], ["--data.crop", "none"]),
}  # fmt: skip


def timm_command(train_py: Path, data: Path, out: Path, epochs: int, workers: int, recipe: str = "ema_randaugment",
                 seed: int = 42, opt_kwargs: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    return [sys.executable, str(train_py), "--data-dir", str(data), "--train-split", "train", "--val-split", "val",
            "--model", "test_vit", "--model-kwargs", "img_size=32", "patch_size=8", "--img-size", "32",
            "--num-classes", "10", "--batch-size", "64", "--epochs", str(epochs), "--opt", "adamw", "--lr", "2e-3",
            "--weight-decay", "0.05", "--warmup-epochs", "5", "--smoothing", "0.1", *RECIPES[recipe][0],
            "--scale", "1", "1", "--ratio", "1", "1", "--hflip", "0", "--seed", str(seed),
            "--device", "cpu", "--no-prefetcher", "-j", str(workers), "--output", str(out), "--checkpoint-hist", "1",
            "--log-interval", "50", *(["--opt-kwargs", *opt_kwargs] if opt_kwargs else [])]  # fmt: skip


def vitlit_command(data: Path, out: Path, epochs: int, workers: int, source: str, recipe: str = "ema_randaugment",
                   seed: int = 42) -> list[str]:  # fmt: skip
    return [sys.executable, "-m", "vitlit", "fit", "--config", str(ROOT / "configs" / "digits.yaml"),
            "--data.root", str(data), "--trainer.max_epochs", str(epochs), *RECIPES[recipe][1],
            "--seed_everything", str(seed), "--data.source", source, "--data.num_workers", str(workers),
            "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(out)]  # fmt: skip


def best_accuracy(out: Path) -> float | None:
    """The best validation accuracy of the run written to ``out``: timm's ``summary.csv`` or vitlit's run card."""
    for summary in out.glob("*/summary.csv"):
        with summary.open() as f:
            return max(float(row["eval_top1"]) for row in csv.DictReader(f)) / 100
    for card in out.glob("lightning_logs/*/run_card.json"):
        return json.loads(card.read_text())["best_val_acc"]
    return None


def seconds(command: list[str], threads: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{command[1]} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timm-train", type=Path, required=True, help="timm's train.py (pytorch-image-models)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="ema_randaugment")
    parser.add_argument("--epochs", type=int, default=None, help="default: 120, the plain recipe 40")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of both")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--timm-opt-kwargs",
        nargs="*",
        default=[],
        help="timm's --opt-kwargs, e.g. fused=True: the fused AdamW kernel vitlit's digits recipe uses",
    )
    args = parser.parse_args()
    from vitlit.data.digits import write_digits_folder

    epochs = args.epochs or (40 if args.recipe == "plain" else 120)
    times: dict[str, list[float]] = {"timm": [], "streamed": [], "in memory": []}
    accuracies: dict[str, list[float]] = {name: [] for name in times}
    with tempfile.TemporaryDirectory() as tmp:
        data = write_digits_folder(Path(tmp) / "digits", val_fraction=0.08)
        for seed in range(args.repeats):
            folders = {name: Path(tmp) / f"run{seed}" / name.replace(" ", "_") for name in times}
            arms = {
                "timm": timm_command(args.timm_train, data, folders["timm"], epochs, args.workers, args.recipe, seed,
                                     tuple(args.timm_opt_kwargs)),
                "streamed": vitlit_command(data, folders["streamed"], epochs, args.workers, "workers", args.recipe,
                                           seed),
                "in memory": vitlit_command(data, folders["in memory"], epochs, 0, "memory", args.recipe, seed),
            }  # fmt: skip
            for name, command in arms.items():
                times[name].append(seconds(command, args.threads))
                accuracy = best_accuracy(folders[name])
                accuracies[name].append(accuracy if accuracy is not None else float("nan"))
                print(f"{name} (seed {seed}): {times[name][-1]:.1f} s, best val acc {accuracies[name][-1]:.4f}",
                      flush=True)  # fmt: skip
    best = {name: min(values) for name, values in times.items()}
    print(f"{args.recipe}, {epochs} epochs, {args.workers} workers, {args.threads} threads: " +
          ", ".join(f"{name} {value:.1f} s" for name, value in best.items()))  # fmt: skip
    print("mean best val acc: " + ", ".join(f"{name} {sum(v) / len(v):.4f}" for name, v in accuracies.items()))
    print(f"in memory/timm time ratio={best['in memory'] / best['timm']:.2f}")
    print(f"streamed/timm time ratio={best['streamed'] / best['timm']:.2f}")
    for name in ("in memory", "streamed"):  # each seed against timm's run of the same seed, as the issues read them
        ratios = [ours / theirs for ours, theirs in zip(times[name], times["timm"], strict=True)]
        print(f"{name}/timm per seed: {' / '.join(f'{r:.2f}' for r in ratios)}, median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
