"""ViTClassifier: any timm Vision Transformer with its loss, metrics, optimizer and learning-rate schedule."""

from __future__ import annotations

import warnings
from contextvars import ContextVar
from typing import Any

import timm
import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from torch.optim import Optimizer
from torchmetrics import MeanMetric, Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from vitlit.config import Fraction, PositiveInt, Rate, as_builtin
from vitlit.errors import ConfigError
from vitlit.optim import WarmupCosineLR, check_factories, fit_to_run, is_logged_step, param_groups

#: Set while the CLI builds the model of a fit resumed from a checkpoint file, whose every weight the checkpoint
#: replaces: its pretrained weights are then not read (a run copied to a machine without them, or offline, resumes).
WEIGHTS_FROM_CHECKPOINT: ContextVar[bool] = ContextVar("WEIGHTS_FROM_CHECKPOINT", default=False)


class ViTClassifier(LightningModule):
    """Image classification with a timm Vision Transformer.

    ``num_classes`` and ``img_size`` are linked from the data module by the CLI, so they are never typed twice.
    Any ViT-family model of timm works (``timm.list_models("*vit*")``); ``patch_size`` and ``img_size`` adapt it to
    small images, e.g. ``vit_small_patch16_224`` with ``patch_size: 4`` at 32 px gives 64 tokens.

    Args:
        model_name: timm model name, e.g. ``vit_tiny_patch16_224`` or ``vit_base_patch16_224.augreg_in21k``.
        num_classes: Number of classes (linked from the data's class names: `vitlit.cli.VitLitCLI.classes`).
        img_size: Input image side in pixels (linked from ``data.img_size``); must be divisible by the patch size.
        in_chans: Input channels (linked from ``data.in_chans``). With pretrained weights of another channel count
            timm adapts the patch embedding (summed for 1 channel, repeated and rescaled for more).
        patch_size: Patch side in pixels; ``None`` keeps the model's own (16 for ``*_patch16_*``). With pretrained
            weights timm resamples the patch embedding and the position embedding to the new sizes.
        drop_path_rate: Stochastic-depth rate of the last block (linearly increasing from 0 over the blocks).
        drop_rate: Dropout before the classifier head.
        pretrained: Start from timm's pretrained weights (downloaded from the Hugging Face hub and cached).
        pretrained_file: Start from weights in a local file (``.pth``/``.bin``/``.safetensors`` state dict of the
            timm model) instead of the hub; for offline machines. Loaded with ``weights_only`` semantics.
        grad_checkpointing: Recompute block activations in the backward pass: about 30% slower, far less memory.
        compile: Compile the network with ``torch.compile`` (in place, so checkpoints keep their parameter names):
            slower start (tens of seconds), faster steps on a GPU. Training batches keep one size (``drop_last``), so
            training compiles once; evaluation compiles once more for its last, partial batch.
        label_smoothing: Label smoothing of the default loss, cross-entropy (0.1: the reference ViT recipes); ``0``
            or ``None``: none. Applied here only, once, also to the soft targets of Mixup/CutMix. With ``loss``, none
            (give it to that loss).
        loss: The loss, a ``torch.nn.Module`` (``--model.loss <class path>``, e.g. a focal loss of your own) called
            as ``loss(logits, targets)``; the same for training, validation and test. In training, targets are
            class indices or, with Mixup/CutMix, class probabilities: a loss for those must accept both.
            ``None``: cross-entropy with ``label_smoothing``.
        layer_decay: Layer-wise learning-rate decay for fine-tuning (e.g. 0.75): block ``i`` of ``n`` learns at
            ``lr * layer_decay ** (n + 1 - i)``, the head at ``lr``. ``None`` trains all layers at one rate.
        class_names: Name of each class in index order (linked from ``data.class_names``; a predict of new images
            from a checkpoint takes the checkpoint's). Stored in checkpoints, so that evaluating on data whose
            classes differ is refused and predictions are labelled with the names the model learned.
        input_mean: Per-channel mean the images are normalised with (linked from ``data.mean``). Not used by
            ``forward`` (the data module normalises); kept in checkpoints so that an exported or served model
            prepares new images exactly as in training.
        input_std: Per-channel standard deviation, as ``input_mean`` (linked from ``data.std``).
        input_crop_pct: Evaluation's centre crop, as ``input_mean`` (linked from ``data.crop_pct``).
        input_interpolation: How evaluation resizes, as ``input_mean`` (linked from ``data.interpolation``).
        optimizer: Optimizer factory, called with the parameter groups (no weight decay on biases, norms,
            position embedding and class token). Default AdamW(lr=5e-4, weight_decay=0.05). Any optimizer class
            works, e.g. ``torch.optim.SGD`` or ``timm.optim.Lamb``. Rule of thumb for the learning rate: scale it
            linearly with the effective batch size, ``lr = base_lr * batch_size * accumulate_grad_batches / 512``.
        scheduler: Learning-rate scheduler factory, stepped after every optimizer step. A scheduler with a
            ``total_steps`` attribute left at ``None`` gets the run's optimizer-step count. Default: 500 warmup steps,
            then cosine to 1% of the peak.
    """

    def __init__(
        self,
        model_name: str = "vit_tiny_patch16_224",
        num_classes: PositiveInt = 10,
        img_size: PositiveInt = 224,
        in_chans: PositiveInt = 3,
        patch_size: PositiveInt | None = None,
        drop_path_rate: Rate = 0.1,
        drop_rate: Rate = 0.0,
        pretrained: bool = False,
        pretrained_file: str | None = None,
        grad_checkpointing: bool = False,
        compile: bool = False,
        label_smoothing: Rate | None = 0.1,
        loss: nn.Module | None = None,
        layer_decay: Fraction | None = None,
        class_names: list[str] | None = None,
        input_mean: list[float] | None = None,
        input_std: list[float] | None = None,
        input_crop_pct: float = 1.0,
        input_interpolation: str = "bilinear",
        optimizer: OptimizerCallable = lambda params: torch.optim.AdamW(params, lr=5e-4, weight_decay=0.05),
        scheduler: LRSchedulerCallable = lambda optimizer: WarmupCosineLR(optimizer, warmup_steps=500),
    ) -> None:
        super().__init__()
        # Plain lists and numbers in the hyperparameters: hparams.yaml stays plain YAML, checkpoints weights_only.
        input_mean = None if input_mean is None else [float(v) for v in input_mean]
        input_std = None if input_std is None else [float(v) for v in input_std]
        # The loss object stays out of the hyperparameters (checkpoints hold plain values only); its class is named.
        self.save_hyperparameters(ignore=["loss"])
        for key, value in self.hparams.items():
            self.hparams[key] = as_builtin(value)
        self.hparams["loss"] = None if loss is None else f"{type(loss).__module__}.{type(loss).__qualname__}"
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        check_factories(optimizer, scheduler)  # a bad value stops the run here, not after the data is loaded
        self.net = self._create_net()
        if grad_checkpointing:
            self.net.set_grad_checkpointing(True)
        if compile:
            self.net.compile()
        self.criterion = loss if loss is not None else nn.CrossEntropyLoss(label_smoothing=label_smoothing or 0.0)
        if loss is not None:  # tried on what it will get (logits, class indices) before the run starts
            if label_smoothing:
                raise ConfigError(
                    f"label_smoothing={label_smoothing} is for the default cross-entropy, but loss is "
                    f"{type(loss).__name__}; give the smoothing to that loss and pass --model.label_smoothing 0."
                )
            try:
                with warnings.catch_warnings():  # MSELoss warns of broadcasting before it fails: the line below says it
                    warnings.simplefilter("ignore")
                    value = loss(torch.zeros(2, num_classes), torch.zeros(2, dtype=torch.long))
                problem = None if value.numel() == 1 else f"it gives shape {tuple(value.shape)}, not one number"
            except Exception as err:
                problem = str(err).splitlines()[0][:120]
            if problem:
                raise ConfigError(
                    f"loss {type(loss).__name__} does not fit logits of shape (batch, {num_classes}) and class indices "
                    f"({problem}); use a classification loss such as torch.nn.CrossEntropyLoss."
                )
        self.train_metrics = MetricCollection({"acc": self._accuracy(num_classes, top_k=1)}, prefix="train/")
        self.val_metrics = MetricCollection(self.evaluation_metrics(num_classes), prefix="val/")
        self.test_metrics = self.val_metrics.clone(prefix="test/")
        # The evaluation loss as a torchmetrics mean too: under DDP it sums losses and image counts over all
        # processes at the epoch end (Lightning's sync_dist averages the counts as integers, which rounds them).
        # nan_strategy="disable": its NaN check is a host sync per step; a NaN loss shows as a NaN mean anyway.
        self.val_loss = MeanMetric(nan_strategy="disable")
        self.test_loss = MeanMetric(nan_strategy="disable")
        if not compile:  # lets Lightning's model summary show FLOPs and shapes (a compiled model would recompile)
            self.example_input_array = torch.zeros(1, in_chans, img_size, img_size)

    def _create_net(self) -> nn.Module:
        """Refuse options no timm model of ``model_name`` takes, then build the timm model, pretrained if asked.

        Built first without memory or a download (``meta``), the probe says whether the model takes ``img_size`` and
        ``patch_size`` and what its patches are; pretrained weights are then loaded into the real model, unless a
        checkpoint replaces them (`WEIGHTS_FROM_CHECKPOINT`).

        Raises:
            ConfigError: For an unknown model, class names of another count, a model that takes no image size, or
                an image size that is not a whole number of patches.
        """
        hp, kwargs = self.hparams, self.net_kwargs()
        name = hp.model_name
        if not timm.is_model(name):
            raise ConfigError(f"model_name={name!r} is not a timm model; pick one of timm.list_models('*vit*'), e.g. "
                              f"vit_tiny_patch16_224.")  # fmt: skip
        if hp.class_names is not None and len(hp.class_names) != hp.num_classes:
            raise ConfigError(f"class_names has {len(hp.class_names)} names for num_classes={hp.num_classes}.")
        try:
            with torch.device("meta"):
                probe = timm.create_model(name, pretrained=False, **kwargs)
        except TypeError as err:
            raise ConfigError(f"model_name={name!r} does not take img_size/patch_size ({err}); ViTClassifier needs a "
                              f"Vision Transformer such as vit_tiny_patch16_224.") from None  # fmt: skip
        patch = getattr(getattr(probe, "patch_embed", None), "patch_size", None)
        patch = patch[0] if isinstance(patch, tuple) else patch
        if patch and hp.img_size % patch:
            raise ConfigError(f"img_size={hp.img_size} is not divisible by the patch size {patch} of {name}; change "
                              f"--data.img_size or --model.patch_size.")  # fmt: skip
        if (hp.pretrained_file is not None or hp.pretrained) and WEIGHTS_FROM_CHECKPOINT.get():
            rank_zero_info("vitlit: the pretrained weights are not read: the checkpoint this fit resumes from replaces "
                           "every weight")  # fmt: skip
        elif hp.pretrained_file is not None or hp.pretrained:
            from vitlit.pretrained import create_pretrained  # runs from pretrained weights only

            return create_pretrained(hp, probe, kwargs)
        return timm.create_model(hp.model_name, pretrained=False, **kwargs)

    def net_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``timm.create_model`` for this model's architecture."""
        hp = self.hparams
        names = ("num_classes", "img_size", "in_chans", "drop_path_rate", "drop_rate")
        kwargs: dict[str, Any] = {name: hp[name] for name in names}
        if hp.patch_size is not None:
            kwargs["patch_size"] = hp.patch_size
        return kwargs

    @staticmethod
    def _accuracy(num_classes: int, top_k: int) -> MulticlassAccuracy:
        # average="micro" is plain accuracy; torchmetrics' default ("macro") would average per-class recalls.
        # validate_args=False: the check counts unique target values on the host, a GPU sync on every step; the
        # inputs here are the model's own logits and class indices.
        return MulticlassAccuracy(num_classes, top_k=top_k, average="micro", validate_args=False)

    def evaluation_metrics(self, num_classes: int) -> dict[str, Metric]:
        """The metrics of validation and test, by name (logged as ``val/<name>`` and ``test/<name>``).

        The hook for metrics of your own: override it in a subclass and add to ``super().evaluation_metrics(...)``.
        A metric that returns one value per class (``MulticlassF1Score(num_classes, average=None)``) is logged per
        class as ``val/<name>/<class name>``. ``val/acc`` must stay: checkpoints and early stopping follow it.
        """
        return {"acc": self._accuracy(num_classes, 1), "acc_top5": self._accuracy(num_classes, min(5, num_classes))}

    def param_groups(self, names: set[str] | None = None) -> list[dict[str, Any]]:
        """The network's trainable parameters (or only ``names``) in optimizer groups: weight decay and layer decay.

        `vitlit.transfer.finetune.FreezeSchedule` groups the stages it unfreezes with this, so they are split like the
        rest.
        """
        no_decay = getattr(self.net, "no_weight_decay", set)()  # timm: pos_embed, cls_token, ...
        return param_groups(self.net, skip=no_decay, layer_decay=self.hparams.layer_decay, names=names)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.optimizer_factory(self.param_groups())
        for group in optimizer.param_groups:  # layer decay's factor per group, before the scheduler records the rates
            group["lr"] *= group.get("lr_scale", 1.0)
        scheduler = self.scheduler_factory(optimizer)
        # A schedule of the run's length (`vitlit.optim`). Lightning counts it by building the training loader, so
        # images held in memory are decoded here (`ImageClassificationDataModule._loader`), not in setup.
        fit_to_run(scheduler, self.trainer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Return class logits (batch, num_classes) for images of shape (batch, in_chans, img_size, img_size)."""
        return self.net(images)

    def training_loss(self, output: Any, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The loss of one training batch: `criterion` on class indices, or on class probabilities (Mixup/CutMix).

        The hook for a training objective with more terms (`vitlit.transfer.distill.DistilledViTClassifier`).
        """
        return self.criterion(output, targets)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """One optimizer step's loss (`training_loss`), logged as ``train/loss``; accuracy counted for ``train/acc``."""
        images, targets = batch
        output = self(images)
        loss = self.training_loss(output, images, targets)
        logits = (output[0] + output[1]) / 2 if isinstance(output, tuple) else output  # DeiT: both heads, as in eval
        # With soft targets, accuracy counts the dominant class of each mixed image.
        hard = targets.argmax(dim=-1) if targets.is_floating_point() else targets
        self.train_metrics.update(logits.detach(), hard)  # computed and logged once, at the epoch's end
        # Not prog_bar=True: Lightning would turn it into a number after every batch, a GPU sync per step;
        # vitlit.runs.progress.ProgressBar shows it at the logging steps instead.
        self.log("train/loss", loss, batch_size=len(images))
        return loss

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip ``--trainer.gradient_clip_val`` on unscaled gradients, also for fused optimizers in mixed precision.

        Lightning's default refuses fused optimizers under 16-/bf16-mixed; the step's protocol below says why it can.
        Logs ``train/grad_norm``, the global gradient norm before clipping: the curve that shows a learning rate too
        high (spikes) or a warmup too short. Logged as a tensor at Lightning's logging steps only (the steps whose
        values it writes), so no step waits for it; beside it ``train/weight_norm`` (the trainable weights' global L2
        norm before the step): growth that weight decay does not hold, or a collapse.
        """
        norm = clip_true_gradients(optimizer, self.trainer.precision_plugin, gradient_clip_val, gradient_clip_algorithm)
        if is_logged_step(self.trainer, before_step=True):
            if norm is not None:
                self.log("train/grad_norm", norm, on_step=True, on_epoch=False)
            weights = [p.detach() for p in self.parameters() if p.requires_grad]
            self.log("train/weight_norm", torch.nn.utils.get_total_norm(weights), on_step=True, on_epoch=False)

    def on_train_epoch_end(self) -> None:
        if any(metric.update_count for metric in self.train_metrics.values()):  # an epoch a resume skipped: no step
            self._log_metrics(self.train_metrics)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_metrics, self.val_loss)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_metrics, self.test_loss)

    def _evaluate(
        self, batch: tuple[torch.Tensor, torch.Tensor], stage: str, metrics: MetricCollection, loss: MeanMetric
    ) -> None:
        images, targets = batch
        logits = self(images)
        # torchmetrics objects: under DDP they combine every process's shard when computed, at the epoch end. The
        # batch's loss goes in once per image, not with a weight: torchmetrics' MeanMetric drops the weight when
        # nan_strategy="disable" (every batch would count the same, its last small one too).
        loss.update(self.criterion(logits, targets).expand(len(images)))
        self.log(f"{stage}/loss", loss, prog_bar=stage == "val", batch_size=len(images))
        metrics.update(logits, targets)

    def on_validation_epoch_end(self) -> None:
        self._log_metrics(self.val_metrics)

    def on_test_epoch_end(self) -> None:
        self._log_metrics(self.test_metrics)

    def _log_metrics(self, metrics: MetricCollection) -> None:
        """Log the epoch's evaluation metrics; one value per class becomes ``<stage>/<name>/<class name>``."""
        names = self.hparams.class_names or [str(i) for i in range(self.hparams.num_classes)]
        for name, value in metrics.compute().items():
            if value.numel() == 1:
                self.log(name, value.squeeze(), prog_bar=name.startswith("val/"))
            else:
                self.log_dict({f"{name}/{names[i]}": v for i, v in enumerate(value.flatten())})
        metrics.reset()

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """Return class probabilities (softmax of the logits), shape (batch, num_classes)."""
        images = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self(images).softmax(dim=-1)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse a checkpoint whose architecture or classes differ, with the reason, before any weights are copied."""
        self.check_checkpoint(checkpoint)

    def check_checkpoint(self, checkpoint: dict[str, Any], options: str | None = None, resume: bool = False) -> None:
        """Raise a one-line `ConfigError` if ``checkpoint`` does not fit this model (the CLI asks before a run starts).

        Architecture (``model_name``, ``num_classes``, ``img_size``, ``in_chans``, ``patch_size``) must match, and so
        must the class names where both sides know them; training knobs (learning rate, smoothing, drop path) may
        differ. A ``resume`` also needs an optimizer state the configured optimizer can continue from: Lightning
        would load an AdamW state into SGD and fail at its first step (``KeyError: 'momentum'``).

        Args:
            checkpoint: The checkpoint's contents (its tensors may be memory-mapped).
            options: Where the options it was trained with are (``--config <run>/config.yaml``), for the message.
            resume: Whether a fit continues from it (evaluations restore no optimizer).
        """
        from vitlit.checkpoints import check_fits  # runs from a checkpoint only

        check_fits(self, checkpoint, options, resume)


# One optimizer step's protocol, in the order a step runs it: the NaN flag, clipping, the skip, the flag cleared.
#
# Lightning runs a training step as: ``training_step`` (the loss), ``on_before_backward``, backward,
# ``on_before_optimizer_step``, ``configure_gradient_clipping``, the optimizer's step, ``on_train_batch_end``.
# vitlit adds three things to it, all on the device (no host sync):
#
# 1. `vitlit.runs.nonfinite.NonFiniteGuard` flags a step whose loss is not finite and, for a fused optimizer, hands
#    the flag to the optimizer (`skip_step_if`): it is PyTorch's GradScaler's own mechanism, a ``found_inf`` tensor
#    the fused kernel reads, with ``grad_scale`` ``None`` (the gradients are not scaled).
# 2. `vitlit.model.ViTClassifier.configure_gradient_clipping` clips the true gradients (`clip_true_gradients`), also
#    where Lightning refuses to (a fused optimizer under mixed precision), and adds the finiteness of the one gradient
#    norm it computes to the flag: the norm serves the clipping, its log and the guard.
# 3. After the step the guard reads the flag the step used (`take_skip_flag`), counts it, and removes
#    it, so the next step is an ordinary one.
#
# The attributes the GradScaler and fused optimizers share are PyTorch's private protocol; they are read and written
# here alone, beside the protocol that needs them (``tests/test_private.py`` fails, naming one, if a release renames
# it).

#: The attributes through which PyTorch's GradScaler tells a fused optimizer's step to skip itself (a non-zero
#: ``found_inf``) and that the gradients are not scaled (``grad_scale`` None).
_SKIP_FLAGS = ("found_inf", "grad_scale")


def unscales_internally(optimizer: Optimizer) -> bool:
    """Whether ``optimizer`` unscales fp16 gradients inside its own step (fused Adam/AdamW/SGD).

    PyTorch marks such optimizers with ``_step_supports_amp_scaling``; the GradScaler reads the same flag.
    """
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def skip_step_if(optimizer: Optimizer, found_inf: torch.Tensor) -> None:
    """Step 1: make a fused optimizer's next step a no-op where ``found_inf`` is non-zero, on the device."""
    optimizer.found_inf = found_inf.float()
    optimizer.grad_scale = None


