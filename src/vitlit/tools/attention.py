"""Attention rollout: where a ViT's class token looks, through all its blocks, as one map per image.

Abnar & Zuidema, "Quantifying Attention Flow in Transformers" (2020): average each block's attention over its
heads, add the identity for the residual connection and renormalise the rows, then multiply the blocks' matrices
from the first to the last. The class token's row of the product, over the patch tokens, is the map. The
attention matrices come from timm's own extractor (`timm.utils.AttentionExtract`, hooks on each block's
``attn_drop``); fused attention (``scaled_dot_product_attention``) never forms them, so it is switched off for the
extraction and restored afterwards.
"""

from __future__ import annotations

import torch
from timm.utils import AttentionExtract
from torch import nn

from vitlit.errors import ConfigError


@torch.no_grad()
def attention_rollout(net: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Attention-rollout maps of ``images`` for a timm ViT, one per image on the patch grid, scaled to [0, 1].

    Args:
        net: A timm Vision Transformer (``blocks`` with timm's ``Attention``, ``patch_embed.grid_size``).
        images: A normalised batch, shape (batch, channels, height, width), as the network is fed in training.

    Returns:
        Maps of shape (batch, grid_height, grid_width); 1 marks the patch the class token draws most from.

    Raises:
        ConfigError: For a ViT without a class token, or one whose head pools the tokens otherwise (``avg``, ``map``):
            token 0 is then a patch or a register, and its row not what the head reads.
    """
    pool = getattr(net, "global_pool", "token")
    if getattr(net, "cls_token", None) is None or pool != "token":
        name = getattr(net, "pretrained_cfg", {}).get("architecture") or type(net).__name__
        raise ConfigError(
            f"attention rollout follows the class token, and {name} (global_pool={pool!r}) has no class token its head "
            f"reads; use a ViT with a class token and global_pool='token', such as vit_base_patch16_224."
        )
    fused = {m: m.fused_attn for m in net.modules() if hasattr(m, "fused_attn")}
    was_training = net.training
    try:
        for module in fused:
            module.fused_attn = False
        maps = AttentionExtract(net, method="hook")(images)  # eval mode: no dropout on the maps
    finally:
        for module, value in fused.items():
            module.fused_attn = value
        net.train(was_training)
    layers = [maps[name] for name in sorted(maps, key=_block_index)]
    tokens = layers[0].shape[-1]
    identity = torch.eye(tokens, device=images.device)
    rollout = identity.expand(len(images), tokens, tokens)
    for attention in layers:
        mixed = attention.float().mean(dim=1) + identity  # heads averaged; the identity is the residual path
        mixed = mixed / mixed.sum(dim=-1, keepdim=True)
        rollout = mixed @ rollout
    prefix = getattr(net, "num_prefix_tokens", 1)  # class token (and a DeiT's distillation token, registers)
    grid = tuple(net.patch_embed.grid_size)
    cls_row = rollout[:, 0, prefix:].reshape(len(images), *grid)
    low = cls_row.amin(dim=(1, 2), keepdim=True)
    high = cls_row.amax(dim=(1, 2), keepdim=True)
    return (cls_row - low) / (high - low).clamp_min(1e-12)


def _block_index(name: str) -> int:
    """The block number in a module name such as ``blocks.11.attn.attn_drop`` (its order in the network)."""
    return next((int(part) for part in name.split(".") if part.isdigit()), 0)
