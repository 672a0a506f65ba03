"""Reading a run's TensorBoard curves back: for the notebooks, benchmarks and tests (a run itself never reads them)."""

from __future__ import annotations

from pathlib import Path


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar curve of a run as ``{tag: [(step, value), ...]}`` (``train/loss``, ``val/acc``, ...).

    Args:
        run_dir: A ``lightning_logs/version_N`` directory (it holds the ``events.out.tfevents.*`` files).
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # size_guidance 0 keeps every point; TensorBoard's default would subsample long curves to 10,000 points.
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
