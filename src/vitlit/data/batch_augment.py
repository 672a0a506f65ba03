"""Augmentations that act on whole training batches on the training device: random erasing and Mixup/CutMix.

Mixup/CutMix is timm's (``timm.data.Mixup`` mixes pairs of images and their one-hot targets). Random erasing draws
timm's distribution (``timm.data.RandomErasing`` with ``mode="pixel"``: area 2-33% of the image, aspect ratio
0.3-3.3 log-uniform, up to 10 attempts to fit, per-pixel normal noise) but for the whole batch at once: timm's
version loops over the images in Python with one host-side draw and one kernel per erased image, which on a GPU
costs more than the erasing itself. Running both after the batch reaches the device keeps the per-image worker
pipeline cheap (or absent, with ``on_device``), and lets the erasing probability follow the progress of training.
"""

from __future__ import annotations

import math

import torch
from timm.data import Mixup

# timm's RandomErasing defaults, which DeiT's recipe uses.
_MIN_AREA, _MAX_AREA = 0.02, 1 / 3
_LOG_ASPECT = (math.log(0.3), math.log(1 / 0.3))
_ATTEMPTS = 10


def random_erasing(images: torch.Tensor, probability: float) -> torch.Tensor:
    """Replace one random rectangle of each image, with ``probability``, by normal noise; one pass over the batch.

    Per image, as ``timm.data.RandomErasing(probability, mode="pixel")``: up to 10 attempts draw an area fraction
    uniform in [0.02, 1/3] and a log-uniform aspect ratio in [0.3, 3.33] until the rectangle fits; its position is
    uniform; an image where no attempt fits stays as it is. No host synchronisation. The noise is drawn for the
    whole batch, which a GPU does in microseconds; on a CPU timm's loop is cheaper (about 6 against 12 ms for 512
    images at 32 px), but there the model's step dominates anyway.

    Args:
        images: Normalised images, shape (B, C, H, W).
        probability: Chance that an image is erased.

    Returns:
        A new batch; ``images`` is not modified.
    """
    b, _, h, w = images.shape
    device = images.device
    area = torch.empty(b, _ATTEMPTS, device=device).uniform_(_MIN_AREA, _MAX_AREA) * (h * w)
    aspect = torch.empty(b, _ATTEMPTS, device=device).uniform_(*_LOG_ASPECT).exp_()
    heights = (area * aspect).sqrt_().round_()
    widths = (area / aspect).sqrt_().round_()
    fits = (heights < h) & (widths < w)
    first = fits.int().argmax(dim=1, keepdim=True)  # the first attempt that fits (0 if none does)
    height, width = heights.gather(1, first), widths.gather(1, first)  # (B, 1)
    erase = (torch.rand(b, 1, device=device) < probability) & fits.any(dim=1, keepdim=True)
    top = (torch.rand(b, 1, device=device) * (h - height + 1)).floor_()
    left = (torch.rand(b, 1, device=device) * (w - width + 1)).floor_()
    rows = torch.arange(h, device=device)
    cols = torch.arange(w, device=device)
    inside_rows = (rows >= top) & (rows < top + height) & erase  # (B, H)
    inside_cols = (cols >= left) & (cols < left + width)  # (B, W)
    mask = (inside_rows[:, :, None] & inside_cols[:, None, :])[:, None]  # (B, 1, H, W)
    return torch.where(mask, torch.randn_like(images), images)


class BatchAugment:
    """Random erasing (with a linear probability schedule), then Mixup/CutMix, on a training batch.

    Args:
        num_classes: Number of classes, for the one-hot targets of Mixup/CutMix.
        erasing: Probability of erasing a random rectangle of each image at the start of training.
        erasing_end: Probability at the end of training (linear in between); ``None`` keeps ``erasing``.
        mixup_alpha: Beta(alpha, alpha) parameter of Mixup; 0 disables Mixup.
        cutmix_alpha: Beta(alpha, alpha) parameter of CutMix; 0 disables CutMix.
        mixup_prob: Probability of mixing a batch at all.
        switch_prob: With both enabled, probability of CutMix instead of Mixup for a batch.
    """

    def __init__(
        self,
        num_classes: int,
        *,
        erasing: float = 0.0,
        erasing_end: float | None = None,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        mixup_prob: float = 1.0,
        switch_prob: float = 0.5,
    ) -> None:
        self.erasing_start = erasing
        self.erasing_end = erasing if erasing_end is None else erasing_end
        # label_smoothing=0: the model's loss smooths once, for hard and mixed targets alike.
        self.mixup = (
            Mixup(
                mixup_alpha=mixup_alpha,
                cutmix_alpha=cutmix_alpha,
                prob=mixup_prob,
                switch_prob=switch_prob,
                mode="batch",
                label_smoothing=0.0,
                num_classes=num_classes,
            )
            if mixup_alpha > 0 or cutmix_alpha > 0
            else None
        )

    @property
    def active(self) -> bool:
        """Whether any batch augmentation is enabled."""
        return self.mixup is not None or self.erasing_start > 0 or self.erasing_end > 0

    def erasing_probability(self, progress: float) -> float:
        """The erasing probability at ``progress`` (0 = first step, 1 = last step) of training."""
        progress = min(max(progress, 0.0), 1.0)
        return self.erasing_start + (self.erasing_end - self.erasing_start) * progress

    def __call__(
        self, images: torch.Tensor, targets: torch.Tensor, progress: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Augment a normalised batch in place; with Mixup/CutMix the targets become class probabilities.

        Args:
            images: Normalised images of shape (batch, channels, height, width).
            targets: Class indices of shape (batch,).
            progress: Fraction of training done, for the erasing schedule.

        Returns:
            The augmented images and the targets: class indices, or (batch, num_classes) probabilities if mixed.
        """
        probability = self.erasing_probability(progress)
        if probability > 0:
            images = random_erasing(images, probability)
        if self.mixup is not None:
            images, targets = self.mixup(images, targets)
        return images, targets
