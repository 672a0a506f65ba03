"""Attention rollout (vitlit.tools.attention) against a hand computation from each block's own q and k."""

from __future__ import annotations

import pytest
import timm
import torch

from vitlit.errors import ConfigError
from vitlit.tools.attention import attention_rollout


def _by_hand(net: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    inputs = []
    hooks = [blk.attn.register_forward_hook(lambda m, args, out: inputs.append(args[0])) for blk in net.blocks]
    net.eval()
    with torch.no_grad():
        net(images)
    for hook in hooks:
        hook.remove()
    rollout = torch.eye(inputs[0].shape[1]).expand(len(images), -1, -1)
    for blk, x in zip(net.blocks, inputs, strict=True):
        attn = blk.attn
        b, n, c = x.shape
        q, k, _ = attn.qkv(x).reshape(b, n, 3, attn.num_heads, c // attn.num_heads).permute(2, 0, 3, 1, 4)
        weights = ((q * attn.scale) @ k.transpose(-2, -1)).softmax(-1).mean(1) + torch.eye(n)
        rollout = (weights / weights.sum(-1, keepdim=True)) @ rollout
    row = rollout[:, 0, 1:].reshape(len(images), 4, 4)
    low, high = row.amin((1, 2), keepdim=True), row.amax((1, 2), keepdim=True)
    return (row - low) / (high - low)


def test_rollout_equals_the_hand_computation_and_leaves_the_model_as_it_was() -> None:
    torch.manual_seed(0)
    net = timm.create_model("test_vit", img_size=32, patch_size=8, num_classes=10).train()
    images = torch.randn(3, 3, 32, 32)
    maps = attention_rollout(net, images)
    assert maps.shape == (3, 4, 4) and net.training and all(blk.attn.fused_attn for blk in net.blocks)
    torch.testing.assert_close(maps, _by_hand(net, images), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(maps[0], maps[1])  # each image gets its own map


@pytest.mark.parametrize(
    ("name", "options"),
    [("test_vit", {"class_token": False, "global_pool": "avg"}), ("vit_base_patch16_gap_224", {}),
     ("vit_base_patch16_reg4_gap_256", {}), ("vit_base_patch16_siglip_224", {}), ("test_vit", {"global_pool": "avg"})],
)  # fmt: skip
def test_rollout_refuses_a_vit_whose_head_reads_no_class_token(name: str, options: dict) -> None:
    """Token 0's row was returned for a ViT without a class token: a patch (avg pool) or a register, not the class."""
    net = timm.create_model(name, img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, **options)
    with pytest.raises(ConfigError, match=rf"attention rollout follows the class token, and {name} \(global_pool="):
        attention_rollout(net, torch.randn(1, 3, 32, 32))
