"""``--data.class_balanced``: training images drawn inversely to their class's frequency (class-imbalanced data)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch
from torch.utils.data import WeightedRandomSampler


def class_balance_weights(targets: Sequence[int]) -> torch.Tensor:
    """Weight 1 / (its class's count) per image, so every class is drawn equally often on average."""
    counts = Counter(targets)
    return torch.tensor([1.0 / counts[t] for t in targets], dtype=torch.double)


def class_balanced_sampler(targets: Sequence[int]) -> WeightedRandomSampler:
    """Draw as many images as the split holds, with replacement, by `class_balance_weights`."""
    return WeightedRandomSampler(class_balance_weights(targets), num_samples=len(targets), replacement=True)
