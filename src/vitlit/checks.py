"""Checks of what a run was given, before it is built or started: the model's architecture, the Trainer's callbacks.

Beside the main paths of `vitlit.model` and `vitlit.cli` (which build what passes here), so that a bad value is one
line naming it and the fix, before any weights are downloaded or the data is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import timm
import torch
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import BatchSizeFinder
from torch import nn

from vitlit.errors import ConfigError


def check_architecture(hp: Mapping[str, Any], kwargs: dict[str, Any]) -> nn.Module:
    """Refuse options no timm model of ``hp["model_name"]`` takes; return the model built on the meta device.

    Built without memory or a download (``meta``), the probe says whether the model takes ``img_size`` and
    ``patch_size`` and what its patches are; pretrained weights are then loaded into the real model.

    Args:
        hp: The model's hyperparameters (``model_name``, ``class_names``, ``num_classes``, ``img_size``).
        kwargs: ``timm.create_model``'s keyword arguments for the architecture (`vitlit.ViTClassifier.net_kwargs`).

    Raises:
        ConfigError: For an unknown model, class names of another count, a model that takes no image size, or an
            image size that is not a whole number of patches.
    """
    name = hp["model_name"]
    if not timm.is_model(name):
        raise ConfigError(f"model_name={name!r} is not a timm model; pick one of timm.list_models('*vit*'), e.g. "
                          f"vit_tiny_patch16_224.")  # fmt: skip
    if hp["class_names"] is not None and len(hp["class_names"]) != hp["num_classes"]:
        raise ConfigError(f"class_names has {len(hp['class_names'])} names for num_classes={hp['num_classes']}.")
    try:
        with torch.device("meta"):
            probe = timm.create_model(name, pretrained=False, **kwargs)
    except TypeError as err:
        raise ConfigError(f"model_name={name!r} does not take img_size/patch_size ({err}); ViTClassifier needs a "
                          f"Vision Transformer such as vit_tiny_patch16_224.") from None  # fmt: skip
    patch = getattr(getattr(probe, "patch_embed", None), "patch_size", None)
    patch = patch[0] if isinstance(patch, tuple) else patch
    if patch and hp["img_size"] % patch:
        raise ConfigError(f"img_size={hp['img_size']} is not divisible by the patch size {patch} of {name}; change "
                          f"--data.img_size or --model.patch_size.")  # fmt: skip
    return probe


def check_callbacks(callbacks: Sequence[Callback]) -> None:
    """Refuse Lightning's BatchSizeFinder, and two stateful callbacks that share a state key.

    BatchSizeFinder changes the batch but not what depends on it; a checkpoint keeps one state per key, so the second
    of two callbacks with one key would restore the first one's state.
    """
    if any(type(cb) is BatchSizeFinder for cb in callbacks):
        raise ConfigError(
            "BatchSizeFinder changes the batch but not the learning rate, the schedule's length or the "
            "saved config; use --trainer.callbacks+=vitlit.runs.batch_size.BatchSizeSearch."
        )
    keys = [cb.state_key for cb in callbacks if type(cb).state_dict is not Callback.state_dict]
    twice = next((cb for cb in callbacks if keys.count(cb.state_key) > 1), None)
    if twice is not None:
        raise ConfigError(f"two {type(twice).__name__} callbacks have the same settings ({twice.state_key}), and a "
                          f"checkpoint keeps one state per setting: change the one src/vitlit/defaults.yaml already "
                          f"has (--trainer.callbacks in --print_config) or give yours another monitor, mode or "
                          f"every_n_epochs.")  # fmt: skip
