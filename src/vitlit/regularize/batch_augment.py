"""Augmentations that act on whole training batches on the training device: random erasing and Mixup/CutMix.

Mixup/CutMix is timm's (``timm.data.Mixup`` mixes pairs of images and their one-hot targets). Random erasing draws
timm's distribution (``timm.data.RandomErasing`` with ``mode="pixel"``: area 2-33% of the image, aspect ratio
0.3-3.3 log-uniform, up to 10 attempts to fit, per-pixel normal noise) but for the whole batch at once: timm's
version loops over the images in Python with one host-side draw and one kernel per erased image, which on a GPU
costs more than the erasing itself. Both run after the rest of the pipeline (`vitlit.data.pipeline`), on the
normalised batch, and the erasing probability may follow the progress of training.
"""

from __future__ import annotations

import math

import torch
from timm.data import Mixup

from vitlit.config import NonNegativeFloat, Probability

# timm's RandomErasing defaults, which DeiT's recipe uses.
_MIN_AREA, _MAX_AREA = 0.02, 1 / 3
_LOG_ASPECT = (math.log(0.3), math.log(1 / 0.3))
_ATTEMPTS = 10


def random_erasing(images: torch.Tensor, probability: float) -> torch.Tensor:
    """Replace one random rectangle of each image, with ``probability``, by normal noise; one pass over the batch.

    Per image, as ``timm.data.RandomErasing(probability, mode="pixel")``: up to 10 attempts draw an area fraction
    uniform in [0.02, 1/3] and a log-uniform aspect ratio in [0.3, 3.33] until the rectangle fits; its position is
    uniform; an image where no attempt fits stays as it is. No host synchronisation. The noise is drawn for the
    whole batch, which suits a GPU; on a CPU timm's per-image loop is cheaper, but there the model's step dominates
    anyway.

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


def random_turns(images: torch.Tensor) -> torch.Tensor:
    """Turn each image of a square (B, C, S, S) batch by 0, 90, 180 or 270 degrees and mirror half top to bottom.

    Four gathers of the batch, not one call per image: the images sharing a turn are turned together.
    """
    turn = torch.randint(0, 4, (len(images),), device=images.device)
    mirror = torch.rand(len(images), device=images.device) < 0.5
    out = torch.where(mirror[:, None, None, None], images.flip(2), images)
    for k in (1, 2, 3):
        out = torch.where((turn == k)[:, None, None, None], out.rot90(k, dims=(2, 3)), out)
    return out


class BatchAugment:
    """Random erasing (with a linear probability schedule), then Mixup/CutMix, on each training batch on the device.

    Given to a data module as ``--data.batch_augment`` (a ``class_path`` with these ``init_args`` in YAML, like the
    model's optimizer); ``--data.batch_augment null`` switches all of it off. The class count comes from the data
    module at call time, so it is never typed here.

    Args:
        random_erasing: Probability of erasing a random rectangle of each image, on the normalised batch (0.25 in
            DeiT's recipe); 0 disables it.
        random_erasing_end: Erasing probability at the end of training, reached linearly from ``random_erasing``
            (e.g. 0.4 -> 0.2); ``None`` keeps it constant.
        mixup_alpha: Mixup's Beta(alpha, alpha) parameter (0.8 in DeiT's recipe); 0 disables Mixup. Targets become
            class probabilities; the model's label smoothing still applies once.
        cutmix_alpha: CutMix's Beta(alpha, alpha) parameter (1.0 in DeiT's recipe); 0 disables CutMix.
        mixup_prob: Probability that a batch is mixed at all (Mixup or CutMix).
        mixup_switch_prob: With both enabled, probability that a mixed batch uses CutMix rather than Mixup.
        turns: Turn each image by a random multiple of 90 degrees and mirror half of them top to bottom: with
            ``--data.hflip`` the eight symmetries of a square, for images without an up (drawn shapes, aerial and
            microscope images). Square images only (``img_size``).
    """

    def __init__(
        self,
        random_erasing: Probability = 0.0,
        random_erasing_end: Probability | None = None,
        mixup_alpha: NonNegativeFloat = 0.0,
        cutmix_alpha: NonNegativeFloat = 0.0,
        mixup_prob: Probability = 1.0,
        mixup_switch_prob: Probability = 0.5,
        turns: bool = False,
    ) -> None:
        self.random_erasing = float(random_erasing)
        self.random_erasing_end = self.random_erasing if random_erasing_end is None else float(random_erasing_end)
        self.mixup_alpha = float(mixup_alpha)
        self.cutmix_alpha = float(cutmix_alpha)
        self.mixup_prob = float(mixup_prob)
        self.mixup_switch_prob = float(mixup_switch_prob)
        self.turns = turns
        self._mixup: dict[int, Mixup] = {}  # by class count; built on first use

    @property
    def mixes(self) -> bool:
        """Whether batches are mixed (Mixup or CutMix), which pairs images and so needs an even batch size."""
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0

    def erasing_probability(self, progress: float) -> float:
        """The erasing probability at ``progress`` (0 = first step, 1 = last step) of training."""
        progress = min(max(progress, 0.0), 1.0)
        return self.random_erasing + (self.random_erasing_end - self.random_erasing) * progress

    def mixup(self, num_classes: int) -> Mixup:
        """Timm's Mixup/CutMix for ``num_classes`` classes, with this object's settings."""
        if num_classes not in self._mixup:
            # label_smoothing=0: the model's loss smooths once, for hard and mixed targets alike.
            self._mixup[num_classes] = Mixup(
                mixup_alpha=self.mixup_alpha,
                cutmix_alpha=self.cutmix_alpha,
                prob=self.mixup_prob,
                switch_prob=self.mixup_switch_prob,
                mode="batch",
                label_smoothing=0.0,
                num_classes=num_classes,
            )
        return self._mixup[num_classes]

    def __call__(
        self, images: torch.Tensor, targets: torch.Tensor, progress: float, num_classes: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Augment a normalised batch; with Mixup/CutMix the targets become class probabilities.

        Args:
            images: Normalised images of shape (batch, channels, height, width). Erasing returns a new batch, but
                timm's Mixup/CutMix mix the batch they are given in place: pass a batch the caller does not reuse.
            targets: Class indices of shape (batch,).
            progress: Fraction of training done, for the erasing schedule.
            num_classes: Number of classes, for the one-hot targets of Mixup/CutMix.

        Returns:
            The augmented images and the targets: class indices, or (batch, num_classes) probabilities if mixed.
        """
        if self.turns:
            images = random_turns(images)
        probability = self.erasing_probability(progress)
        if probability > 0:
            images = random_erasing(images, probability)
        if self.mixes:
            images, targets = self.mixup(num_classes)(images, targets)
        return images, targets
