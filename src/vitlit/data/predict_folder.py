"""``--data.predict_dir``: any folder of images to classify, found before any work starts; unreadable files left out.

Loaded only where a run is given such a folder (`vitlit.data.ImageClassificationDataModule`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from vitlit.data.images import IMAGE_SUFFIXES, PIL_MODES, ImageFiles, image_files
from vitlit.errors import ConfigError
from vitlit.text import shown


def predict_files(folder: Path, in_chans: int) -> list[Path]:
    """The image files below ``predict_dir``, found before any work starts (it must hold at least one)."""
    if not folder.is_dir():
        raise ConfigError(f"predict_dir={folder} is not a folder; give the folder of images to classify.")
    if in_chans not in PIL_MODES:
        raise ConfigError(f"predict_dir reads image files, which hold 1, 3 or 4 channels, not in_chans={in_chans}.")
    found = list(image_files(folder))
    if not found:
        raise ConfigError(
            f"predict_dir={folder} holds no image ({', '.join(IMAGE_SUFFIXES)}), also in its sub-folders."
        )
    return found


def readable_images(
    files: list[Path], folder: Path, classes: list[str], in_chans: int, img_size: int, speak: bool = True
) -> ImageFiles:
    """``predict_dir``'s images that decode, with the class index -1; each one left out is named in one line.

    Decoded in full: these files are read once, and damage inside a file must not stop the whole predict.
    """
    images = ImageFiles([(str(path), -1) for path in files], classes, PIL_MODES[in_chans], img_size)
    bad = {i: problem for i in range(len(images)) if (problem := images.problem(i, decode=True)) is not None}
    for i, problem in bad.items() if speak else ():  # one line each, as vitlit's other notes, not a warning
        print(f"vitlit: skipping {shown(files[i])}: {shown(problem)}", file=sys.stderr)
    if len(bad) == len(files):
        raise ConfigError(f"predict_dir={folder} holds no readable image; all {len(bad)} were skipped.")
    return images.keep([i for i in range(len(images)) if i not in bad])


class PredictFolder:
    """``--data.predict_dir``: its image files, found when the data module is built, and later its readable images.

    Args:
        folder: The folder, which must hold at least one image file (`predict_files`).
        in_chans: The channels the images are read with.
    """

    def __init__(self, folder: Path, in_chans: int) -> None:
        self.folder, self.in_chans = folder, in_chans
        self.files = predict_files(folder, in_chans)
        self.images: ImageFiles | None = None  # the dataset `predict` classifies, once asked for

    def readable(self, classes: list[str], img_size: int, speak: bool = True) -> ImageFiles:
        """The folder's images that decode (`readable_images`): the dataset ``predict`` classifies."""
        self.images = readable_images(self.files, self.folder, classes, self.in_chans, img_size, speak)
        return self.images
