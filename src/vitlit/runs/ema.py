r"""A weight EMA updated as PyTorch's documentation builds one: Lightning's `EMAWeightAveraging`, foreach.

Lightning's ``EMAWeightAveraging`` hands ``AveragedModel`` a per-tensor ``avg_fn``: after every optimizer step, a
Python loop over the weights with three kernels and two temporaries each. PyTorch's documentation builds an EMA with
``multi_avg_fn=get_ema_multi_avg_fn(decay)`` instead, one in-place foreach lerp over all of them (benchmarks/RESULTS.md:
"Weight EMA"). `EMA` is Lightning's callback with that function; everything else (validation, checkpoints and
``test`` on the averaged weights, its state in checkpoints, ``update_every_n_steps``, ...) is Lightning's::

    python -m vitlit fit --config configs/digits.yaml --trainer.callbacks+=vitlit.runs.ema.EMA \
        --trainer.callbacks.decay 0.998
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import EMAWeightAveraging, WeightAveraging
from torch.optim.swa_utils import get_ema_multi_avg_fn

from vitlit.config import NonNegativeInt, Probability


class EMA(EMAWeightAveraging):
    """Lightning's `EMAWeightAveraging` with PyTorch's foreach update (``multi_avg_fn``): the same average, faster.

    Two of Lightning's orders are mended. An update at an epoch's end is made at its last training batch, before the
    epoch's validation, so that the weights validated are those its checkpoint saves (Lightning's comes after). A
    stop during validation (a signal, Ctrl-C) puts the training weights back before ``last.ckpt`` is saved
    (Lightning would save the average swapped in, and a resume would train from it).

    Args:
        decay: The weight of the average so far at each update (the new weights get ``1 - decay``).
        update_every_n_steps: Update the average every this many optimizer steps (0: never by steps).
        update_starting_at_step: The first optimizer step that updates it (``None``: the first).
        update_starting_at_epoch: From this epoch on, also update it at each epoch's end (``None``: never by epochs).
        device: Where the average is kept (``None``: beside the model; ``"cpu"`` saves GPU memory).
        use_buffers: Average the buffers too (else only the parameters).
    """

    def __init__(
        self,
        decay: Probability = 0.999,
        update_every_n_steps: NonNegativeInt = 1,
        update_starting_at_step: NonNegativeInt | None = None,
        update_starting_at_epoch: NonNegativeInt | None = None,
        device: str | None = None,
        use_buffers: bool = True,
    ) -> None:
        # WeightAveraging's constructor, which passes its keyword arguments on to AveragedModel (the documented way to
        # give it a multi_avg_fn): EMAWeightAveraging's own would add its per-tensor avg_fn, and AveragedModel takes
        # only one of the two. Its `should_update` then reads the three schedule attributes set here, as its own do.
        WeightAveraging.__init__(self, device=device, use_buffers=use_buffers, multi_avg_fn=get_ema_multi_avg_fn(decay))
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch
        self._swapped = False  # the average is in the model (during validation)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
        # The epoch's update, before the epoch's validation; Lightning's own on_train_epoch_end then finds it done.
        if trainer.is_last_batch:
            super().on_train_epoch_end(trainer, pl_module)

    def _follow_until_first_update(self, pl_module: LightningModule) -> None:
        """Before its first update the average is the training weights, as timm's ModelEmaV3 keeps it.

        Lightning's copy is the weights the run started from until then: validated, saved in every checkpoint and
        copied into the model at the end, an ``update_starting_at_step`` the run never reached discarded its training.
        """
        average = self._average_model
        if average is None or int(average.n_averaged) > 0:
            return
        for mine, theirs in zip([*average.module.parameters(), *average.module.buffers()],
                                [*pl_module.parameters(), *pl_module.buffers()], strict=True):  # fmt: skip
            mine.detach().copy_(theirs.detach())

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._follow_until_first_update(pl_module)
        super().on_validation_epoch_start(trainer, pl_module)
        self._swapped = self._average_model is not None

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_validation_epoch_end(trainer, pl_module)
        self._swapped = False

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if not self._swapped:  # during validation the model holds the average: the training weights are in it
            self._follow_until_first_update(pl_module)
        super().on_save_checkpoint(trainer, pl_module, checkpoint)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._follow_until_first_update(pl_module)
        super().on_train_end(trainer, pl_module)

    def state_dict(self) -> dict[str, Any]:
        """Lightning's state, and the epoch of the latest update.

        Lightning keeps the step of the latest update only: a run stopped in an epoch's validation, its epoch update
        made at the last batch, updated the average again at that epoch's end on its resume.
        """
        return {**super().state_dict(), "latest_update_epoch": self._latest_update_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._latest_update_epoch = int(state_dict.get("latest_update_epoch", -1))  # -1: written before it was kept

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # ModelCheckpoint saves last.ckpt on the way out after this hook (Lightning calls checkpoint callbacks last).
        if self._swapped:
            self.on_validation_epoch_end(trainer, pl_module)
