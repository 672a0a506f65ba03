"""Lightning's Trainer with vitlit's help texts for the four subcommands.

LightningCLI builds ``fit``/``validate``/``test``/``predict`` and their ``--ckpt_path`` help from the Trainer
methods' docstrings, whose wording (Lightning's keywords ``best``/``hpc``/``registry``, a cut-off first line)
does not describe what vitlit's CLI does. The methods below only carry vitlit's docstrings; `_signature_of` gives
them Lightning's signatures, so the subcommands take exactly Lightning's arguments. The checkpoint arguments, which
all four share, are written once (`_CHECKPOINT_ARGS`) and appended to each docstring's ``Args:``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L

_CHECKPOINT_ARGS = """
            ckpt_path: Checkpoint to {verb}: a ``.ckpt`` file, {either}``last`` (the newest ``last.ckpt`` of any run
                under ``--trainer.default_root_dir``){auto}. It is read with ``weights_only`` safety and must fit
                the configured model and data (architecture and class names); pass the run's own config
                (``--config <run>/config.yaml``).
            weights_only: ``false`` loads checkpoints that hold Python objects besides tensors; only for files
                whose origin you trust.
"""

_AUTO = ", or ``auto`` (resume from ``last`` if there is one, else start fresh)"


def _signature_of(method: Callable[..., Any], verb: str, auto: str = "") -> Callable[[Callable[..., Any]], Any]:
    """Give the decorated method ``method``'s signature and append the checkpoint arguments to its ``Args:``.

    ``inspect.signature`` (and so LightningCLI) follows ``__wrapped__``; ``Args:`` must be the docstring's last
    section.
    """

    def decorate(wrapper: Callable[..., Any]) -> Callable[..., Any]:
        wrapper.__wrapped__ = method  # type: ignore[attr-defined]
        either = "" if auto else "or "  # "a file, last, or auto" / "a file, or last"
        if wrapper.__doc__:  # None under python -OO, which strips docstrings
            wrapper.__doc__ = wrapper.__doc__.rstrip() + _CHECKPOINT_ARGS.format(verb=verb, auto=auto, either=either)
        return wrapper

    return decorate


class Trainer(L.Trainer):
    """Lightning's Trainer, with help texts for the subcommands that describe what vitlit's CLI does.

    Args:
        **kwargs: Lightning's Trainer arguments (``--trainer.help`` lists them).
    """

    @_signature_of(L.Trainer.fit, "start from", _AUTO)
    def fit(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D417 (the arguments documented are Lightning's)
        """Train the model, with checkpoints, early stopping and TensorBoard logs in <root>/lightning_logs/version_N.

        Data options: ``--data.help CIFARDataModule`` or ``--data.help ImageFolderDataModule``; model options:
        ``--model.help ViTClassifier``.

        Args:
            model: The LightningModule (``--model``).
            train_dataloaders: Not used by the CLI; the data module supplies the loaders.
            val_dataloaders: Not used by the CLI.
            datamodule: The data module (``--data``).
        """
        return super().fit(*args, **kwargs)

    @_signature_of(L.Trainer.validate, "evaluate")
    def validate(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D417 (the arguments documented are Lightning's)
        """Evaluate a checkpoint on the validation split; writes into <run>/validate/version_K.

        Args:
            model: The LightningModule (``--model``).
            dataloaders: Not used by the CLI; the data module supplies the loaders.
            verbose: Print the metrics.
            datamodule: The data module (``--data``).
        """
        return super().validate(*args, **kwargs)

    @_signature_of(L.Trainer.test, "evaluate")
    def test(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D417 (the arguments documented are Lightning's)
        """Evaluate a checkpoint on the test split (never used for model selection); writes into <run>/test/version_K.

        Args:
            model: The LightningModule (``--model``).
            dataloaders: Not used by the CLI; the data module supplies the loaders.
            verbose: Print the metrics.
            datamodule: The data module (``--data``).
        """
        return super().test(*args, **kwargs)

    @_signature_of(L.Trainer.predict, "classify with")
    def predict(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D417 (the arguments documented are Lightning's)
        """Classify the test split with a checkpoint; writes <run>/predict/version_K/predictions.csv.

        Args:
            model: The LightningModule (``--model``).
            dataloaders: Not used by the CLI; the data module supplies the loaders.
            datamodule: The data module (``--data``).
            return_predictions: Keep the predictions in memory as well.
        """
        return super().predict(*args, **kwargs)
