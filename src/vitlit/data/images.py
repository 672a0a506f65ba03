"""Image files on disk: finding them without following symlink loops, checking them cheaply, decoding them right.

torchvision's ImageFolder follows every symbolic link (a link to a parent folder fills a class with every other
class's images), converts 16-bit images to RGB by clipping (most pixels of a 16-bit PNG become 255), and meets a
truncated or fake image only when a worker decodes it, mid-epoch. Here the files are found with loops and duplicate
folders refused, each file's header and ending are checked before training starts (about as cheap as listing the
folder), and 16-bit images are scaled to 8 bits.

`open_image` is the one way vitlit decodes an image, for every entry point (fit, predict, export, serve): the same
file gives the same pixels everywhere. Every file or upload meets PIL through `open_raster`, which lets only the raster
formats of `RASTER_FORMATS` look at the bytes: PIL's EPS plugin would hand a file named ``x.png`` that holds
PostScript to Ghostscript, a program, and its other plugins read formats nobody trains on. `open_image` reads the size
from the header and refuses an image that would take too much memory or time before decoding it (`MAX_PIXELS`): a
20 KB PNG can hold 13,000 x 13,000 pixels, and a 4 KB one 4,000,000 x 1, which the resize to the model's size would
blow up to billions of pixels.
"""

from __future__ import annotations

import copy
import io
import os
import stat
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import ExifTags, Image, ImageOps
from torch.utils.data import Dataset

from vitlit.errors import ConfigError
from vitlit.text import shown

_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")
#: The PIL formats vitlit decodes (PIL's names; ``PPM`` covers ``.pgm``). Any other bytes are "not an image", whatever
#: the file is called.
RASTER_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "TIFF", "WEBP", "PPM")
#: The file names of those formats that the folders' scans take (every other file is left alone).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
#: PIL's mode for images of each channel count vitlit reads from files: grey, RGB, RGBA.
PIL_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
#: The most pixels an image may have, as stored and after its shorter side is resized to the model's size: a
#: 7,000 x 5,700 photo, under half of PIL's own decompression-bomb limit. Larger images cost seconds and gigabytes
#: each; downscale them once instead. ``vitlit serve --max_pixels`` sets its own bound.
MAX_PIXELS = 40_000_000
#: Bytes a pixel of a PIL mode takes while it is decoded to 8 bits a channel (the decoded image, the 16- and 32-bit
#: scaling's copies, the RGB result), as measured (benchmarks/RESULTS.md, "Decoding cost by mode"). No image may
#: take more than `MAX_PIXELS` of the costliest 8-bit mode (RGBA: 7): 16- and 32-bit ones get fewer pixels.
DECODE_BYTES = {"RGB": 3, "L": 4, "P": 4, "1": 4, "LA": 5, "PA": 5, **dict.fromkeys(_SIXTEEN_BIT, 10), "I": 16}


def pil_mode(in_chans: int, reader: str) -> str:
    """The PIL mode in which ``reader`` decodes image files of ``in_chans`` channels (`PIL_MODES`).

    Raises:
        ConfigError: For a channel count no image file holds, before any file is read.
    """
    if in_chans not in PIL_MODES:
        raise ConfigError(f"{reader} reads image files, which hold 1 (grey), 3 (RGB) or 4 (RGBA) channels, not "
                          f"in_chans={in_chans}; give one of those, or for other data write a data module "
                          f'(docs/your-data.md: "Fork it for your data").')  # fmt: skip
    return PIL_MODES[in_chans]


#: Why an image of float pixels (PIL's ``F``) is refused: their range is unknown, and PIL's conversion clips them.
FLOAT_PIXELS = "32-bit float pixels of unknown range; save it as an 8- or 16-bit image"


def refuse_unlisted(err: OSError) -> None:
    """Refuse a folder that cannot be listed, which `os.walk` would leave out as if it held nothing."""
    raise ConfigError(f"{shown(err.filename)} cannot be listed ({err.strerror}); check its permissions.")


