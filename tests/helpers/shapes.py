"""A first-hour data set nobody here tuned for: three classes of drawn shapes as a new user makes them with PIL.

Circles, squares and triangles, one per image, in random colours, sizes, positions and rotations on random
backgrounds (plain, two-tone or noisy), at random sides of 40-80 px, saved in the formats people's folders hold
(PNG, CMYK JPEG, 16-bit grey PNG, WebP), one class partly in a nested folder, plain class folders (no split). The
README's own-images line must learn it (benchmarks/learning_margins.py ``shapes``; tests/test_first_hour.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ("circle", "square", "triangle")


def _colour(rng: np.random.Generator, away_from: tuple[int, ...] | None = None) -> tuple[int, int, int]:
    """A random RGB colour; with ``away_from``, one that differs from it visibly (the shape must be seen)."""
    while True:
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if away_from is None or sum(abs(a - b) for a, b in zip(colour, away_from, strict=True)) > 150:
            return colour


def _background(rng: np.random.Generator, side: int) -> tuple[Image.Image, tuple[int, ...]]:
    """A plain, two-tone or noisy background, and its mean colour."""
    base = _colour(rng)
    kind = rng.integers(3)
    pixels = np.full((side, side, 3), base, dtype=np.float64)
    if kind == 1:  # two tones split at a random row
        pixels[rng.integers(side) :] = np.clip(np.array(base) + rng.integers(-40, 41, 3), 0, 255)
    elif kind == 2:  # noise
        pixels += rng.normal(0, 20, pixels.shape)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return image, base


def draw_shape(name: str, rng: np.random.Generator) -> Image.Image:
    """One RGB image of the shape ``name``: random side 40-80 px, size 35-75% of it, position, rotation, colours."""
    side = int(rng.integers(40, 81))
    image, background = _background(rng, side)
    r = side * rng.uniform(0.35, 0.75) / 2
    cx, cy = (float(rng.uniform(r, side - r)) for _ in range(2))
    fill = _colour(rng, away_from=background)
    draw = ImageDraw.Draw(image)
    if name == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    else:
        corners = 4 if name == "square" else 3
        turn = rng.uniform(0, 2 * math.pi)
        reach = r * (math.sqrt(2) if corners == 4 else 1.15)  # a square's half side r; a triangle about as large
        points = [(cx + reach * math.cos(turn + 2 * math.pi * k / corners),
                   cy + reach * math.sin(turn + 2 * math.pi * k / corners)) for k in range(corners)]  # fmt: skip
        draw.polygon([(min(max(x, 0), side - 1), min(max(y, 0), side - 1)) for x, y in points], fill=fill)
    return image


def _save(image: Image.Image, path: Path, kind: int) -> None:
    """Save in one of four formats: PNG, CMYK JPEG, 16-bit grey PNG, WebP."""
    if kind == 0:
        image.save(path.with_suffix(".png"))
    elif kind == 1:
        image.convert("CMYK").save(path.with_suffix(".jpg"), quality=90)
    elif kind == 2:
        grey = np.asarray(image.convert("L"), dtype=np.uint16) * 257  # the full 16-bit range
        Image.fromarray(grey).save(path.with_suffix(".png"))
    else:
        image.save(path.with_suffix(".webp"), quality=90)


def write_shapes(root: Path, per_class: int = 150, seed: int = 0) -> Path:
    """Write ``per_class`` images of each shape as ``root/<class>/...`` (plain class folders) and return ``root``."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(CLASSES):
        for i in range(per_class):
            folder = root / name / ("more" if c == 2 and i % 2 else "")  # half of one class in a nested folder
            folder.mkdir(parents=True, exist_ok=True)
            _save(draw_shape(name, rng), folder / f"{name}_{i:03d}", kind=int(rng.integers(4)))
    return root
