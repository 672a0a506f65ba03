"""The spread of the suite's learning figures over seeds, thread counts and CPU kernels, for setting their thresholds.

A test that asserts a learned accuracy must pass on any machine. This runs the digits fit behind such an assertion
(`tests/helpers/learning.py`, or any flags) in fresh processes over seeds x torch threads x torch's CPU kernels
(``ATEN_CPU_CAPABILITY``: ``default`` is the generic code, ``avx2`` what this machine picks; an AVX-512 machine
picks ``avx512``), which changes the order of floating-point sums the way another machine would, and prints every
run and the spread.

    python benchmarks/learning_margins.py policy-trivialaugment               # 5 seeds x 1-2 threads x 2 kernels
    python benchmarks/learning_margins.py --flags "--data.augment trivialaugment --trainer.max_epochs 8" \
        --metric best_val_acc --seeds 0 1 2
    # last line: <case> metric=<name> min=<x> mean=<y> max=<z> runs=<n> threshold=<t>; each run's line has its
    # seconds (the whole process: start-up, fit, and the test where the metric needs one)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.learning import CASES, DIGITS, write_digits_npz  # noqa: E402

# One run, in a fresh process (the thread count and kernels are fixed at start-up): fit, then the metric as JSON.
_RUN = """
import json, sys
from pathlib import Path
import torch
torch.set_num_threads(int(sys.argv[1]))
from vitlit.cli import main
from vitlit.runs.curves import read_scalars
metric, args = sys.argv[2], sys.argv[3:]
fit = main(["fit", *args])
curve = [v for _, v in read_scalars(fit.trainer.log_dir)["val/acc"]]
result = {"best_val_acc": max(curve), "last_val_acc": curve[-1], "curve": [round(v, 3) for v in curve]}
if metric in ("test_acc", "last_test_acc"):
    best = fit.trainer.checkpoint_callback.best_model_path
    ckpt = best if metric == "test_acc" else str(Path(fit.trainer.log_dir) / "checkpoints" / "last.ckpt")
    test = main(["test", *args, "--ckpt_path", ckpt])
    result[metric] = float(test.trainer.callback_metrics["test/acc"])
print("RESULT " + json.dumps(result))
"""


def run_once(
    flags: list[str], metric: str, seed: int, threads: int, kernel: str, work: Path, data: Path, config: Path
) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "ATEN_CPU_CAPABILITY": kernel, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    root = work / f"s{seed}-t{threads}-{kernel}"
    where = "--data.path" if data.suffix == ".npz" else "--data.root"
    args = ["--config", str(config), where, str(data), "--trainer.default_root_dir", str(root),
            "--seed_everything", str(seed), *flags]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _RUN, str(threads), metric, *args], env=env, capture_output=True,
                          text=True)  # fmt: skip
    seconds = time.perf_counter() - started
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the run failed:\n{done.stderr[-3000:]}")
    return {**json.loads(line.removeprefix("RESULT ")), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", nargs="?", choices=sorted(CASES), help="a learning case of the suite")
    parser.add_argument("--flags", help="flags for configs/digits.yaml instead of a case's")
    parser.add_argument(
        "--metric", default="best_val_acc", choices=["best_val_acc", "last_val_acc", "test_acc", "last_test_acc"]
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--kernels", nargs="+", default=["default", "avx2"], help="ATEN_CPU_CAPABILITY values")
    args = parser.parse_args()
    if args.case is None and args.flags is None:
        parser.error("give a case or --flags")
    case = CASES.get(args.case)
    flags = shlex.split(args.flags) if args.flags else list(case.flags)
    metric = case.metric if case is not None and not args.flags else args.metric
    from vitlit.data.digits import write_digits_folder

    values = []
    with tempfile.TemporaryDirectory(prefix="vitlit-margins-") as tmp:
        work = Path(tmp)
        npz = case is not None and case.npz
        data = write_digits_npz(work / "digits.npz") if npz else write_digits_folder(work / "digits")
        config = case.config if case is not None else DIGITS
        for seed, threads, kernel in itertools.product(args.seeds, args.threads, args.kernels):
            result = run_once(flags, metric, seed, threads, kernel, work, data, config)
            values.append(result[metric])
            print(f"seed={seed} threads={threads} kernel={kernel} {metric}={result[metric]:.4f} "
                  f"seconds={result['seconds']:.0f} val/acc per epoch={result['curve']}", flush=True)  # fmt: skip
    threshold = f" threshold={case.threshold}" if case is not None and not args.flags else ""
    print(f"{args.case or 'flags'} metric={metric} min={min(values):.4f} mean={statistics.mean(values):.4f} "
          f"max={max(values):.4f} runs={len(values)}{threshold}")  # fmt: skip


if __name__ == "__main__":
    main()
