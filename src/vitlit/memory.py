"""Memory a run will need, estimated before anything is allocated, against what the device has free.

A run that cannot fit should stop in one line at its start, not grow until the OOM killer ends it (or CUDA's
out-of-memory error ends it mid-epoch). The estimates here are lower bounds: what a run refused here could never
have fitted.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

#: Activations a transformer block keeps per token and channel for its backward pass, at least: the inputs and
#: outputs of its two norms, q/k/v, the attention's output, its projection, and the MLP's two 4x-wide tensors.
SAVED_PER_TOKEN_CHANNEL = 12


def free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device``: CUDA's own count, or the host's available memory (Linux); ``None`` where unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu" or not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def activation_bytes(net: Any, batch_size: int, training: bool, precision: str, checkpointing: bool) -> int | None:
    """A lower bound on the activation memory of one batch of a timm ViT; ``None`` for a model of another shape.

    Training keeps every block's activations for the backward pass (with gradient checkpointing, only each block's
    input, plus one block's while it is recomputed); evaluation holds one block's at a time. Where a block's attention
    is not fused (timm's ``fused_attn`` off), its heads x tokens x tokens matrix is held too: at 4096 px and more
    it is most of the memory.
    """
    try:
        tokens = int(net.patch_embed.num_patches) + int(net.num_prefix_tokens)
        width, depth = int(net.embed_dim), len(net.blocks)
        attention = getattr(net.blocks[0].attn, "num_heads", 0) * tokens**2  # unfused: the matrix, after softmax
        attention *= not getattr(net.blocks[0].attn, "fused_attn", True)
    except (AttributeError, TypeError, IndexError):
        return None
    scalar = 4 if "32" in precision or "64" in precision else 2  # fp32, or fp16/bf16 under autocast
    block = (SAVED_PER_TOKEN_CHANNEL * tokens * width + attention) * scalar
    if not training:
        return batch_size * block
    kept = depth * tokens * width * scalar + block if checkpointing else depth * block
    return batch_size * kept


def check_activations(model: Any, data: Any, trainer: Any, subcommand: str) -> None:
    """Refuse a run whose activations alone cannot fit in the device's free memory, naming the flags that fix it."""
    net, batch_size = getattr(model, "net", None), getattr(data, "batch_size", None)
    if net is None or not isinstance(batch_size, int):
        return
    checkpointing = bool(getattr(model, "hparams", {}).get("grad_checkpointing"))
    need = activation_bytes(net, batch_size, subcommand == "fit", str(trainer.precision), checkpointing)
    device = trainer.strategy.root_device
    free = free_memory(device)
    if need is None or free is None or need <= free:
        return
    from vitlit.messages import too_little_memory  # a refusal only

    raise too_little_memory(subcommand, data, batch_size, need, free, device, checkpointing)
