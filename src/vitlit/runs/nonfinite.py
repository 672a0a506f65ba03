"""NonFiniteGuard: no NaN or inf reaches the weights; the bad step is skipped and counted, or the run stops cleanly.

One NaN step ruins a run for good: AdamW spreads it into every weight and the moment states, and every later
checkpoint is worthless. The guard flags a step whose loss (any micro-batch) or, where no fp16 GradScaler checks
them already, whose gradients are not finite, and makes the optimizer skip it, all on the device: the fused AdamW of
the configs takes the flag as its ``found_inf`` (the GradScaler's own mechanism) and leaves weights, moments and its
step count untouched. The host reads the flags every ``check_every_n_steps`` steps and at epoch ends, so the check
costs no per-step synchronisation. Lightning's SpikeDetection does not fit here: it acts after the step (the weights
are already NaN), and its exception would then save those weights into ``last.ckpt``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities import rank_zero_warn
from torch.optim import Optimizer

from vitlit.config import PositiveInt
from vitlit.errors import TrainingHalted
from vitlit.model import ViTClassifier, skip_step_if, take_skip_flag, unscales_internally
from vitlit.optim import is_logged_step


class NonFiniteGuard(Callback):
    """Skip every optimizer step whose loss or gradients are NaN/inf; report them, and stop the run if asked.

    ``stop`` (default): at the next check, raise `TrainingHalted` naming the first bad step. Its update was skipped,
    so the weights in memory and those a ModelCheckpoint with ``save_on_exception`` writes to ``last.ckpt`` are
    finite; the CLI prints the command that resumes from there. ``skip``: go on, count the skipped steps in
    ``train/nonfinite_steps``, and stop anyway once ``max_consecutive_skips`` steps in a row were bad, because then
    the run has diverged rather than met one bad batch.

    Under ``16-mixed`` the GradScaler already skips steps with inf/NaN gradients (routine while it searches its
    scale, so those are not counted); the guard adds the loss check. Optimizers other than a fused one (``fused:
    true``, as in the configs) cannot skip on the device; for them a bad step is found with one host sync per step.

    Args:
        action: ``stop``, ``skip`` or ``off``. The shared defaults (``vitlit/defaults.yaml``) list a guard that
            stops; one appended with other settings (``--trainer.callbacks+=vitlit.runs.nonfinite.NonFiniteGuard
            --trainer.callbacks.action skip``) takes its place: only the last guard in the callbacks acts.
        max_consecutive_skips: In ``skip`` mode, stop after this many non-finite optimizer steps in a row.
        check_every_n_steps: Read the device-side flags every this many optimizer steps (and at every epoch end).
    """

    #: Lightning's key for the guard's state in checkpoints (a property of `Callback`): set once per guard.
    state_key: str = "NonFiniteGuard"

    def __init__(
        self,
        action: Literal["stop", "skip", "off"] = "stop",
        max_consecutive_skips: PositiveInt = 20,
        check_every_n_steps: PositiveInt = 50,
    ) -> None:
        self.action = action
        self.active = action != "off"
        self.max_consecutive_skips = int(max_consecutive_skips)
        self.check_every_n_steps = int(check_every_n_steps)
        self.skipped = 0  # skipped steps over the whole run (restored on resume), as of the last check
        self._reported = 0
        self._checked_at = 0  # the step of the last check: none is needed before the first step
        self._pending: torch.Tensor | None = None  # bad micro-batches of the step being accumulated
        self._deferred = False  # this step's flag is completed by the model's clipping and counted after the step
        self._counts: torch.Tensor | None = None  # on the device: [skipped, first bad step, run of bad steps, longest]
        self._fused: dict[int, bool] = {}  # per optimizer (by id): whether it can skip a step on the device
        self._fused_and_clipped = False  # every optimizer fused, and the model's clipping completes their flag
        # Two guards (the shared one and one appended) need their own keys in checkpoints: their settings differ.
        # Lightning reads the key at every hook (its profiler's names), so it is made once, here, in the form of
        # Lightning's own keys made from settings (ModelCheckpoint's), which checkpoints saved before hold.
        settings = {"action": action, "every": self.check_every_n_steps, "skips": self.max_consecutive_skips}
        self.state_key = f"{type(self).__qualname__}{settings!r}"

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        guards = [cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard)]
        self.active = guards[-1] is self and self.action != "off"  # only the last guard in the callbacks acts
        if not self.active:
            self._counts = None
            return
        self._counts = torch.tensor([self.skipped, -1, 0, 0], dtype=torch.long, device=pl_module.device)
        self._reported = self.skipped
        # Whether the model clips with its own hook, which completes the skip flag with the gradient norm's finiteness.
        hook = type(pl_module).configure_gradient_clipping
        clips = isinstance(pl_module, ViTClassifier) and hook is ViTClassifier.configure_gradient_clipping
        self._fused = {
            id(optimizer): unscales_internally(optimizer)
            and all(group.get("fused") for group in optimizer.param_groups)
            for optimizer in trainer.optimizers
        }
        self._fused_and_clipped = clips and all(self._fused.values())

    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor) -> None:
        if self._counts is None:
            return
        bad = ~torch.isfinite(loss.detach())
        self._pending = bad if self._pending is None else self._pending | bad

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Optimizer) -> None:
        bad, self._pending = self._pending, None
        if bad is None or self._counts is None:
            return
        plugin = trainer.precision_plugin
        if isinstance(plugin, MixedPrecision) and plugin.scaler is not None:
            self._count(bad, trainer.global_step)  # the GradScaler skips a step whose gradients are not finite
            return
        fused = self._fused.get(id(optimizer), False)
        if fused and self._fused_and_clipped:
            # The model's clipping adds its gradient norm's finiteness to the flag (`vitlit.model`'s step protocol):
            # the step's one norm. The flag the step used is counted after it, in `on_train_batch_end`.
            skip_step_if(optimizer, bad)
            self._deferred = True
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if grads:
            bad = bad | ~torch.isfinite(torch.nn.utils.get_total_norm(grads))  # one fused kernel
        self._count(bad, trainer.global_step)
        if fused:
            skip_step_if(optimizer, bad)  # the GradScaler's mechanism; cleared after the step
        elif bool(bad):  # the one host sync, for optimizers that cannot skip on the device
            optimizer.zero_grad(set_to_none=True)  # torch's optimizers leave parameters without a gradient alone

    def _count(self, bad: torch.Tensor, step: int) -> None:
        """Add one optimizer step, bad or not, to the device-side counts (no host sync)."""
        counts = self._counts
        first = torch.where((counts[1] < 0) & bad, step, counts[1])
        run = (counts[2] + 1) * bad
        self._counts = torch.stack([counts[0] + bad, first, run, torch.maximum(counts[3], run)])

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        if self._counts is None:  # not the guard that acts (only the last one does): its flags are not these
            return
        for optimizer in trainer.optimizers:
            flag = take_skip_flag(optimizer)
            if self._deferred and flag is not None:
                self._count(flag > 0, trainer.global_step - 1)  # the step just taken
        self._deferred = False
        if is_logged_step(trainer):  # a device tensor, read by Lightning when it writes the logs
            pl_module.log("train/nonfinite_steps", self._counts[0].float(), on_step=True, on_epoch=False)
        # Once per check step: under accumulation the step count stays put for the micro-batches of the next step.
        if trainer.global_step % self.check_every_n_steps == 0 and trainer.global_step != self._checked_at:
            self._checked_at = trainer.global_step
            self._check(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._check(trainer)

    def _check(self, trainer: Trainer) -> None:
        if self._counts is None:
            return
        skipped, first, _, longest = self._counts.tolist()  # the host sync of the check
        self.skipped = skipped
        if first < 0:
            return
        if self.action == "stop" or longest >= self.max_consecutive_skips:
            repeated = f" and on {longest} steps in a row" if self.action == "skip" else ""
            # bf16's range is fp32's: the fix for fp16's overflows, not for a run already in bf16.
            bf16 = "" if "bf16" in str(trainer.precision) else " or train in bf16 (--trainer.precision bf16-mixed)"
            raise TrainingHalted(
                f"the loss or the gradients became NaN/inf at step {first}{repeated} (that update was skipped; stopped "
                f"at step {trainer.global_step}, epoch {trainer.current_epoch}); lower the learning rate "
                f"(--model.optimizer.init_args.lr){bf16}"
            )
        if skipped > self._reported:
            rank_zero_warn(f"NonFiniteGuard: skipped {skipped - self._reported} NaN/inf steps since step {first}.")
            self._reported = skipped
        self._counts[1] = -1  # report the next bad step afresh

    def state_dict(self) -> dict[str, Any]:
        if self._counts is not None:
            self.skipped = int(self._counts[0])
        return {"skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped = int(state_dict.get("skipped", 0))
