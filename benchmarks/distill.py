"""Does distillation help on real images? A teacher, then one student with and one without it, same budget and seeds.

On scikit-learn's digits (offline, as ``benchmarks/digits.py``): the teacher is ``test_vit`` with patch 4 (64 tokens)
trained for ``--teacher-epochs``; the students are ``test_vit`` with patch 8 (16 tokens, a quarter of the
attention cost) trained for ``--student-epochs`` with the same recipe, seeds and batches, once plain and once with
``configs/addons/distill.yaml`` (soft, alpha 0.7, T 4). Each is tested once, with its best checkpoint on validation.

    python benchmarks/distill.py      # last line: distill student_acc=<with> baseline_acc=<without> teacher_acc=<t>
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from vitlit.cli import main
from vitlit.data.digits import write_digits_folder

CONFIGS = Path(__file__).parents[1] / "configs"
# The notebook's short-run settings: the fast on-device path, a larger batch and learning rate.
FAST = ["--data.batch_size", "128", "--data.source", "memory", "--model.optimizer.init_args.lr", "4e-3",
        "--model.scheduler.init_args.warmup_steps", "40"]  # fmt: skip


def fit_and_test(name: str, work: Path, data: Path, epochs: int, extra: list[object]) -> tuple[float, Path, float]:
    """Train, test the best checkpoint; return (test accuracy, that checkpoint, seconds)."""
    start = time.perf_counter()
    common = [
        "--config",
        CONFIGS / "digits.yaml",
        *extra,
        "--data.root",
        data,
        "--trainer.default_root_dir",
        work / name,
    ]
    fit = main([str(a) for a in ["fit", *common, *FAST, "--trainer.max_epochs", epochs]])
    best = Path(fit.trainer.checkpoint_callback.best_model_path)
    test = main([str(a) for a in ["test", *common, *FAST, "--ckpt_path", best]])
    return float(test.trainer.callback_metrics["test/acc"]), best, time.perf_counter() - start


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher-epochs", type=int, default=60)
    parser.add_argument("--student-epochs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vitlit-distill-") as tmp:
        work = Path(tmp)
        data = write_digits_folder(work / "digits")
        teacher_acc, teacher, t_s = fit_and_test("teacher", work, data, args.teacher_epochs, ["--model.patch_size", 4])
        print(f"teacher test_vit/4, {args.teacher_epochs} epochs: test accuracy {teacher_acc:.4f} ({t_s:.0f} s)")
        student = ["--model.patch_size", 8]
        base_acc, _, b_s = fit_and_test("baseline", work, data, args.student_epochs, student)
        print(f"student test_vit/8, {args.student_epochs} epochs, plain: test accuracy {base_acc:.4f} ({b_s:.0f} s)")
        distilled = [*student, "--config", CONFIGS / "addons" / "distill.yaml", "--model.distillation.teacher", teacher]
        dist_acc, _, d_s = fit_and_test("distilled", work, data, args.student_epochs, distilled)
        print(
            f"student test_vit/8, {args.student_epochs} epochs, distilled: test accuracy {dist_acc:.4f} ({d_s:.0f} s)"
        )
    print(f"distill student_acc={dist_acc:.4f} baseline_acc={base_acc:.4f} teacher_acc={teacher_acc:.4f}")


if __name__ == "__main__":
    main_()
