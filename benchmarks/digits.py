"""Learning on real images offline: scikit-learn's digits through the vitlit CLI, plain recipe vs full recipe.

The 1,797 digits (8x8, upsampled to 32 px) are split once with a fixed seed: a quarter is the test split, which is
read only after training, by the best checkpoint on the validation split (10% of the rest). Everything runs through
``vitlit.cli.main``, exactly as ``python -m vitlit`` would.

    python benchmarks/digits.py                   # the full recipe; last line: digits test_acc=<x> seconds=<y>
    python benchmarks/digits.py --recipe plain    # crop + label smoothing only, same model and budget
    python benchmarks/digits.py --compare         # every recipe below, then a Markdown table
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from vitlit.cli import main
from vitlit.data.digits import write_digits_folder

EMA = "--trainer.callbacks+=vitlit.runs.ema.EMA --trainer.callbacks.decay 0.998"  # horizon ~500 steps ~ 26 epochs
RANDAUGMENT = "--data.augment randaugment --data.randaugment_num_ops 1 --data.randaugment_magnitude 5"
MIX_ERASE_DROP = """
    --data.batch_augment vitlit.data.BatchAugment --data.batch_augment.mixup_alpha 0.2
    --data.batch_augment.cutmix_alpha 0.2 --data.batch_augment.mixup_prob 0.5 --data.batch_augment.random_erasing 0.25
    --model.drop_path_rate 0.1
"""

# Each recipe adds flags to configs/digits.yaml (crop + label smoothing). DeiT's ingredients are scaled down for
# 16-token 8x8 digits: one mild RandAugment op, light Mixup/CutMix on half the batches.
RECIPES: dict[str, list[str]] = {
    "plain": [],
    "ema": EMA.split(),
    "full": f"{EMA} {RANDAUGMENT}".split(),  # the best measured (docs/training.md's table of augmentations)
    "ema_mix_erase_droppath": f"{EMA} {MIX_ERASE_DROP}".split(),
    "everything": f"{EMA} {RANDAUGMENT} {MIX_ERASE_DROP}".split(),
}


def run(recipe: str, epochs: int, work: Path, data: Path) -> tuple[float, float]:
    """Train one recipe, test its best checkpoint, and return (test accuracy, seconds for both)."""
    start = time.perf_counter()
    config = Path(__file__).parents[1] / "configs" / "digits.yaml"
    # The per-image DataLoader path, on which docs/training.md's table was measured (before source: auto existed).
    common = [
        "--config", config, "--data.root", data, "--trainer.default_root_dir", work / recipe,
        "--data.source", "workers", *RECIPES[recipe],
    ]  # fmt: skip
    fit = main([str(a) for a in ["fit", *common, "--trainer.max_epochs", epochs]])
    best = fit.trainer.checkpoint_callback.best_model_path  # selected on the validation split only
    test = main([str(a) for a in ["test", *common, "--ckpt_path", best]])
    return float(test.trainer.callback_metrics["test/acc"]), time.perf_counter() - start


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="full")
    parser.add_argument("--epochs", type=int, default=120)
    parser.add_argument("--compare", action="store_true", help="run every recipe and print a table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vitlit-digits-") as tmp:
        work = Path(tmp)
        data = write_digits_folder(work / "digits", size=32, test_fraction=0.25, seed=0)
        recipes = [r for r in RECIPES if r != "full"] + ["full"] if args.compare else [args.recipe]
        results = {recipe: run(recipe, args.epochs, work, data) for recipe in recipes}
    if args.compare:
        print(f"| recipe ({args.epochs} epochs, 2 CPU cores) | test accuracy | seconds |")
        print("| --- | --- | --- |")
        for recipe, (acc, seconds) in results.items():
            print(f"| {recipe} | {acc:.4f} | {seconds:.0f} |")
    for recipe, (acc, seconds) in results.items():
        print(f"digits recipe={recipe} test_acc={acc:.4f} seconds={seconds:.0f}")
    acc, seconds = results[recipes[-1]]
    print(f"digits test_acc={acc:.4f} seconds={seconds:.0f}")


if __name__ == "__main__":
    main_()
