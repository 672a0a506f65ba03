"""RandomResizedCrop on the training device, batched: each image its own box, drawn at once, resampled at once.

Loaded by runs with ``--data.crop resized`` only (`vitlit.data.augment.Augment`); timm's and DeiT's training crop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torchvision.ops import roi_align

from vitlit.data.augment import ALL, Interpolation


def resized_crop_boxes(
    n: int, height: int, width: int, scale: Sequence[float], ratio: Sequence[float], device: torch.device
) -> torch.Tensor:
    """Boxes ``(top, left, height, width)`` of RandomResizedCrop for ``n`` images, drawn at once: an (n, 4) tensor.

    Per image as torchvision's ``RandomResizedCrop.get_params``: up to 10 attempts draw an area fraction uniform in
    ``scale`` and a log-uniform aspect ratio in ``ratio``; the first box that fits is placed uniformly; where none
    fits, the centre crop of the image clamped to ``ratio``.
    """
    attempts = 10
    area = torch.empty(n, attempts, device=device).uniform_(*scale) * (height * width)
    aspect = torch.empty(n, attempts, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1])).exp_()
    w, h = (area * aspect).sqrt_().round_(), (area / aspect).sqrt_().round_()
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.int().argmax(dim=1, keepdim=True)  # the first attempt that fits (0 if none does)
    h, w, found = h.gather(1, first)[:, 0], w.gather(1, first)[:, 0], fits.any(dim=1)
    # torchvision's fallback: the whole image, clamped to the ratio range, centred.
    in_ratio = width / height
    fall_w = width if in_ratio <= max(ratio) else round(height * max(ratio))
    fall_h = height if in_ratio >= min(ratio) else round(width / min(ratio))
    h, w = torch.where(found, h, float(fall_h)), torch.where(found, w, float(fall_w))
    top = torch.where(found, (torch.rand(n, device=device) * (height - h + 1)).floor_(), (height - h) // 2)
    left = torch.where(found, (torch.rand(n, device=device) * (width - w + 1)).floor_(), (width - w) // 2)
    return torch.stack([top, left, h, w], dim=1)


def random_resized_crop(
    images: torch.Tensor,
    size: int,
    scale: Sequence[float],
    ratio: Sequence[float],
    interpolation: Interpolation = "bilinear",
    among: int | None = None,
    share: slice = ALL,
) -> torch.Tensor:
    """RandomResizedCrop of a uint8 batch: each image its own box (`resized_crop_boxes`), resampled to ``size``.

    ``bilinear`` resamples with ``torchvision.ops.roi_align``, which averages several samples per output pixel where
    the box shrinks (``sampling_ratio`` adaptive), so it does not alias as plain bilinear sampling would; ``bicubic``
    with ``grid_sample``. Both sample pixel centres as a resize with ``align_corners=False`` does.
    """
    b, _, height, width = images.shape
    top, left, h, w = resized_crop_boxes(among or b, height, width, scale, ratio, images.device)[share].unbind(1)
    x = images.float()
    if interpolation == "bilinear":
        boxes = torch.stack([torch.arange(b, device=x.device, dtype=x.dtype), left, top, left + w, top + h], dim=1)
        out = roi_align(x, boxes, output_size=size, spatial_scale=1.0, sampling_ratio=-1, aligned=True)
    else:  # the box in grid_sample's [-1, 1] coordinates of the whole image (align_corners=False)
        theta = torch.zeros(b, 2, 3, device=x.device)
        theta[:, 0, 0], theta[:, 0, 2] = w / width, (2 * left + w) / width - 1
        theta[:, 1, 1], theta[:, 1, 2] = h / height, (2 * top + h) / height - 1
        grid = F.affine_grid(theta, [b, x.shape[1], size, size], align_corners=False)
        out = F.grid_sample(x, grid, mode="bicubic", padding_mode="border", align_corners=False)
    return out.round_().clamp_(0, 255).to(torch.uint8)  # uint8 again, as the policies after it take
