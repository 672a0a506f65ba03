"""Image files checked before training from their header and ending, about as cheap as listing the folder.

Without this part `vitlit.data.images.image_problem` decodes every image of a split once before training; here a
truncated or fake file, a pipe that would block a worker, or a decompression bomb is found without decoding it.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

from PIL import Image

from vitlit.data.images import RASTER_FORMATS, open_raster, size_problem

_PNG_END = b"IEND\xaeB`\x82"  # the last chunk of every complete PNG file
_JPEG_END = b"\xff\xd9"  # the end-of-image marker; some writers add padding after it


def image_problem(path: Path, img_size: int | None = None) -> str | None:
    """Why ``path`` cannot be trained on or classified, in a few words, or ``None`` if it looks like a complete image.

    Reads the header and the last 64 bytes only: missing, empty or unreadable files, dangling links, pipes and
    devices, files that are no image, images over `vitlit.data.images.MAX_PIXELS` (also once resized to
    ``img_size``), float images, and PNG/JPEG files cut short are found here; damage inside the compressed pixels
    needs a decode (`vitlit.data.images.image_problem` with ``decode``).
    """
    try:
        status = os.stat(path)  # follows links
    except FileNotFoundError:
        return "a dangling symbolic link" if path.is_symlink() else "missing"
    except OSError as err:
        return f"not readable ({err.strerror or type(err).__name__})"
    if not stat.S_ISREG(status.st_mode):  # a pipe or a device would block or never end
        return "not a regular file (a pipe or a device)"
    size = status.st_size
    if size == 0:
        return "empty (0 bytes)"
    try:
        f = path.open("rb")
    except OSError as err:  # permission denied, a folder named like an image, ...
        return f"not readable ({err.strerror or type(err).__name__})"
    with f:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the bound below is stricter
                image = open_raster(f)
                mode, image_format, (width, height) = image.mode, image.format, image.size
        except Image.DecompressionBombError:
            return f"over PIL's decompression-bomb limit of {Image.MAX_IMAGE_PIXELS:,} pixels"
        except (OSError, SyntaxError, ValueError):
            return f"not an image of the formats vitlit reads ({', '.join(RASTER_FORMATS)})"
        too_large = size_problem(width, height, img_size)
        if too_large is not None:
            return f"too large to decode safely ({too_large}); downscale it"
        if mode == "F":
            return "32-bit float pixels of unknown range; save it as an 8- or 16-bit image"
        if image_format in ("PNG", "JPEG"):  # other formats end without a marker to look for
            f.seek(max(0, size - 64))
            tail = f.read()
            if not (tail.endswith(_PNG_END) if image_format == "PNG" else _JPEG_END in tail):
                return f"a truncated {image_format} file"
    return None
