"""Train to a time budget: the budgeted schedule (configs/addons/budget.yaml) against the truncated one (issue 37).

Both arms get the same ``--trainer.max_time`` on the digits recipe with ``max_epochs`` far beyond what the budget holds:
the truncated arm's cosine is sized by ``max_epochs`` and cut by the Timer; the budgeted arm's is re-sized to the budget
as the run goes (`vitlit.runs.budget.TimeBudget`), in the addon's warmup-stable-decay shape (the cosine over the last
20%); the optional budgeted-cosine arm is the same with the cosine over the whole budget. Each run is a fresh process
(one torch thread), the arms alternate seed by seed; the last checkpoint (where the budget ended) is tested on the
held-out split. Prints every run (test accuracy, seconds the fit took, the learning rate at the end as a share of its
peak) and per budget and arm the mean, then the acceptance: the budgeted arm at least as accurate on the mean, its last
learning rate within 5% of the floor.

    python benchmarks/budget.py                                # budgets 20, 40, 80 s; seeds 0-4
    python benchmarks/budget.py --budgets 20 --seeds 0 1 2 --arms budgeted budgeted-cosine truncated
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR = 0.01  # the digits recipe's WarmupCosineLR min_lr_ratio
ARMS = ("budgeted", "budgeted-cosine", "truncated")

_RUN = """
import json, sys, time
from vitlit.cli import main
start = time.time()
fit = main(["fit", *sys.argv[1:]])
seconds = time.time() - start
last = next(c.last_model_path or c.best_model_path for c in fit.trainer.checkpoint_callbacks if c.monitor is None)
acc = float(main(["test", *sys.argv[1:], "--ckpt_path", last]).trainer.callback_metrics["test/acc"])
lr = fit.trainer.optimizers[0].param_groups[0]["lr"] / fit.trainer.lr_scheduler_configs[0].scheduler.base_lrs[0]
print("RESULT " + json.dumps({"test_acc": acc, "fit_seconds": seconds, "lr_end": lr,
                              "steps": fit.trainer.global_step}))
"""


def run_once(arm: str, budget: int, seed: int, data: Path, work: Path) -> dict:
    """One fit and test of ``arm`` (budgeted or truncated) in a fresh process with one torch thread."""
    clock = f"00:00:{budget // 60:02d}:{budget % 60:02d}"
    flags = ["--config", str(ROOT / "configs" / "digits.yaml"), "--data.root", str(data), "--seed_everything",
             str(seed), "--trainer.max_epochs", "1000", "--trainer.max_time", clock, "--trainer.enable_progress_bar",
             "false", "--trainer.default_root_dir", str(work / f"{arm}-{budget}-{seed}")]  # fmt: skip
    if arm.startswith("budgeted"):
        flags += ["--config", str(ROOT / "configs" / "addons" / "budget.yaml"), "--trainer.callbacks.every_n_steps",
                  "10"]  # fmt: skip
    if arm == "budgeted-cosine":
        flags += ["--model.scheduler.init_args.decay_fraction", "1.0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", _RUN, *flags], capture_output=True, text=True, env=env, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{arm} {budget} s seed {seed} failed:\n{done.stderr[-2000:]}")
    return {"arm": arm, "budget": budget, "seed": seed, **json.loads(line[len("RESULT ") :])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[20, 40, 80], help="seconds")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--arms", nargs="+", default=list(ARMS[::2]), choices=ARMS)
    parser.add_argument("--out", type=Path, help="append every run as a JSON line to this file")
    args = parser.parse_args()
    from vitlit.data.digits import write_digits_folder

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        data = write_digits_folder(Path(tmp) / "digits")
        started = time.time()
        for budget in args.budgets:
            for seed in args.seeds:
                for arm in args.arms:
                    results.append(run_once(arm, budget, seed, data, Path(tmp)))
                    print(json.dumps(results[-1]), flush=True)
    print(f"\n{time.time() - started:.0f} s in all")
    print("| budget s | arm | runs | test accuracy (last ckpt) mean (sd) | fit s mean | lr at the end / peak (mean) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for budget in args.budgets:
        means = {}
        for arm in args.arms:
            rows = [r for r in results if r["budget"] == budget and r["arm"] == arm]
            acc = [r["test_acc"] for r in rows]
            means[arm] = statistics.mean(acc)
            sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
            print(f"| {budget} | {arm} | {len(rows)} | {means[arm]:.4f} ({sd:.4f}) | "
                  f"{statistics.mean(r['fit_seconds'] for r in rows):.1f} | "
                  f"{statistics.mean(r['lr_end'] for r in rows):.3f} |")  # fmt: skip
        lr_ok = all(r["lr_end"] <= FLOOR * 1.05 for r in results if r["budget"] == budget and r["arm"] == "budgeted")
        by_seed = {(r["arm"], r["seed"]): r["test_acc"] for r in results if r["budget"] == budget}
        for other in (a for a in args.arms if a != "budgeted"):
            diffs = [100 * (by_seed[("budgeted", s)] - by_seed[(other, s)]) for s in args.seeds
                     if ("budgeted", s) in by_seed and (other, s) in by_seed]  # fmt: skip
            if diffs:
                se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
                print(f"budget {budget} s: budgeted - {other} {statistics.mean(diffs):+.2f} points (SE {se:.2f}, "
                      f"paired by seed); budgeted lr within 5% of the floor: {lr_ok}")  # fmt: skip
    if args.out is not None:
        with args.out.open("a", encoding="utf-8") as out:
            out.writelines(json.dumps(r) + "\n" for r in results)


if __name__ == "__main__":
    main()
