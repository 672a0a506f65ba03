"""A callback that plays another machine of a shared sweep: a trial of its own ends while this one trains."""

from __future__ import annotations

import optuna
from lightning.pytorch import Callback, LightningModule, Trainer


class AnotherMachine(Callback):
    """Add one finished trial to the study ``study_name`` in ``storage`` when this fit ends, as a second sweep would.

    Args:
        storage: The study's storage URL.
        study_name: The study's name.
    """

    def __init__(self, storage: str, study_name: str = "vitlit") -> None:
        self.storage, self.study_name = storage, study_name

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        study = optuna.load_study(study_name=self.study_name, storage=self.storage)
        distributions = {"model.drop_path_rate": optuna.distributions.FloatDistribution(0.0, 0.2)}
        study.add_trial(optuna.trial.create_trial(params={"model.drop_path_rate": 0.1}, distributions=distributions,
                                                  value=0.5))  # fmt: skip