def image_files(top: Path, seen: dict[str, Path] | None = None) -> Iterator[Path]:
    """Every image file below ``top`` (sorted, hidden files and folders left out), following symlinked folders once.

    Args:
        top: The folder.
        seen: The folders already scanned (their real paths, by the path they were scanned as), shared by the caller
            that scans several (a split's class folders): a link from one into another is refused too.

    Raises:
        ConfigError: For a folder reached twice (a symbolic link that leads back to a folder already scanned: a loop,
            or the same images twice), naming both paths; for a folder that cannot be listed (permissions), naming it.
    """
    seen = {} if seen is None else seen
    _scanned_once(top, os.path.realpath(top), seen)  # another class folder may lead to it
    for dirpath, dirnames, filenames in os.walk(top, onerror=refuse_unlisted, followlinks=True):
        here = os.path.realpath(dirpath)
        kept = []
        for name in sorted(dirnames):
            if name.startswith("."):
                continue
            link, real = os.path.join(dirpath, name), os.path.realpath(os.path.join(dirpath, name))
            if (here + os.sep).startswith(real.rstrip(os.sep) + os.sep):  # a loop ("/" is an ancestor too)
                raise ConfigError(f"{link} is a symbolic link to {real}, a folder it lies in (a loop); remove the "
                                  f"link.")  # fmt: skip
            _scanned_once(Path(link), real, seen)
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            if not name.startswith(".") and name.lower().endswith(IMAGE_SUFFIXES):
                yield Path(dirpath) / name


def _scanned_once(folder: Path, real: str, seen: dict[str, Path]) -> None:
    """Note ``folder`` (real path ``real``) as scanned, or refuse it where a symbolic link led there before."""
    first = seen.setdefault(real, folder)
    if first != folder:
        raise ConfigError(f"{folder} and {first} are the same folder ({real}), reached through a symbolic link (the "
                          f"same images twice); remove the link.")  # fmt: skip


def image_problem(path: Path | bytes, stored_side: int | None = None, decode: bool = False) -> str | None:
    """Why ``path`` cannot be trained on or classified, in a few words, or ``None`` if it looks like a complete image.

    Reads the header and the last 64 bytes only: missing, empty or unreadable files, dangling links, pipes and
    devices, files that are no image, images over `MAX_PIXELS` (also once resized to ``stored_side``), float images, and
    PNG/JPEG files cut short (one whose end marker is not at its end is decoded: bytes may follow a whole image).
    ``decode`` also decodes the image, which finds damage inside the compressed pixels; it costs a full read, so it is
    for files read once (``predict_dir``, ``export --images``), not for training sets.
    ``path`` may also be an image's encoded bytes (a row of a Hugging Face data set or a LitData chunk).
    """
    if isinstance(path, (bytes, bytearray)):
        if not path:
            return "empty (0 bytes)"
        size, f = len(path), io.BytesIO(path)
    else:
        try:
            status = os.stat(path)  # follows links
            if not stat.S_ISREG(status.st_mode):  # a pipe or a device would block or never end
                kind = "a folder" if stat.S_ISDIR(status.st_mode) else "a pipe or a device"
                return f"not a regular file ({kind})"
            if status.st_size == 0:
                return "empty (0 bytes)"
            size, f = status.st_size, path.open("rb")
        except FileNotFoundError:
            return "a dangling symbolic link" if path.is_symlink() else "missing"
        except OSError as err:  # permission denied, a folder named like an image, a link loop, ...
            return f"not readable ({err.strerror or type(err).__name__})"
    with f, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the bound below is stricter
        try:
            image = open_raster(f)
        except Image.DecompressionBombError:
            return f"over PIL's decompression-bomb limit of {Image.MAX_IMAGE_PIXELS:,} pixels"
        except (OSError, SyntaxError, ValueError):
            return f"not an image of the formats vitlit reads ({', '.join(RASTER_FORMATS)})"
        too_large = size_problem(*image.size, stored_side, mode=image.mode)
        if too_large is not None:
            return f"too large to decode safely ({too_large}); downscale it"
        if image.mode == "F":
            return FLOAT_PIXELS
        unmarked = False  # a PNG or JPEG whose end marker is not at its end: cut short, or followed by more bytes
        if image.format in ("PNG", "JPEG"):
            f.seek(max(0, size - 64))
            tail = f.read()
            unmarked = not (tail.endswith(b"IEND\xaeB`\x82") if image.format == "PNG" else b"\xff\xd9" in tail)
        if image.format == "WEBP":
            f.seek(0)
            if int.from_bytes(f.read(8)[4:], "little") + 8 > size:  # RIFF's own length
                return "a truncated WEBP file"
    # BMP, GIF, TIFF, PPM have no end marker, so they are decoded; so is a PNG or JPEG with bytes after its marker
    # (a phone's trailer, a motion photo's video), which decodes whole where it is not cut short.
    if decode or unmarked or image.format not in ("PNG", "JPEG", "WEBP"):
        try:
            open_image(io.BytesIO(path) if isinstance(path, (bytes, bytearray)) else path, "RGB", stored_side)
        except (OSError, SyntaxError, ValueError) as err:  # PIL's message, its first line
            if unmarked:
                return f"a truncated {image.format} file"
            first_line = next(iter(str(err).strip().splitlines()), type(err).__name__)
            return f"damaged: PIL cannot decode it ({first_line[:120]})"
    return None


