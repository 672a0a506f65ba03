"""One optimizer step's protocol, in the order a step runs it: the NaN flag, clipping, the skip, the flag cleared.

Lightning runs a training step as: ``training_step`` (the loss), ``on_before_backward``, backward,
``on_before_optimizer_step``, ``configure_gradient_clipping``, the optimizer's step, ``on_train_batch_end``. vitlit adds
three things to it, all on the device (no host sync):

1. `vitlit.runs.nonfinite.NonFiniteGuard` flags a step whose loss is not finite and, for a fused optimizer, hands
   the flag to the optimizer (`skip_step_if`): it is PyTorch's GradScaler's own mechanism, a ``found_inf`` tensor
   the fused kernel reads, with ``grad_scale`` ``None`` (the gradients are not scaled).
2. `vitlit.model.ViTClassifier.configure_gradient_clipping` clips the true gradients (`clip_true_gradients`), also
   where Lightning refuses to (a fused optimizer under mixed precision), and adds the finiteness of the one gradient
   norm it computes to the flag: the norm serves the clipping, its log and the guard.
3. After the step the guard reads the flag the step used (`skip_flag`), counts it, and removes it
   (`clear_skip_flags`), so the next step is an ordinary one.

The attributes the GradScaler and fused optimizers share are PyTorch's private protocol; they are read and written
here alone, beside the protocol that needs them (``tests/test_private.py`` fails, naming one, if a release renames
it).
"""

from __future__ import annotations

import torch
from lightning.pytorch.plugins.precision import Precision
from torch.optim import Optimizer

#: The attributes through which PyTorch's GradScaler tells a fused optimizer's step to skip itself (a non-zero
#: ``found_inf``) and that the gradients are not scaled (``grad_scale`` None).
_SKIP_FLAGS = ("found_inf", "grad_scale")


def unscales_internally(optimizer: Optimizer) -> bool:
    """Whether ``optimizer`` unscales fp16 gradients inside its own step (fused Adam/AdamW/SGD).

    PyTorch marks such optimizers with ``_step_supports_amp_scaling``; the GradScaler reads the same flag.
    """
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def skip_step_if(optimizer: Optimizer, found_inf: torch.Tensor) -> None:
    """Step 1: make a fused optimizer's next step a no-op where ``found_inf`` is non-zero, on the device."""
    optimizer.found_inf = found_inf.float()
    optimizer.grad_scale = None


def clip_true_gradients(
    optimizer: Optimizer, precision: Precision, clip_val: float | None, algorithm: str | None = "norm"
) -> torch.Tensor | None:
    """Step 2: clip the gradients of ``optimizer``'s parameters as they are without loss scaling; return their norm.

    Lightning's mixed-precision plugin leaves unscaling to an optimizer that "handles it internally" (fused AdamW) and
    therefore refuses to clip for it: ``gradient_clip_val`` + ``fused: true`` + ``16-mixed`` would die at the first
    step. Yet PyTorch's GradScaler supports this order: ``scaler.unscale_(optimizer)`` before the step records that
    the gradients are unscaled, and ``scaler.step`` then passes ``grad_scale=None`` to the fused kernel together with
    the ``found_inf`` flag it computed, so a step with inf/NaN gradients is still skipped on the device. Under
    ``bf16-mixed`` there is no scaler and nothing to unscale. Neither reads a value back to the host.

    Args:
        optimizer: The optimizer about to step; its parameter groups name the gradients to clip.
        precision: The Trainer's precision plugin; its ``scaler``, if any, is the fp16 GradScaler.
        clip_val: ``gradient_clip_val``: the largest global L2 norm (``norm``) or absolute value (``value``) a
            gradient may have; ``None`` or 0 disables clipping.
        algorithm: ``norm`` (Lightning's default) or ``value``.

    Returns:
        The global L2 norm of the true gradients before clipping, a tensor on their device (not read back), or
        ``None`` when no parameter has a gradient.
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
    flag = vars(optimizer).get("found_inf")
    if flag is not None:  # a guard asked for the skip (step 1): a norm that is not finite skips the step too
        optimizer.found_inf = torch.maximum(flag, (~torch.isfinite(norm)).float())
    if clip_val and algorithm != "value":  # Lightning passes a GradClipAlgorithmType, a str enum equal to its value
        torch.nn.utils.clip_grads_with_norm_(params, clip_val, norm)
    elif clip_val:
        torch.nn.utils.clip_grad_value_(params, clip_val)
    return norm


def skip_flag(optimizer: Optimizer) -> torch.Tensor | None:
    """Step 3: the ``found_inf`` flag the optimizer's last step was given (steps 1 and 2), or None."""
    return vars(optimizer).get("found_inf")


def clear_skip_flags(optimizer: Optimizer) -> None:
    """Step 3: remove what `skip_step_if` set, so that the next step is an ordinary one."""
    for name in _SKIP_FLAGS:
        if name in vars(optimizer):
            delattr(optimizer, name)
