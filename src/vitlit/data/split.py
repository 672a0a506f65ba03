"""The seeded validation split carved from the training images, and class-balanced drawing of training images."""

from __future__ import annotations

import torch

from vitlit.errors import ConfigError


def validation_count(n: int, val_size: int | float, flag: str = "val_size") -> int:
    """Return how many of ``n`` training images ``val_size`` asks for, or raise if the split would leave none.

    Args:
        n: Number of training images available.
        val_size: Number of images carved out (int) or their fraction of ``n`` (float in (0, 1)).
        flag: The data module's option that asked (``val_size``, or ``test_size`` for a carved test split).

    Raises:
        ConfigError: If the split would leave no training or no carved images.
    """
    n_val = round(n * val_size) if isinstance(val_size, float) else val_size
    if not 1 <= n_val < n:  # with fewer than 2 images, no choice helps: "between 1 and 0" is no advice
        fix = f"choose --data.{flag} between 1 and {n - 1} (or a fraction such as 0.1)" if n > 1 else "give more images"
        raise ConfigError(f"{flag}={val_size} asks for {n_val} of the {n} training images for "
                          f"{'validation' if flag == 'val_size' else 'test'}; {fix}.")  # fmt: skip
    return n_val


def split_indices(n: int, val_size: int | float, seed: int, flag: str = "val_size") -> tuple[list[int], list[int]]:
    """Carve a seeded subset (validation, or a test split) out of ``n`` training images.

    Args:
        n: Number of training images available.
        val_size: Number of images carved out (int) or their fraction of ``n`` (float in (0, 1)).
        seed: Seed of the permutation; the same seed gives the same split on every machine.
        flag: The option that asked, named by the refusal (`validation_count`).

    Returns:
        ``(kept_indices, carved_indices)``, disjoint and together covering ``range(n)``.
    """
    n_val = validation_count(n, val_size, flag)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return order[n_val:], order[:n_val]
