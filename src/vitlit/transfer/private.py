"""Every private attribute of PyTorch that the transfer part reads or writes, in one place (see `vitlit.private`).

``tests/test_private.py`` fails, naming the attribute, if a release renames or removes one.
"""

from __future__ import annotations

from collections.abc import Callable

from torch.optim.lr_scheduler import LambdaLR


def follow_new_param_groups(scheduler: LambdaLR, factor: Callable[[int], float]) -> None:
    """Extend a ``LambdaLR`` to the optimizer's groups added since it was built, on the curve ``factor``.

    LambdaLR keeps one base learning rate and one lambda per group (``base_lrs``, ``lr_lambdas``) and the last rates
    it set (``_last_lr``, what ``get_last_lr()`` returns); none has a public way to grow.
    """
    for group in scheduler.optimizer.param_groups[len(scheduler.base_lrs) :]:
        group.setdefault("initial_lr", group["lr"])
        scheduler.base_lrs.append(group["initial_lr"])
        scheduler.lr_lambdas.append(factor)
        group["lr"] = group["initial_lr"] * factor(max(scheduler.last_epoch, 0))
    record_last_lrs(scheduler)


def record_last_lrs(scheduler: LambdaLR) -> None:
    """Make ``get_last_lr()`` return the learning rates the optimizer's groups hold now (after a change by hand)."""
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
