"""Attention rollout (vitlit.tools.attention) against a hand computation from each block's own q and k."""

from __future__ import annotations

import timm
import torch

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
