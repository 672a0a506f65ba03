"""Lightning's Trainer with vitlit's help texts for the four subcommands.

LightningCLI builds ``fit``/``validate``/``test``/``predict`` and their ``--ckpt_path`` help from the Trainer
methods' docstrings, whose wording (Lightning's keywords ``best``/``hpc``/``registry``, a cut-off first line)
does not describe what vitlit's CLI does. The methods below only carry vitlit's docstrings; ``functools.wraps``
keeps Lightning's signatures, so the subcommands take exactly Lightning's arguments.
"""

from __future__ import annotations

import functools
from typing import Any

import lightning as L

_CKPT_PATH = """ckpt_path: Checkpoint to start from: a ``.ckpt`` file, ``last`` (the newest ``last.ckpt`` of any run
                under ``--trainer.default_root_dir``){auto}. It is read with ``weights_only`` safety and must fit
                the configured model and data (architecture and class names); pass the run's own config
                (``--config <run>/config.yaml``).
            weights_only: ``false`` loads checkpoints that hold Python objects besides tensors; only for files
                whose origin you trust."""


_EVALUATE_ARGS = f"""Args:
            model: The LightningModule (``--model``).
            dataloaders: Not used by the CLI; the data module supplies the loaders.
            {_CKPT_PATH.format(auto="")}
            verbose: Print the metrics.
            datamodule: The data module (``--data``)."""


def _documented(method: Any, doc: str) -> Any:
    @functools.wraps(method)
    def wrapper(self: L.Trainer, *args: Any, **kwargs: Any) -> Any:
        return method(self, *args, **kwargs)

    wrapper.__doc__ = doc
    return wrapper


class Trainer(L.Trainer):
    """Lightning's Trainer, with help texts for the subcommands that describe what vitlit's CLI does.

    Args:
        **kwargs: Lightning's Trainer arguments (``--trainer.help`` lists them).
    """

    fit = _documented(
        L.Trainer.fit,
        f"""Train the model, with checkpoints, early stopping and TensorBoard logs in <root>/lightning_logs/version_N.

        Data options: ``--data.help CIFARDataModule`` or ``--data.help ImageFolderDataModule``; model options:
        ``--model.help ViTClassifier``.

        Args:
            model: The LightningModule (``--model``).
            train_dataloaders: Not used by the CLI; the data module supplies the loaders.
            val_dataloaders: Not used by the CLI.
            datamodule: The data module (``--data``).
            {_CKPT_PATH.format(auto=", or ``auto`` (resume from ``last`` if there is one, else start fresh)")}
        """,
    )
    validate = _documented(
        L.Trainer.validate,
        f"""Evaluate a checkpoint on the validation split; writes into <run>/validate/version_K.

        {_EVALUATE_ARGS}
        """,
    )
    test = _documented(
        L.Trainer.test,
        f"""Evaluate a checkpoint on the test split (never used for model selection); writes into <run>/test/version_K.

        {_EVALUATE_ARGS}
        """,
    )
    predict = _documented(
        L.Trainer.predict,
        f"""Classify the test split with a checkpoint; writes <run>/predict/version_K/predictions.csv.

        Args:
            model: The LightningModule (``--model``).
            dataloaders: Not used by the CLI; the data module supplies the loaders.
            datamodule: The data module (``--data``).
            return_predictions: Keep the predictions in memory as well.
            {_CKPT_PATH.format(auto="")}
        """,
    )
