"""``vitlit models [PATTERN]``: timm's Vision Transformers with their size and cost at your image and patch size.

    python -m vitlit models                                   # every one, at 224 px
    python -m vitlit models 'vit_*small*' --img_size 32 --patch_size 4 --num_classes 10

Any name listed is a value of ``--model.model_name``. Parameters and forward GFLOPs per image are counted for the
model as vitlit would build it (``img_size``, ``patch_size``, ``in_chans``, ``num_classes``), on PyTorch's meta
device: no memory, no download. ``weights`` counts the pretrained weight sets timm knows for the model
(``--model.pretrained true`` takes its default one); the files are fetched only when a run asks for them.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import timm
import torch
from lightning.fabric.utilities.throughput import measure_flops

from vitlit.config import PositiveInt
from vitlit.errors import ConfigError

#: The timm modules whose models vitlit's `ViTClassifier` builds (they take ``img_size`` and ``patch_size``).
MODULES = ("vision_transformer", "deit")


def describe(name: str, img_size: int, patch_size: int | None, in_chans: int, num_classes: int) -> dict[str, Any]:
    """Parameters, tokens (patches and prefix tokens: what attention sees) and forward FLOPs of one image."""
    kwargs: dict[str, Any] = {"img_size": img_size, "in_chans": in_chans, "num_classes": num_classes}
    if patch_size is not None:
        kwargs["patch_size"] = patch_size
    with torch.device("meta"):
        net = timm.create_model(name, pretrained=False, **kwargs)
        images = torch.empty(1, in_chans, img_size, img_size)
    grid = net.patch_embed.grid_size if hasattr(net, "patch_embed") else (0, 0)
    return {
        "params": sum(p.numel() for p in net.parameters()),
        "tokens": int(grid[0] * grid[1]) + int(getattr(net, "num_prefix_tokens", 0)),  # patches and class token
        "flops": measure_flops(net, lambda: net(images)),
    }


def models(
    pattern: str = "*",
    img_size: PositiveInt = 224,
    patch_size: PositiveInt | None = None,
    in_chans: PositiveInt = 3,
    num_classes: PositiveInt = 1000,
) -> list[dict[str, Any]]:
    """List timm's Vision Transformers with parameters, forward GFLOPs per image and their pretrained weights.

    Args:
        pattern: Model names to list, a shell-style pattern (``'vit_*small*'``, ``'deit*'``); default: all.
        img_size: Side of the input images in pixels (``--data.img_size``).
        patch_size: Side of a patch (``--model.patch_size``); default: each model's own.
        in_chans: Image channels (``--data.in_chans``).
        num_classes: Classes of the head (10 for CIFAR-10).

    Returns:
        One entry per model: ``name``, ``params``, ``tokens``, ``gflops``, ``weights`` (or ``error``).
    """
    names = timm.list_models(pattern, module=list(MODULES))
    if not names:
        raise ConfigError(f"no timm Vision Transformer matches {pattern!r}; try 'vit_*' or leave the pattern out.")
    tagged = [n for n in timm.list_models(module=list(MODULES), pretrained=True) if fnmatch.fnmatch(n, f"{pattern}.*")]
    weights = {name: sum(t.split(".")[0] == name for t in tagged) for name in names}
    patch = f", patch {patch_size}" if patch_size else ""
    print(f"{len(names)} models at {img_size} px{patch}, {in_chans} channels, {num_classes} classes (forward GFLOPs):")
    print(f"{'model':<44} {'params':>9} {'tokens':>7} {'GFLOPs':>9} {'weights':>8}")
    listed = []
    for name in names:
        entry: dict[str, Any] = {"name": name, "weights": weights[name]}
        try:
            size = describe(name, img_size, patch_size, in_chans, num_classes)
        except Exception as err:  # a size this model cannot take (an image not divisible into its patches, ...)
            entry["error"] = (str(err).strip().splitlines() or [type(err).__name__])[0][:80]
            print(f"{name:<44} {'-':>9} {'-':>7} {'-':>9} {weights[name]:>8}  ({entry['error']})")
        else:
            entry |= {"params": size["params"], "tokens": size["tokens"], "gflops": size["flops"] / 1e9}
            print(f"{name:<44} {size['params'] / 1e6:>8.1f}M {size['tokens']:>7} {entry['gflops']:>9.2f} "
                  f"{weights[name]:>8}")  # fmt: skip
        listed.append(entry)
    return listed