def clip_true_gradients(
    optimizer: Optimizer, precision: Precision, clip_val: float | None, algorithm: str | None = "norm"
) -> torch.Tensor | None:
    """Step 2: clip the gradients of ``optimizer``'s parameters as they are without loss scaling; return their norm.

    Lightning's mixed-precision plugin leaves unscaling to an optimizer that "handles it internally" (fused AdamW) and
    therefore refuses to clip for it: ``gradient_clip_val`` + ``fused: true`` + ``16-mixed`` would die at the first
    step. Yet PyTorch's GradScaler supports this order: ``scaler.unscale_(optimizer)`` before the step records that
    the gradients are unscaled, and ``scaler.step`` then passes ``grad_scale=None`` to the fused kernel together with
    the ``found_inf`` flag it computed, so a step with inf/NaN gradients is still skipped on the device. Under
    ``bf16-mixed`` there is no scaler and nothing to unscale. Neither reads a value back to the host.

    Args:
        optimizer: The optimizer about to step; its parameter groups name the gradients to clip.
        precision: The Trainer's precision plugin; its ``scaler``, if any, is the fp16 GradScaler.
        clip_val: ``gradient_clip_val``: the largest global L2 norm (``norm``) or absolute value (``value``) a
            gradient may have; ``None`` or 0 disables clipping.
        algorithm: ``norm`` (Lightning's default) or ``value``.

    Returns:
        The global L2 norm of the true gradients before clipping, a tensor on their device (not read back), or
        ``None`` when no parameter has a gradient.
    """
    scaler = getattr(precision, "scaler", None)
    if scaler is not None and unscales_internally(optimizer):
        # Lightning skipped unscale_ for this optimizer; the GradScaler remembers it was done and does not repeat it.
        # Done also without clipping, so that the norm below is the true gradients' and not the scaled ones'.
        scaler.unscale_(optimizer)
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if not params:
        return None
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    flag = vars(optimizer).get("found_inf")
    if flag is not None:  # a guard asked for the skip (step 1): a norm that is not finite skips the step too
        optimizer.found_inf = torch.maximum(flag, (~torch.isfinite(norm)).float())
    if clip_val and algorithm != "value":  # Lightning passes a GradClipAlgorithmType, a str enum equal to its value
        torch.nn.utils.clip_grads_with_norm_(params, clip_val, norm)
    elif clip_val:
        torch.nn.utils.clip_grad_value_(params, clip_val)
    return norm


def take_skip_flag(optimizer: Optimizer) -> torch.Tensor | None:
    """Step 3: the ``found_inf`` flag the optimizer's last step was given (steps 1 and 2), or None.

    What `skip_step_if` set is removed, so that the next step is an ordinary one.
    """
    flag = vars(optimizer).get("found_inf")
    for name in _SKIP_FLAGS:
        vars(optimizer).pop(name, None)
    return flag
