"""What a run logs beyond the model's metrics: `SkippedImages` lists the files a data module left out.

`vitlit.runs.curves.read_scalars` reads a run's curves back.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

from vitlit.text import shown


class SkippedImages(Callback):
    """List the images a data module left out (``--data.bad_images skip``) in the run's ``skipped_images.txt``.

    Reads the data module's ``skipped`` list (`vitlit.data.ImageFolderDataModule`) after each setup, appends the new
    entries (path and problem) and logs their count as ``data/skipped_images``.
    """

    def __init__(self) -> None:
        self.listed = 0

    @rank_zero_only
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        skipped = getattr(trainer.datamodule, "skipped", None) or []
        if len(skipped) <= self.listed or not trainer.log_dir:
            return
        where = Path(trainer.log_dir)
        where.mkdir(parents=True, exist_ok=True)
        with (where / "skipped_images.txt").open("a") as f:
            # One line per file: a name's newlines, tabs and terminal escapes are written as escapes.
            f.writelines(f"{shown(bad.path)}\t{shown(bad.problem)}\n" for bad in skipped[self.listed :])
        self.listed = len(skipped)
        for logger in trainer.loggers:
            logger.log_metrics({"data/skipped_images": float(len(skipped))}, step=0)
        rank_zero_info(f"vitlit: {len(skipped)} skipped image(s) listed in {where / 'skipped_images.txt'}")
