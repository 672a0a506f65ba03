"""Early stopping with what every vitlit recipe that stops early shares, so that a recipe names only its patience."""

from __future__ import annotations

from typing import Any, Literal

from lightning.pytorch.callbacks import EarlyStopping


class EarlyStop(EarlyStopping):
    """Lightning's `EarlyStopping` on ``val/acc`` (higher is better), which also works for a resumed run.

    ``strict`` is false: a run resumed from a checkpoint saved mid-validation (a SIGTERM or Ctrl-C there) has no
    value of the metric to compare until its first validation, and Lightning's default would stop it with an error.
    The run card says ``early stop`` when it stops the run.

    Args:
        monitor: The logged metric to watch, e.g. ``val/acc`` or ``val/loss``.
        mode: ``max`` where higher is better (accuracy), ``min`` where lower is (loss).
        patience: Validations without improvement before the run stops.
        strict: Stop with an error when ``monitor`` is missing at a validation's end.
        **kwargs: Lightning's other options (``min_delta``, ``stopping_threshold``, ``check_finite``, ...).
    """

    def __init__(
        self,
        monitor: str = "val/acc",
        mode: Literal["min", "max"] = "max",
        patience: int = 10,
        strict: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(monitor=monitor, mode=mode, patience=patience, strict=strict, **kwargs)
