"""Loggers that log to a service (an MLflow server, W&B): reached before a run starts, with bounded waits."""

from __future__ import annotations

import os

from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from vitlit.errors import ConfigError

#: Bounds on each request to a tracking server (the services' own settings, unless the user set them): a server that
#: does not answer costs seconds, not MLflow's minutes of retries or W&B's 90 s (124 s measured) to start a run.
SERVICE_TIMEOUTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "15", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
                    "WANDB_INIT_TIMEOUT": "20"}  # fmt: skip


def reach_loggers(trainer: Trainer) -> None:
    """Reach each logger's service (an MLflow server, W&B) before the run's folder exists; refuse one that fails.

    A logger connects at its first use, inside the run: an unreachable server would cost minutes of retries and end
    in chained tracebacks with the run started. Folder loggers (TensorBoard, CSV) are placed by `place_run`.
    """
    for key, value in SERVICE_TIMEOUTS.items():
        os.environ.setdefault(key, value)
    for logger in trainer.loggers if trainer.is_global_zero else []:
        if isinstance(logger, (TensorBoardLogger, CSVLogger)):
            continue
        where = next((str(v) for k in ("_tracking_uri", "tracking_uri") if (v := getattr(logger, k, None))), "")
        try:
            logger.experiment  # noqa: B018 (its connection: the experiment is made or found on the server)
        except Exception as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[-1][:160]
            raise ConfigError(
                f"{type(logger).__name__} cannot reach its service{f' at {where}' if where else ''} ({reason}); "
                f"start it, check --trainer.logger's settings, or log with TensorBoard (the default)."
            ) from None
