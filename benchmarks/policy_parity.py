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

``--paths device-torchvision`` is a diagnosis, not a data path vitlit offers: the device loader with torchvision's
own policy applied image by image in place of the batched one (`vitlit.fast.policies.BatchPolicy`). If it learns
like the per-image path, the batched policy is the cause; if like the device path, the loader around it is.
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

# The recipe on top of configs/digits.yaml: EMA weights, one RandAugment operation at magnitude 5.
RECIPE = """--model.patch_size 8 --model.optimizer.init_args.lr 2e-3 --model.optimizer.init_args.weight_decay 0.05
--model.scheduler.init_args.warmup_steps 100 --model.label_smoothing 0.1 --data.hflip false
--trainer.callbacks+=EMAWeightAveraging --trainer.callbacks.decay 0.998 --data.randaugment_num_ops 1
--data.randaugment_magnitude 5 --data.val_size 144 --data.num_workers 0 --trainer.enable_progress_bar false""".split()

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
args = sys.argv[1:]
start = time.time()
fit = main(["fit", *args])
seconds = time.time() - start
best = fit.trainer.checkpoint_callback.best_model_path
last = next(c.last_model_path or c.best_model_path for c in fit.trainer.checkpoint_callbacks if c.monitor is None)
acc = {}
for name, path in (("test_acc", best), ("test_acc_last", last)):
    acc[name] = float(main(["test", *args, "--ckpt_path", path]).trainer.callback_metrics["test/acc"])
print("RESULT " + json.dumps({**acc, "fit_seconds": seconds}))
"""


#: The data paths compared: name -> --data.on_device, and whether torchvision's policy replaces the batched one.
PATHS = {"device": ("true", False), "per-image": ("false", False), "device-torchvision": ("true", True)}


def run_once(policy: str, path: str, seed: int, epochs: int, data: Path, work: Path) -> dict:
    """One fit and test in a fresh process with one torch thread; returns the test accuracy and the fit time."""
    root = work / f"{policy}-{path}-{seed}"
    on_device, torchvision_policy = PATHS[path]
    args = ["--config", str(ROOT / "configs" / "digits.yaml"), "--data.root", str(data), *RECIPE,
            "--data.augment", policy, "--data.on_device", on_device, "--trainer.max_epochs", str(epochs),
            "--seed_everything", str(seed), "--trainer.default_root_dir", str(root)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    if torchvision_policy:
        env["POLICY_PARITY_TORCHVISION"] = "1"
    done = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True, text=True, env=env, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{policy} {path} seed {seed} failed:\n{done.stderr[-2000:]}")
    return {"policy": policy, "path": path, "seed": seed, **json.loads(line[len("RESULT ") :])}


def main() -> None:
    """Run the grid and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=120)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--policies", nargs="+", default=["autoaugment", "randaugment", "trivialaugment"])
    parser.add_argument("--paths", nargs="+", default=["device", "per-image"], choices=list(PATHS))
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time (one torch thread each)")
    args = parser.parse_args()
    from vitlit.data.digits import write_digits_folder

    with tempfile.TemporaryDirectory() as tmp:
        # 1,437 train (144 of them validation) / 360 test: another split than the tests' (test_fraction 0.25).
        data = write_digits_folder(Path(tmp) / "digits", test_fraction=0.2, seed=7)
        # Seed by seed, both paths together: a run stopped early leaves paired seeds.
        grid = [(p, d, s) for p, s, d in itertools.product(args.policies, args.seeds, args.paths)]
        started = time.time()
        with ThreadPoolExecutor(args.parallel) as pool:
            futures = [pool.submit(run_once, p, d, s, args.epochs, data, Path(tmp)) for p, d, s in grid]
            results = []
            for future in futures:
                result = future.result()
                results.append(result)
                print(json.dumps(result), flush=True)
    print(f"\n{args.epochs} epochs, seeds {args.seeds}, {time.time() - started:.0f} s in all")
    print("| policy | data path | best ckpt: test accuracy mean (sd) | min-max | last ckpt: mean (sd) | fit s (mean) |")
    print("| --- | --- | --- | --- | --- | --- |")
    summary: dict[tuple[str, str], tuple[float, float]] = {}
    for policy, path in itertools.product(args.policies, args.paths):
        rows = [r for r in results if r["policy"] == policy and r["path"] == path]
        accs, secs = [r["test_acc"] for r in rows], [r["fit_seconds"] for r in rows]
        summary[policy, path] = (statistics.mean(accs), statistics.mean(secs))
        lasts = [r["test_acc_last"] for r in rows]
        spread, last_spread = (statistics.stdev(x) if len(x) > 1 else 0.0 for x in (accs, lasts))
        print(f"| {policy} | {path} | {statistics.mean(accs):.4f} ({spread:.4f}) | {min(accs):.4f}-{max(accs):.4f} | "
              f"{statistics.mean(lasts):.4f} ({last_spread:.4f}) | {statistics.mean(secs):.0f} |")  # fmt: skip
    if not {"device", "per-image"} <= set(args.paths):
        return
    for policy in args.policies:
        (dev_acc, dev_s), (img_acc, img_s) = summary[policy, "device"], summary[policy, "per-image"]
        ok = dev_acc - img_acc >= -0.003 and dev_s / img_s <= 0.8
        print(
            f"{policy}: device - per-image = {dev_acc - img_acc:+.4f}, time ratio {dev_s / img_s:.2f} "
            f"({'meets' if ok else 'misses'} the acceptance: >= -0.003 and <= 0.8)"
        )


if __name__ == "__main__":
    main()
