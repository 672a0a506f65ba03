"""Normalisation statistics of pretrained weights, so that they never have to be copied into a config by hand.

A pretrained ViT expects its inputs normalised as in its own training (timm's pretrained config: 0.5/0.5 for the
AugReg ViTs, ImageNet's statistics for DeiT). The data module cannot know the model, so the CLI, where the two meet,
fills ``data.mean``/``data.std`` from the model's pretrained config when the weights are pretrained and the user
gave none. The values then stand in the run's saved ``config.yaml``, so evaluation and resume use the same ones.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import timm
import torch
from lightning.pytorch.utilities import rank_zero_info
from timm.models import get_pretrained_cfg
from torch import nn

from vitlit.data.augment import channel_statistics


def pretrained_statistics(model_name: str, in_chans: int = 3) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """``(mean, std)`` the weights of timm's ``model_name`` were trained with, fitted to ``in_chans`` channels.

    Args:
        model_name: A timm model name, with or without a pretrained tag (``vit_base_patch16_224.augreg_in21k``).
        in_chans: Channels of the images; grey images get the average of the colour channels' statistics.

    Returns:
        The statistics, or ``None`` where timm has no pretrained config for the name.

    Raises:
        ConfigError: If the statistics cannot be fitted to ``in_chans`` (then they must be given explicitly).
    """
    cfg = get_pretrained_cfg(model_name)
    if cfg is None or cfg.mean is None or cfg.std is None:
        return None
    return channel_statistics(cfg.mean, in_chans, "mean"), channel_statistics(cfg.std, in_chans, "std")


def fill_pretrained_normalization(model: MutableMapping[str, Any], data: MutableMapping[str, Any]) -> None:
    """Set ``data``'s missing ``mean``/``std`` from the pretrained config of ``model``'s weights, in place.

    Args:
        model: The parsed ``model`` options (``model_name``, ``pretrained``, ``pretrained_file``).
        data: The parsed data module options (``init_args``): ``mean``, ``std``, ``in_chans``.
    """
    if not (model.get("pretrained") or model.get("pretrained_file")):
        return
    if data.get("mean") is not None and data.get("std") is not None:
        return
    stats = pretrained_statistics(model["model_name"], data.get("in_chans") or 3)
    if stats is None:
        return
    for key, values in zip(("mean", "std"), stats, strict=True):
        if data.get(key) is None:
            data[key] = list(values)


def say_adapted(model_name: str, net: nn.Module, source: str) -> None:
    """Say in one line which pretrained tensors timm adapted to this run's geometry (and which it left new)."""
    with torch.device("meta"):  # the weights' own geometry: the model with its pretrained defaults
        original = timm.create_model(model_name, pretrained=False).state_dict()
    changed = [(k, tuple(original[k].shape), tuple(v.shape)) for k, v in net.state_dict().items()
               if k in original and original[k].shape != v.shape]  # fmt: skip
    said = [f"{k} {a} -> {b} ({'new' if k.startswith('head') else 'resampled'})" for k, a, b in changed]
    rank_zero_info(f"vitlit: loaded {source} into {model_name}; adapted: {', '.join(said) or 'nothing'}")
