"""Every private attribute of Lightning or PyTorch that vitlit's core reads or writes, in one place.

The runs part keeps its own, used by it alone, in `vitlit.runs.private`. Each has no public equivalent today.
Checked against Lightning 2.5 and 2.6 and PyTorch 2.4 to 2.14; ``tests/test_private.py`` fails, naming the
attribute, if a release renames or removes one, so a version bump shows here first instead of as a silent change in
behaviour.
"""

from __future__ import annotations

import torch


def unscales_internally(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` unscales fp16 gradients inside its own step (fused Adam/AdamW/SGD).

    PyTorch marks such optimizers with ``_step_supports_amp_scaling``; the GradScaler reads the same flag.
    """
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def add_to_skip_flag(optimizer: torch.optim.Optimizer, norm: torch.Tensor) -> None:
    """Make a fused optimizer's step skip also for a gradient ``norm`` that is not finite, where it has a skip flag.

    The flag is GradScaler's ``found_inf``, which `vitlit.runs.nonfinite.NonFiniteGuard` sets for a NaN loss; so the
    one gradient norm of a step serves the clipping, its log and the guard. On the device, no sync.
    """
    flag = vars(optimizer).get("found_inf")
    if flag is not None:
        optimizer.found_inf = torch.maximum(flag, (~torch.isfinite(norm)).float())
