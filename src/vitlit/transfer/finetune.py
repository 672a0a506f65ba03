"""Freezing and progressive unfreezing of a pretrained ViT, on Lightning's `BaseFinetuning`.

A linear probe trains only the classifier head; a schedule then lets the backbone learn, all at once or a few blocks
at a time from the top, each stage at its own fraction of the head's learning rate. Lightning's base class does the
freezing before the optimizer is built and records the optimizer's groups for a resume; this subclass adds what a ViT
recipe needs on top: stages in timm's own layer order, the same weight-decay and layer-decay grouping as the groups
built at the start, a learning-rate schedule that takes the new groups on (`vitlit.optim.WarmupCosineLR`), and the
same frozen set after a resume in the middle of the schedule (Lightning restores the groups but not
``requires_grad``).

Use it as ``--trainer.callbacks+=vitlit.transfer.finetune.FreezeSchedule`` or in YAML
(``configs/addons/linear_probe.yaml``,
``configs/addons/unfreeze.yaml``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BaseFinetuning
from timm.models import group_parameters
from torch import nn

from vitlit.config import Fraction, NonNegativeInt, PositiveInt
from vitlit.errors import ConfigError
from vitlit.optim import steps_per_epoch
from vitlit.transfer.private import follow_new_param_groups


def head_parameter_names(net: nn.Module) -> set[str]:
    """Names of the classifier head's parameters (both heads of a DeiT distilled model), as ``net`` names them."""
    heads = net.get_classifier()
    heads = heads if isinstance(heads, tuple) else (heads,)
    ids = {id(p) for head in heads for p in head.parameters()}
    return {name for name, p in net.named_parameters() if id(p) in ids}


def backbone_layers(net: nn.Module, norm_with_top: bool = True) -> list[list[str]]:
    """The backbone's parameter names as timm orders its layers, top first, for unfreezing stage by stage.

    timm's ``group_matcher`` puts each block in a layer and the final norm with the top block; the embeddings (patch,
    position, class token) form the bottom layer, which joins the block above it here: training the embeddings
    without any block is never what a schedule means. A top layer that is a norm alone (the pooled models' ``fc_norm``,
    which timm leaves in a layer of its own) joins the top block, so that every stage counts blocks; ``norm_with_top``
    ``False`` leaves it a stage of its own, as runs saved before this rule staged it. The head is not part of the
    backbone.
    """
    matcher = getattr(net, "group_matcher", None)
    if not callable(matcher) or not callable(getattr(net, "get_classifier", None)):
        raise ConfigError(
            f"FreezeSchedule needs a timm model with group_matcher() and get_classifier(), and "
            f"{type(net).__name__} has not both; use a timm ViT or drop the callback."
        )
    head = head_parameter_names(net)
    layers = [[n for n in names if n not in head] for _, names in sorted(group_parameters(net, matcher()).items())]
    layers = [names for names in layers if names][::-1]
    if len(layers) > 1:
        layers[-2:] = [layers[-2] + layers[-1]]
    shapes = dict(net.named_parameters())
    if norm_with_top and len(layers) > 1 and all(shapes[name].ndim == 1 for name in layers[0]):  # a norm: no block
        layers[:2] = [layers[0] + layers[1]]
    return layers


