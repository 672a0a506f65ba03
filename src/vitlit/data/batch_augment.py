"""Augmentations that act on whole training batches on the training device: random erasing and Mixup/CutMix.

Both come from timm (``timm.data.RandomErasing`` erases per sample on a normalised batch; ``timm.data.Mixup`` mixes
pairs of images and their one-hot targets). Running them after the batch reaches the GPU keeps the per-image
worker pipeline cheap, and lets the erasing probability follow the progress of training.
"""

from __future__ import annotations

import torch
from timm.data import Mixup
from timm.data.random_erasing import RandomErasing


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
        self._erasing: RandomErasing | None = None
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
            if self._erasing is None or self._erasing.device != images.device:
                # mode="pixel": erase with per-pixel normal noise, which matches normalised images (timm's default).
                self._erasing = RandomErasing(probability, mode="pixel", device=images.device)
            self._erasing.probability = probability
            images = self._erasing(images)
        if self.mixup is not None:
            images, targets = self.mixup(images, targets)
        return images, targets
