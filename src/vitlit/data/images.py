"""Image files on disk: finding them without following symlink loops, checking them cheaply, decoding them right.

torchvision's ImageFolder follows every symbolic link (a link to a parent folder fills a class with every other
class's images), converts 16-bit images to RGB by clipping (most pixels of a 16-bit PNG become 255), and meets a
truncated or fake image only when a worker decodes it, mid-epoch. Here the files are found with loops and duplicate
folders refused, each file's header and ending are checked before training starts (about as cheap as listing the
folder; the figure is in the README), and 16-bit images are scaled to 8 bits.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS

from vitlit.errors import ConfigError

_PNG_END = b"IEND\xaeB`\x82"  # the last chunk of every complete PNG file
_JPEG_END = b"\xff\xd9"  # the end-of-image marker; some writers add padding after it
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")


def image_files(top: Path) -> Iterator[Path]:
    """Every image file below ``top`` (sorted, hidden files and folders left out), following symlinked folders once.

    Raises:
        ConfigError: For a symbolic link that leads back to a folder already being scanned (a loop, or the same
            images twice), naming the link.
    """
    seen = {os.path.realpath(top)}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        here = os.path.realpath(dirpath)
        kept = []
        for name in sorted(dirnames):
            if name.startswith("."):
                continue
            link, real = os.path.join(dirpath, name), os.path.realpath(os.path.join(dirpath, name))
            if real in seen or (here + os.sep).startswith(real + os.sep):
                raise ConfigError(
                    f"{link} is a symbolic link to {real}, a folder already scanned (a loop, or the same images "
                    f"twice); remove the link."
                )
            seen.add(real)
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            if not name.startswith(".") and name.lower().endswith(IMG_EXTENSIONS):
                yield Path(dirpath) / name


def image_problem(path: Path) -> str | None:
    """Why ``path`` cannot be trained on, in a few words, or ``None`` if it looks like a complete image.

    Reads the header and the last 64 bytes only: missing or empty files, dangling links, files that are no image,
    images over PIL's decompression-bomb limit, float images, and PNG/JPEG files cut short are found here.
    """
    try:
        size = os.stat(path).st_size  # follows links
    except FileNotFoundError:
        return "a dangling symbolic link" if path.is_symlink() else "missing"
    if size == 0:
        return "empty (0 bytes)"
    limit = f"over PIL's decompression-bomb limit of {Image.MAX_IMAGE_PIXELS:,} pixels"
    with path.open("rb") as f:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # reported below, as a problem
                image = Image.open(f)
                mode, image_format, (width, height) = image.mode, image.format, image.size
        except Image.DecompressionBombError:
            return limit
        except (OSError, SyntaxError, ValueError):
            return "not an image PIL can read"
        if Image.MAX_IMAGE_PIXELS and width * height > Image.MAX_IMAGE_PIXELS:
            return limit
        if mode == "F":
            return "32-bit float pixels of unknown range; save it as an 8- or 16-bit image"
        if image_format in ("PNG", "JPEG"):  # other formats end without a marker to look for
            f.seek(max(0, size - 64))
            tail = f.read()
            if not (tail.endswith(_PNG_END) if image_format == "PNG" else _JPEG_END in tail):
                return f"a truncated {image_format} file"
    return None


def load_image(path: str | Path, mode: str = "RGB") -> Image.Image:
    """Decode an image file as 8 bits per channel in PIL ``mode`` (``L``, ``RGB`` or ``RGBA``).

    16-bit (and 32-bit integer) grey images are scaled to 8 bits, not clipped as PIL's conversion would.
    """
    with Image.open(path) as image:
        image.load()
        if image.mode in _SIXTEEN_BIT:
            pixels = np.asarray(image, dtype=np.float64).clip(0, 65535) * (255 / 65535)
            return Image.fromarray(pixels.round().astype(np.uint8)).convert(mode)
        # Already in the mode (the common case): the decoded image as it is, not a converted copy.
        return image if image.mode == mode else image.convert(mode)


@dataclass
class BadImage:
    """An image file that cannot be trained on, and why."""

    path: Path
    problem: str


def check_images(paths: Sequence[Path]) -> list[BadImage]:
    """The files of ``paths`` that cannot be trained on (see `image_problem`)."""
    return [BadImage(p, problem) for p in paths if (problem := image_problem(p)) is not None]


def without_bad(samples: Sequence[tuple[Path, int]], bad: Sequence[BadImage]) -> list[tuple[str, int]]:
    """``(path, class index)`` samples for `ImageFiles`, leaving out the files of ``bad``."""
    skip = {b.path for b in bad}
    return [(str(path), target) for path, target in samples if path not in skip]


class ImageFiles(Dataset):
    """``(PIL image, class index)`` for a list of ``(path, class index)``, decoded with `load_image`.

    Shaped like torchvision's ImageFolder (``samples``, ``targets``, ``classes``), so the data modules' default
    hooks read its targets and file names without decoding.

    Args:
        samples: ``(path, class index)`` per image.
        classes: Class names in index order.
        mode: PIL mode every image is converted to (``L``, ``RGB`` or ``RGBA``).
    """

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], mode: str = "RGB") -> None:
        self.samples = samples
        self.targets = [target for _, target in samples]
        self.classes = classes
        self.mode = mode

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        path, target = self.samples[i]
        try:
            return load_image(path, self.mode), target
        except (OSError, SyntaxError, ValueError) as err:  # what the start-up check cannot see without decoding
            raise ConfigError(f"image {path} cannot be decoded ({err}); remove or replace the file.") from None
