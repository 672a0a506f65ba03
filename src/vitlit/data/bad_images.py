"""``--data.bad_images``: what becomes of the files the start-up check found unreadable; loaded only where some are.

`vitlit.data.table.ItemTableDataModule` checks each image of a split (its header and ending) before the first step;
a split with a bad file comes here.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.utilities import rank_zero_info

from vitlit.data.images import BadImage, ImageFiles
from vitlit.errors import ConfigError


def left_out(items: ImageFiles, bad: dict[int, str], action: str) -> tuple[ImageFiles, list[BadImage]]:
    """Refuse the first of ``bad`` (item index: problem) in one line (``error``), or leave them all out (``skip``).

    Returns:
        The split's other items, and the files left out (the runs part lists them in the run's
        ``skipped_images.txt``: `vitlit.runs.logs.SkippedImages`).
    """
    if action == "error":
        (i, problem), more = next(iter(bad.items())), f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ConfigError(f"{items.ITEM.format(items.samples[i][0])} is {problem}{more}; remove or replace it, or "
                          f"pass --data.bad_images skip to train without such images.")  # fmt: skip
    # A log line, not a Python warning: a warning would print vitlit's own source line under it.
    rank_zero_info(f"vitlit: skipping {len(bad)} unreadable image(s) of {items.where} (--data.bad_images skip)")
    kept = items.keep([i for i in range(len(items)) if i not in bad])
    return kept, [BadImage(Path(items.samples[i][0]), problem) for i, problem in bad.items()]
