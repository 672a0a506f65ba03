"""Read a finished run back: the scalars TensorBoard shows, for notebooks, benchmarks and tests."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Return every scalar curve of a run as ``{tag: [(step, value), ...]}``.

    Args:
        run_dir: A ``lightning_logs/version_N`` directory (it holds the ``events.out.tfevents.*`` files).

    Returns:
        The curves by tag, e.g. ``train/loss``, ``val/acc``, ``lr-AdamW/decay``; steps are optimizer steps.
    """
    # size_guidance 0 keeps every point; TensorBoard's default would subsample long curves to 10,000 points.
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
