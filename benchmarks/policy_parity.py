"""Does the device path learn as well as the per-image path with each augmentation policy? (issue 25)

For each policy (autoaugment, randaugment, trivialaugment) and each data path (``--data.on_device true`` and
``false``), the digits recipe of the issue is trained over several seeds in fresh processes; the best checkpoint
(by ``val/acc``, as the issue measures) and the last one (the EMA weights at the end, which a 144-image validation
split does not select, so they vary less between seeds) are tested on a held-out split. It prints every run, then
per policy and path the mean, spread and fit time, and the two acceptance figures: the device path's mean test
accuracy minus the per-image path's (at least -0.003 to pass) and the ratio of their fit times (at most 0.8).

    python benchmarks/policy_parity.py                      # 120 epochs, seeds 0-4, two runs at a time
    python benchmarks/policy_parity.py --epochs 60 --seeds 0 1 2 --policies randaugment
    python benchmarks/policy_parity.py --policies autoaugment --paths device-torchvision   # the A/B below
    python benchmarks/policy_parity.py --summarize benchmarks/policy_parity_runs.jsonl  # every run so far

``--paths device-torchvision`` and ``per-image-batched`` are diagnoses, not data paths vitlit offers: the device
loader with torchvision's own policy applied image by image in place of the batched one
(`vitlit.fast.policies.BatchPolicy`), and the reverse, the per-image DataLoader with the batched policy applied to
one image at a time. If the policy is the cause, each learns like the path whose policy it has; if the loader is,
like the path whose loader it has.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The issues' recipe on top of configs/digits.yaml: EMA weights; the policy's settings and the crop are flags.
RECIPE = """--model.patch_size 8 --model.optimizer.init_args.lr 2e-3 --model.optimizer.init_args.weight_decay 0.05
--model.scheduler.init_args.warmup_steps 100 --model.label_smoothing 0.1 --data.hflip false
--trainer.callbacks+=EMAWeightAveraging --trainer.callbacks.decay 0.998 --data.num_workers 0
--trainer.enable_progress_bar false""".split()

_RUN = """
import json, os, sys, time
from vitlit.cli import main
if os.environ.get("POLICY_PARITY_TORCHVISION"):  # the A/B: torchvision's policy, image by image, in the device loader
    import torch
    from vitlit.data.transforms import policy_transform
    from vitlit.fast.policies import BatchPolicy
    def per_image(self, images, among=None, at=0):
        policy = policy_transform(self.name, self.num_ops, self.magnitude)
        return torch.stack([policy(image) for image in images])
    BatchPolicy.__call__ = per_image
if os.environ.get("POLICY_PARITY_BATCHED"):  # the reverse: the batched policy, one image at a time, in the DataLoader
    import vitlit.data.base
    from vitlit.fast.policies import BatchPolicy
    def batched(name, num_ops=2, magnitude=9):
        if name == "none":
            return None
        policy = BatchPolicy(name, num_ops, magnitude)
        return lambda image: policy(image[None])[0]
    vitlit.data.base.policy_transform = batched
args = sys.argv[1:]
start = time.time()
fit = main(["fit", *args])
seconds = time.time() - start
chosen = fit.trainer.checkpoint_callback
best = chosen.best_model_path
last = next(c.last_model_path or c.best_model_path for c in fit.trainer.checkpoint_callbacks if c.monitor is None)
acc = {"best_epoch": int(os.path.basename(best)[5:8]), "best_val_acc": float(chosen.best_model_score)}
for name, path in (("test_acc", best), ("test_acc_last", last)):
    acc[name] = float(main(["test", *args, "--ckpt_path", path]).trainer.callback_metrics["test/acc"])