class ImageTooLarge(ValueError):
    """An image whose size (read from its header) exceeds the bound; it is refused before it is decoded."""


def size_problem(
    width: int, height: int, stored_side: int | None = None, max_pixels: int = MAX_PIXELS, mode: str = "RGB"
) -> str | None:
    """Why an image of ``width`` x ``height`` is too large to decode and resize, or ``None``.

    Args:
        width: Width read from the file's header.
        height: Height read from the file's header.
        stored_side: The side its shorter side is resized to (a split's stored size); ``None`` checks the image as
            stored only.
        max_pixels: The bound, for the stored image and for the resized one.
        mode: Its PIL mode, read from the header: what decoding it costs a pixel (`DECODE_BYTES`).
    """
    if width * height > max_pixels:
        return f"{width} x {height} pixels, over the {max_pixels:,} vitlit decodes"
    if width * height * DECODE_BYTES.get(mode, 7) > max_pixels * 7:
        allowed = max_pixels * 7 // DECODE_BYTES[mode]
        return f"{width} x {height} pixels of mode {mode}, which costs more to decode: over the {allowed:,} it may have"
    if stored_side is not None and min(width, height) > 0:
        resized = stored_side * int(stored_side * max(width, height) / min(width, height))  # torchvision truncates
        if resized > max_pixels:
            return (
                f"{width} x {height} pixels, so elongated that resizing its shorter side to {stored_side} gives "
                f"{resized:,} pixels, over the {max_pixels:,} vitlit allows"
            )
    return None


def open_raster(source: str | Path | BinaryIO) -> Image.Image:
    """PIL's ``Image.open`` with only `RASTER_FORMATS`' plugins: the one place where vitlit hands bytes to PIL.

    Raises:
        PIL.UnidentifiedImageError: An ``OSError``, for bytes of any other format (PostScript among them).
    """
    return Image.open(source, formats=RASTER_FORMATS)


def open_image(
    source: str | Path | BinaryIO, mode: str = "RGB", stored_side: int | None = None, max_pixels: int = MAX_PIXELS
) -> Image.Image:
    """Decode an image as 8 bits per channel in PIL ``mode`` (``L``, ``RGB`` or ``RGBA``): vitlit's one decoder.

    The decoded image is turned upright (`upright`) and converted by `to_mode` (16-bit grey scaled, float pixels
    refused).

    Args:
        source: A file path, or a binary file object (an upload).
        mode: The PIL mode of the result.
        stored_side: The side the image will be resized to, for `size_problem`'s bound on the resized image.
        max_pixels: `size_problem`'s bound.

    Raises:
        ImageTooLarge: Before decoding, for an image over the bound.
        OSError, SyntaxError, ValueError: For data PIL cannot decode (PIL's own errors).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the bound below is stricter
        try:
            image = open_raster(source)
        except Image.DecompressionBombError:  # a header claiming billions of pixels: PIL refuses it first
            raise ImageTooLarge(
                f"its header claims over {2 * Image.MAX_IMAGE_PIXELS:,} pixels, over the {max_pixels:,} vitlit decodes"
            ) from None
        with image:
            problem = size_problem(*image.size, stored_side, max_pixels, image.mode)
            if problem is not None:
                raise ImageTooLarge(problem)
            image.load()
            return to_mode(upright(image), mode)


def upright(image: Image.Image) -> Image.Image:
    """``image`` turned as its EXIF orientation says: a phone's photo taken sideways stands as its viewer shows it.

    Hugging Face's ``datasets`` decodes so too, and a photo that trains on its side while a browser uploads it upright
    to the server is another image. A damaged EXIF block leaves the pixels as they are: they are still the image.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PIL warns of a damaged block too, once per image: a flood in training
        try:
            if image.getexif().get(ExifTags.Base.Orientation, 1) in (1, None):
                return image
            return ImageOps.exif_transpose(image)
        except Exception:  # PIL's EXIF parser raises what the bytes lead it to (struct, type, key, value errors)
            return image


