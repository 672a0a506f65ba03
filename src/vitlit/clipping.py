"""Gradient clipping on the true gradients under every precision, fused optimizers included.

Lightning's mixed-precision plugin leaves unscaling to an optimizer that "handles it internally" (fused AdamW sets
``_step_supports_amp_scaling``) and therefore refuses to clip for it: ``gradient_clip_val`` + ``fused: true`` +
``16-mixed`` or ``bf16-mixed`` dies at the first step. Yet PyTorch's GradScaler supports exactly this order:
``scaler.unscale_(optimizer)`` before the step records that the gradients are unscaled, and ``scaler.step`` then
passes ``grad_scale=None`` to the fused kernel (no second unscaling) together with the ``found_inf`` flag it computed,
so a step with inf/NaN gradients is still skipped on the device. Under ``bf16-mixed`` there is no scaler and nothing
to unscale at all. So vitlit unscales (where a scaler is active and the optimizer would do it itself) and clips with
``torch.nn.utils``; neither reads a value back to the host, so a training step still queues without a sync.
"""

from __future__ import annotations

import torch
from lightning.pytorch.plugins.precision import Precision
from torch.optim import Optimizer

from vitlit.private import add_to_skip_flag, unscales_internally


def clip_true_gradients(
    optimizer: Optimizer, precision: Precision, clip_val: float | None, algorithm: str | None = "norm"
) -> torch.Tensor | None:
    """Clip the gradients of ``optimizer``'s parameters as they are without loss scaling; return their norm.

    Call it from `LightningModule.configure_gradient_clipping` (`vitlit.ViTClassifier` does), which Lightning runs
    after ``on_before_optimizer_step`` and before the optimizer step, with or without clipping.

    Args:
        optimizer: The optimizer about to step; its parameter groups name the gradients to clip.
        precision: The Trainer's precision plugin (``trainer.precision_plugin``); its ``scaler``, if any, is the
            fp16 GradScaler.
        clip_val: ``gradient_clip_val``: the largest global L2 norm (``norm``) or absolute value (``value``) a
            gradient may have; ``None`` or 0 disables clipping.
        algorithm: ``norm`` (Lightning's default) or ``value``.

    Returns:
        The global L2 norm of the true gradients before clipping, as a tensor on their device (not read back, so no
        sync), or ``None`` when no parameter has a gradient.
    """
    scaler = getattr(precision, "scaler", None)
    if scaler is not None and unscales_internally(optimizer):
        # Lightning skipped unscale_ for this optimizer; the GradScaler remembers it was done and does not repeat it.
        # Done also without clipping, so that the norm below is the true gradients' and not the scaled ones'.
        scaler.unscale_(optimizer)
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if not params:
        return None
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    add_to_skip_flag(optimizer, norm)  # a step whose gradients are not finite is skipped where a guard asks for it
    if clip_val and algorithm != "value":  # Lightning passes a GradClipAlgorithmType, a str enum equal to its value
        torch.nn.utils.clip_grads_with_norm_(params, clip_val, norm)
    elif clip_val:
        torch.nn.utils.clip_grad_value_(params, clip_val)
    return norm