class FreezeSchedule(BaseFinetuning):
    """Train the head alone first (a linear probe), then unfreeze the backbone on a schedule of epochs.

    Before the optimizer is built every backbone parameter is frozen, so the optimizer starts with the head's groups
    only. At each epoch of ``unfreeze_at_epochs`` the next stage starts training: the whole backbone, or the next
    ``blocks_per_stage`` blocks counted from the top. Its parameters join the optimizer as new groups, split like the
    first ones (no weight decay on biases, norms and embeddings; layer decay's scale when ``--model.layer_decay`` is
    set) and named ``stage<k>_...`` on the learning-rate curves; the learning-rate schedule carries them from the
    current step on, at ``lr_factor`` times the head's rate.

    Args:
        unfreeze_at_epochs: Epochs (0-based, increasing) at which the next stage starts training. Empty: a linear
            probe, where only the head ever trains.
        blocks_per_stage: Blocks each stage unfreezes, from the top (the final norm goes with the top block, the
            embeddings with the bottom one). ``None``: the first stage unfreezes the whole backbone, so one epoch is
            all ``unfreeze_at_epochs`` may hold. Stages that the epochs do not reach leave the lower blocks frozen.
        lr_factor: Learning rate of the unfrozen stages as a fraction of the head's (on top of layer decay): a
            backbone that joins a trained head at the head's full rate loses much of what it learned in
            pretraining.
    """

    def __init__(
        self,
        unfreeze_at_epochs: list[NonNegativeInt] | None = None,
        blocks_per_stage: PositiveInt | None = None,
        lr_factor: Fraction = 0.1,
    ) -> None:
        super().__init__()
        self.unfreeze_at_epochs = [int(e) for e in unfreeze_at_epochs or []]
        self.blocks_per_stage = None if blocks_per_stage is None else int(blocks_per_stage)
        self.lr_factor = float(lr_factor)
        self.stages_done = 0
        self.resumed = False  # set when Lightning hands this callback a checkpoint's state
        # A pooled model's fc_norm goes with the top block (`backbone_layers`); a run saved before it did goes on with
        # its own stages (its checkpoint lacks this key), so that its resume unfreezes the blocks it would have.
        self.norm_with_top = True
        if any(b <= a for a, b in zip(self.unfreeze_at_epochs, self.unfreeze_at_epochs[1:], strict=False)):
            raise ConfigError(
                f"FreezeSchedule unfreeze_at_epochs={self.unfreeze_at_epochs} must increase; list each stage's epoch "
                f"once, in order."
            )
        if self.blocks_per_stage is not None and not self.unfreeze_at_epochs:  # it was taken and never read
            raise ConfigError(f"FreezeSchedule blocks_per_stage={self.blocks_per_stage} sizes the stages that "
                              f"unfreeze_at_epochs unfreezes, but it gives none (a linear probe); give the epochs, or "
                              f"leave blocks_per_stage out.")  # fmt: skip
        if self.blocks_per_stage is None and len(self.unfreeze_at_epochs) > 1:
            raise ConfigError(
                f"FreezeSchedule unfreeze_at_epochs={self.unfreeze_at_epochs} has {len(self.unfreeze_at_epochs)} "
                f"stages, but without blocks_per_stage the first one unfreezes the whole backbone; give one epoch, or "
                f"set blocks_per_stage."
            )

    # -- checked before the run starts ----------------------------------------------------------------------------

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """`check` the schedule before training starts (a refused run leaves no folder: the CLI removes it)."""
        if stage == "fit":
            self.check(trainer, pl_module)
        super().setup(trainer, pl_module, stage)

    def check(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Refuse, in one line, a schedule this model, optimizer or run cannot follow (called before any work).

        Raises:
            ConfigError: Too many stages for the model's blocks, an epoch past the run's end, a learning-rate
                scheduler that cannot take on parameter groups added during the run, or unfreezing under DDP.
        """
        stages = self._stages(pl_module)
        if len(self.unfreeze_at_epochs) > len(stages):
            raise ConfigError(
                f"FreezeSchedule has {len(self.unfreeze_at_epochs)} unfreeze epochs but {pl_module.hparams.model_name} "
                f"has only {len(stages)} stages of blocks_per_stage={self.blocks_per_stage}; drop epochs or lower "
                f"blocks_per_stage."
            )
        late = [e for e in self.unfreeze_at_epochs if trainer.max_epochs not in (None, -1) and e >= trainer.max_epochs]
        if late:
            raise ConfigError(
                f"FreezeSchedule unfreezes at epoch {late[0]}, but the run ends after --trainer.max_epochs="
                f"{trainer.max_epochs} epochs (epochs count from 0); use an earlier epoch or a longer run."
            )
        if self.unfreeze_at_epochs and trainer.world_size > 1:
            # DDP averages the gradients of the parameters that were trainable when it wrapped the model; those of
            # a stage unfrozen later would stay each process's own, and the processes' weights would drift apart.
            raise ConfigError(
                f"FreezeSchedule unfreezes stages during the run (unfreeze_at_epochs={self.unfreeze_at_epochs}), "
                f"which data-parallel training ({trainer.world_size} processes) cannot follow; train on one device, "
                f"or drop configs/addons/unfreeze.yaml for full fine-tuning or a linear probe."
            )
        if self.unfreeze_at_epochs:
            probe = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
            scheduler = pl_module.scheduler_factory(probe)
            if not callable(getattr(scheduler, "lr_factor", None)):
                raise ConfigError(
                    f"FreezeSchedule adds parameter groups during the run, and the scheduler "
                    f"{type(scheduler).__name__} has no lr_factor(step) curve for them to follow; use "
                    f"vitlit.optim.WarmupCosineLR (the default) or a linear probe (no unfreeze_at_epochs)."
                )

    # -- BaseFinetuning ---------------------------------------------------------------------------------------------

    def freeze_before_training(self, pl_module: LightningModule) -> None:
        """Freeze the whole backbone; the head alone is in the optimizer that Lightning builds next."""
        net = pl_module.net
        head = head_parameter_names(net)
        for name, param in net.named_parameters():
            param.requires_grad = name in head

    def finetune_function(self, pl_module: LightningModule, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Unfreeze every stage whose epoch has come and add its parameters to ``optimizer`` as new groups."""
        stages = self._stages(pl_module)
        while self.stages_done < len(self.unfreeze_at_epochs) and epoch >= self.unfreeze_at_epochs[self.stages_done]:
            names = set(stages[self.stages_done])
            self.stages_done += 1
            for name, param in pl_module.net.named_parameters():
                if name in names:
                    param.requires_grad = True
            base_lr = optimizer.defaults["lr"]
            for group in pl_module.param_groups(names):
                group["lr"] = base_lr * group.get("lr_scale", 1.0) * self.lr_factor
                group["name"] = f"stage{self.stages_done}_{group['name']}"
                optimizer.add_param_group(group)
            self._follow(self._scheduler(pl_module.trainer))

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """On a resume, bring back the unfrozen stages: Lightning restores the optimizer's groups, not the flags."""
        super().on_fit_start(trainer, pl_module)
        if not self.resumed:
            return
        self.resumed = False
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                for param in group["params"]:
                    param.requires_grad = True
        if self.stages_done:  # the scheduler's state, loaded next, has one entry per group
            self._follow(self._scheduler(trainer))

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Refuse an unfreeze epoch that a run bounded by ``max_steps`` never reaches (its epochs are known now)."""
        per_epoch = steps_per_epoch(trainer)
        if trainer.max_steps in (None, -1) or per_epoch is None:
            return
        last = math.ceil(trainer.max_steps / per_epoch) - 1  # the epoch the run ends in
        late = [e for e in self.unfreeze_at_epochs if e > last]
        if late:
            raise ConfigError(
                f"FreezeSchedule unfreezes at epoch {late[0]}, but --trainer.max_steps={trainer.max_steps} ends the "
                f"run in epoch {last} ({per_epoch} steps per epoch, epochs count from 0); use an earlier epoch "
                f"or more steps."
            )

    def state_dict(self) -> dict[str, Any]:
        # The settings too: `--ckpt_path auto`/`last` take only a run of the same schedule
        # (`vitlit.checkpoints.weight_callbacks_differ`), not a linear probe's for an unfreezing run.
        schedule = {"unfreeze_at_epochs": self.unfreeze_at_epochs, "blocks_per_stage": self.blocks_per_stage,
                    "lr_factor": self.lr_factor}  # fmt: skip
        return {**super().state_dict(), "stages_done": self.stages_done, "norm_with_top": self.norm_with_top,
                "schedule": schedule}  # fmt: skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.stages_done = int(state_dict.get("stages_done", 0))
        self.norm_with_top = bool(state_dict.get("norm_with_top", False))
        self.resumed = True
        ours = ("stages_done", "norm_with_top", "schedule")
        super().load_state_dict({k: v for k, v in state_dict.items() if k not in ours})

    # -- helpers ----------------------------------------------------------------------------------------------------

    def _stages(self, pl_module: LightningModule) -> list[list[str]]:
        """The parameter names each stage unfreezes, top stage first."""
        layers = backbone_layers(pl_module.net, self.norm_with_top)
        if self.blocks_per_stage is None:
            return [[name for layer in layers for name in layer]]
        n = self.blocks_per_stage
        return [[name for layer in layers[i : i + n] for name in layer] for i in range(0, len(layers), n)]

    @staticmethod
    def _scheduler(trainer: Trainer) -> Any:
        return trainer.lr_scheduler_configs[0].scheduler

    @staticmethod
    def _follow(scheduler: Any) -> None:
        """Take the optimizer's groups added since ``scheduler`` was built onto its curve, from the current step on.

        A plain ``LambdaLR`` would leave a new stage at its first learning rate for the rest of the run; here its rate
        is its peak, and it follows the same warmup and cosine as the others: added mid-run, it starts at the curve's
        current point.
        """
        follow_new_param_groups(scheduler, scheduler.lr_factor)