print("RESULT " + json.dumps({**acc, "fit_seconds": seconds}))
"""


#: The data paths compared: name -> --data.on_device, and the environment of the diagnoses (see the docstring).
PATHS = {
    "device": ("true", {}),
    "per-image": ("false", {}),
    "device-torchvision": ("true", {"POLICY_PARITY_TORCHVISION": "1"}),
    "per-image-batched": ("false", {"POLICY_PARITY_BATCHED": "1"}),
}


def run_once(policy: str, path: str, seed: int, split: int, data: Path, work: Path, args: argparse.Namespace) -> dict:
    """One fit and test in a fresh process with one torch thread; returns the test accuracy and the fit time."""
    root = work / f"{policy}-{path}-{split}-{seed}"
    on_device, diagnosis = PATHS[path]
    setting = {"num_ops": args.num_ops, "magnitude": args.magnitude, "crop_padding": args.crop_padding}
    flags = ["--config", str(ROOT / "configs" / "digits.yaml"), "--data.root", str(data), *RECIPE,
             "--data.augment", policy, "--data.on_device", on_device, "--trainer.max_epochs", str(args.epochs),
             "--data.randaugment_num_ops", str(args.num_ops), "--data.randaugment_magnitude", str(args.magnitude),
             "--seed_everything", str(seed), "--trainer.default_root_dir", str(root)]  # fmt: skip
    if args.crop_padding is not None:
        flags += ["--data.crop_padding", str(args.crop_padding)]
    if not args.val_folder:
        flags += ["--data.val_size", "144"]  # carved from train/ (the figures of issue 25)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", **diagnosis}
    done = subprocess.run([sys.executable, "-c", _RUN, *flags], capture_output=True, text=True, env=env, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{policy} {path} split {split} seed {seed} failed:\n{done.stderr[-2000:]}")
    result = {"policy": policy, "path": path, "split": split, "seed": seed, **setting}
    return {**result, "epochs": args.epochs, **json.loads(line[len("RESULT ") :])}


def summarize(results: list[dict]) -> None:
    """Print per policy and path the mean, spread and fit time, and the acceptance figures with their errors."""
    policies = list(dict.fromkeys(r["policy"] for r in results))
    paths = [p for p in PATHS if any(r["path"] == p for r in results)]
    print("| policy | data path | runs | best ckpt: test accuracy mean (sd) | min-max | last ckpt: mean (sd) | fit s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for policy, path in itertools.product(policies, paths):
        rows = [r for r in results if r["policy"] == policy and r["path"] == path]
        if not rows:
            continue
        best, last, secs = (_values(rows, key) for key in ("test_acc", "test_acc_last", "fit_seconds"))
        print(f"| {policy} | {path} | {len(best)}/{len(last)} | {_mean_sd(best)} | {min(best):.4f}-{max(best):.4f} | "
              f"{_mean_sd(last)} | {f'{statistics.mean(secs):.0f}' if secs else '-'} |")  # fmt: skip
    for policy, path in itertools.product(policies, [p for p in paths if p != "per-image"]):
        ours = [r for r in results if r["policy"] == policy and r["path"] == path]
        theirs = [r for r in results if r["policy"] == policy and r["path"] == "per-image"]
        if not ours or not theirs:
            continue
        best = _difference(_values(ours, "test_acc"), _values(theirs, "test_acc"))
        last = _difference(_values(ours, "test_acc_last"), _values(theirs, "test_acc_last"))
        # Fit times only where the log has them (runs timed on otherwise idle cores).
        ours_s, theirs_s = _values(ours, "fit_seconds"), _values(theirs, "fit_seconds")
        ratio = f"{statistics.mean(ours_s) / statistics.mean(theirs_s):.2f}" if ours_s and theirs_s else "-"
        print(f"{policy}: {path} - per-image, in points: best checkpoint {best}, last checkpoint {last}; "
              f"fit time ratio {ratio} (acceptance: accuracy >= -0.3 points, time <= 0.8)")  # fmt: skip


def _values(rows: list[dict], key: str) -> list[float]:
    return [r[key] for r in rows if r.get(key) is not None]


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.mean(values):.4f} ({statistics.stdev(values) if len(values) > 1 else 0.0:.4f})"


def _difference(ours: list[float], theirs: list[float]) -> str:
    """Difference of the means in points, with one standard error (Welch's)."""
    if len(ours) < 2 or len(theirs) < 2:
        return "-"
    se = (statistics.variance(ours) / len(ours) + statistics.variance(theirs) / len(theirs)) ** 0.5
    return f"{100 * (statistics.mean(ours) - statistics.mean(theirs)):+.2f} (SE {100 * se:.2f})"


def main() -> None:
    """Run the grid (or read earlier runs' logs) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=120)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--splits", type=int, nargs="+", default=[7],
                        help="seeds of write_digits_folder: each a split of its own (7: issue 25's)")  # fmt: skip
    parser.add_argument(
        "--val-folder",
        action="store_true",
        help="write 8%% of the images as val/ (issue 35's layout) instead of carving 144 from train/",
    )
    parser.add_argument("--num-ops", type=int, default=1, help="RandAugment's operations per image")
    parser.add_argument("--magnitude", type=int, default=5, help="RandAugment's magnitude (of 31 bins)")
    parser.add_argument("--crop-padding", type=int, help="--data.crop_padding (default: the recipe's, 4 px)")
    parser.add_argument("--policies", nargs="+", default=["autoaugment", "randaugment", "trivialaugment"])
    parser.add_argument("--paths", nargs="+", default=["device", "per-image"], choices=list(PATHS))
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time (one torch thread each)")
    parser.add_argument("--log", type=Path, help="append each run's JSON line to this file as it finishes")
    parser.add_argument("--summarize", type=Path, nargs="+", metavar="LOG",
                        help="no runs: summarize these --log files or printed outputs")  # fmt: skip
    args = parser.parse_args()
    if args.summarize:
        # A --log file, or a run's printed output (its JSON lines; the table after them is skipped).
        lines = [line for log in args.summarize for line in log.read_text().splitlines() if line.startswith("{")]
        rows = [json.loads(line) for line in lines]
        summarize([r for r in rows if r["policy"] in args.policies])
        return
    from vitlit.data.digits import write_digits_folder

    with tempfile.TemporaryDirectory() as tmp:
        # Split 7: 1,437 train (144 of them validation) / 359 test, another split than the tests' (test_fraction 0.25);
        # with --val-folder: 1,295 train / 143 val / 359 test.
        val = 0.08 if args.val_folder else 0.0
        folders = {k: write_digits_folder(Path(tmp) / f"digits-{k}", test_fraction=0.2, seed=k, val_fraction=val)
                   for k in args.splits}  # fmt: skip
        # Seed by seed, every path together: a run stopped early leaves paired seeds.
        grid = [(p, d, k, s) for p, s, k, d in itertools.product(args.policies, args.seeds, args.splits, args.paths)]
        started = time.time()
        with ThreadPoolExecutor(args.parallel) as pool:
            futures = [pool.submit(run_once, p, d, s, k, folders[k], Path(tmp), args) for p, d, k, s in grid]
            results = []
            for future in futures:
                result = future.result()
                results.append(result)
                print(json.dumps(result), flush=True)
                if args.log:
                    with args.log.open("a") as log:
                        log.write(json.dumps(result) + "\n")
    print(f"\n{args.epochs} epochs, seeds {args.seeds}, {time.time() - started:.0f} s in all")
    summarize(results)


if __name__ == "__main__":
    main()