def to_mode(image: Image.Image, mode: str) -> Image.Image:
    """``image`` as 8 bits per channel in PIL ``mode``: vitlit's one conversion, for files and a dataset's images.

    16-bit (and 32-bit integer) grey images are scaled to 8 bits, not clipped as PIL's conversion would; palette,
    CMYK, grey-with-alpha and other modes go through PIL's conversion.

    Raises:
        ValueError: For float pixels (PIL's ``F``), whose range is unknown: PIL's conversion would clip them.
    """
    if image.mode == "F":
        raise ValueError(FLOAT_PIXELS)
    if image.mode in _SIXTEEN_BIT:  # v * 255 / 65535 rounded, in integers: 4 bytes a pixel, not float64's 16
        pixels = np.asarray(image).clip(0, 65535).astype(np.uint32)
        pixels *= 255
        pixels += 32767  # no value lands on a half (255 is odd, 65535 odd): the same as rounding
        pixels //= 65535
        return Image.fromarray(pixels.astype(np.uint8)).convert(mode)
    # Already in the mode (the common case): the image as it is, not a converted copy.
    return image if image.mode == mode else image.convert(mode)


@dataclass
class BadImage:
    """An image file that cannot be trained on, and why."""

    path: Path
    problem: str


class ImageFiles(Dataset):
    """``(PIL image, class index)`` for a list of ``(path, class index)``, decoded with `open_image`.

    Shaped like torchvision's ImageFolder (``samples``, ``targets``, ``classes``), so the data modules' default
    hooks read its targets and file names without decoding; an item table's split (`vitlit.data.table`).

    Args:
        samples: ``(path, class index)`` per image.
        classes: Class names in index order.
        mode: PIL mode every image is converted to (``L``, ``RGB`` or ``RGBA``).
        stored_side: The side images are resized to afterwards, for `MAX_PIXELS`'s bound on the resized image.
        where: How messages name the split (``train/``).
    """

    #: How messages name an item, from its name in ``samples``.
    ITEM = "image {}"

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], mode: str = "RGB",
                 stored_side: int | None = None, where: str = "") -> None:  # fmt: skip
        self.samples, self.targets = samples, [target for _, target in samples]
        self.classes, self.mode, self.stored_side, self.where = classes, mode, stored_side, where

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        path, target = self.samples[i]
        try:
            return open_image(path, self.mode, self.stored_side), target
        except (OSError, SyntaxError, ValueError) as err:  # what the start-up check cannot see without decoding
            raise ConfigError(f"image {path} cannot be decoded ({err}); remove or replace the file.") from None

    def problem(self, i: int, decode: bool = False) -> str | None:
        """Why item ``i`` cannot be read (`image_problem`, from its header), or ``None``."""
        return image_problem(Path(self.samples[i][0]), self.stored_side, decode)

    def keep(self, indices: Sequence[int]) -> ImageFiles:
        """The items at ``indices`` only."""
        kept = copy.copy(self)
        kept.samples = [self.samples[i] for i in indices]
        kept.targets = [target for _, target in kept.samples]
        return kept


def predict_files(folder: Path, in_chans: int) -> list[Path]:
    """The image files below ``predict_dir``, found before any work starts (it must hold at least one)."""
    if not folder.is_dir():
        raise ConfigError(f"predict_dir={folder} is not a folder; give the folder of images to classify.")
    pil_mode(in_chans, "predict_dir")
    found = list(image_files(folder))
    if not found:
        raise ConfigError(
            f"predict_dir={folder} holds no image ({', '.join(IMAGE_SUFFIXES)}), also in its sub-folders."
        )
    return found


def readable_images(files: list[Path], folder: Path, in_chans: int, stored_side: int, speak: bool = True) -> ImageFiles:
    """``predict_dir``'s images that decode, with the class index -1; each one left out is named in one line.

    Decoded in full: these files are read once, and damage inside a file must not stop the whole predict. They are
    unlabelled, so they name no classes: the model's class names label the predictions.
    """
    images = ImageFiles([(str(path), -1) for path in files], [], PIL_MODES[in_chans], stored_side)
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

    def readable(self, stored_side: int, speak: bool = True) -> ImageFiles:
        """The folder's images that decode (`readable_images`): the dataset ``predict`` classifies."""
        self.images = readable_images(self.files, self.folder, self.in_chans, stored_side, speak)
        return self.images
