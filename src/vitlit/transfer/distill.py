"""Knowledge distillation: a frozen teacher's predictions as a second training signal for the ViT.

Given to the model like its optimizer (``--model.distillation.teacher <name or .ckpt>``, or a ``class_path`` block
in YAML). Two losses, as the write-ups and DeiT use them:

- ``soft``: ``alpha * CE(student, labels) + (1 - alpha) * T^2 * KL(softmax(teacher / T) || softmax(student / T))``
  (Hinton et al. 2015; the 8 GB write-up trains its ViT-Tiny with alpha 0.7);
- ``hard``: ``alpha * CE(student, labels) + (1 - alpha) * CE(student, argmax teacher)`` (DeiT, alpha 0.5). For
  timm's ``deit_*_distilled_*`` students the teacher term trains the distillation token's head, and evaluation
  averages both heads, as DeiT does.

The teacher is a timm model (a CNN such as ``resnet50``, as the ViT-B/16 write-up uses, or a ViT) with a local
weights file or timm's pretrained weights, or a vitlit checkpoint. It runs in eval mode without gradients, under the
student's autocast, on the student's device; it is not a submodule of the student, so it is never in the student's
checkpoint, optimizer or export. Its input is the student's batch converted to the teacher's own normalisation and
size (from its timm pretrained config or its checkpoint), so the two may differ.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import timm
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.transforms.v2.functional import resize

from vitlit.checkpoints import UNREADABLE, refuse_compressed
from vitlit.config import PositiveFloat, PositiveInt, Probability
from vitlit.errors import ConfigError
from vitlit.model import ViTClassifier
from vitlit.pretrained import hub_or_cache, load_error
from vitlit.trained import load_classifier


def soft_distillation_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """``T^2 * KL(softmax(teacher / T) || softmax(student / T))``, averaged over the batch (Hinton et al.).

    The ``T^2`` keeps the gradients' scale independent of the temperature.
    """
    log_p_student = F.log_softmax(student.float() / temperature, dim=-1)
    log_p_teacher = F.log_softmax(teacher.float() / temperature, dim=-1)
    return F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True) * temperature**2


class Distillation:
    """A frozen teacher and the loss that mixes its predictions with the labels.

    Args:
        teacher: A timm model name (``resnet50``, ``vit_base_patch16_224``, ...) or the path of a vitlit checkpoint
            (``<run>/checkpoints/*.ckpt``) whose model becomes the teacher.
        teacher_file: Weights of the timm teacher (``.pth``/``.safetensors``), trained on this data's classes; without
            it timm's pretrained weights are downloaded, which only fit data with the same classes (ImageNet's).
        kind: ``soft`` (KL divergence of the softened distributions) or ``hard`` (the teacher's top class as a label).
        alpha: Weight of the loss on the labels; the teacher's term gets ``1 - alpha`` (0.7 in the 8 GB write-up,
            0.5 in DeiT).
        temperature: Softening of both distributions in ``soft`` mode (the write-ups use 2-4).
        teacher_img_size: Side of the teacher's input; ``None`` uses the teacher's own (its pretrained config, or its
            checkpoint's ``img_size``).
    """

    def __init__(
        self,
        teacher: str,
        teacher_file: str | None = None,
        kind: Literal["soft", "hard"] = "soft",
        alpha: Probability = 0.7,
        temperature: PositiveFloat = 4.0,
        teacher_img_size: PositiveInt | None = None,
    ) -> None:
        if not teacher:
            raise ConfigError(
                "distillation needs a teacher; give --model.distillation.teacher <timm name or vitlit checkpoint>."
            )
        self.teacher_name = teacher
        self.teacher_file = teacher_file
        self.kind = kind
        self.alpha = float(alpha)
        self.temperature = float(temperature)
        self.teacher_img_size = None if teacher_img_size is None else int(teacher_img_size)
        self._teacher: list[nn.Module] = []  # in a list: never registered as the student's submodule
        self._scale = self._shift = torch.empty(0)  # student's normalised input -> teacher's (built by `build`)
        self.img_size = 0

    def hparams(self) -> dict[str, Any]:
        """The settings as plain values, for the student's hyperparameters."""
        keys = ("teacher_file", "kind", "alpha", "temperature", "teacher_img_size")
        return {"teacher": self.teacher_name, **{key: getattr(self, key) for key in keys}}

    @property
    def teacher(self) -> nn.Module:
        """The frozen teacher network (built by `build`)."""
        if not self._teacher:
            raise RuntimeError("Distillation.build() must run before the teacher is used; ViTClassifier does this.")
        return self._teacher[0]

    def build(
        self, num_classes: int, class_names: list[str] | None, input_mean: list[float], input_std: list[float]
    ) -> None:
        """Create the teacher, check that it predicts the student's classes, and freeze it.

        Args:
            num_classes: The student's class count.
            class_names: The student's class names, where known (a vitlit teacher's must be the same).
            input_mean: The normalisation of the student's input (mean), which the teacher's input is derived from.
            input_std: Its standard deviation.

        Raises:
            ConfigError: For an unknown model name, unreadable weights, or a teacher of other classes.
        """
        if self.teacher_name.endswith(".ckpt") or Path(self.teacher_name).expanduser().is_file():
            if self.teacher_file is not None:  # it was taken and never read
                raise ConfigError(f"teacher_file={self.teacher_file!r} gives a timm teacher its weights, but the "
                                  f"teacher {self.teacher_name} is a vitlit checkpoint, which holds its own; leave "
                                  f"teacher_file out.")  # fmt: skip
            net, card = load_classifier(self.teacher_name)
            if class_names and card.class_names != list(class_names):
                raise ConfigError(
                    f"the teacher {self.teacher_name} was trained on the classes {card.class_names[:5]}..., not on "
                    f"this data's {list(class_names)[:5]}...; give a teacher trained on the same data."
                )
            mean, std, size = card.mean, card.std, card.img_size
        else:
            net = self._timm_teacher(num_classes)
            cfg = net.pretrained_cfg
            mean, std, size = list(cfg["mean"]), list(cfg["std"]), int(cfg["input_size"][-1])
        classes = net.num_classes if hasattr(net, "num_classes") else None
        if classes is not None and classes != num_classes:
            raise ConfigError(
                f"the teacher {self.teacher_name} predicts {classes} classes, this data has {num_classes}; give a "
                f"teacher trained on these classes (a vitlit checkpoint, or --model.distillation.teacher_file)."
            )
        conv = next((m for m in net.modules() if isinstance(m, nn.Conv2d)), None)  # its input: a stem or patches
        channels = len(input_mean)  # a grey student's one channel is repeated for a colour teacher (broadcast)
        if conv is not None and channels not in (1, conv.in_channels):
            raise ConfigError(f"the teacher {self.teacher_name} takes images of {conv.in_channels} channel(s), but "
                              f"this data's have {channels}; give a teacher trained on images of {channels} "
                              f"channel(s).")  # fmt: skip
        patch = getattr(getattr(net, "patch_embed", None), "patch_size", None)
        if self.teacher_img_size is not None and patch is not None and self.teacher_img_size % patch[0]:
            raise ConfigError(f"teacher_img_size={self.teacher_img_size} is not a multiple of the teacher's "
                              f"{patch[0]}-pixel patches; give a multiple of {patch[0]}, or leave it out.")  # fmt: skip
        if self.teacher_img_size is not None and hasattr(net, "set_input_size"):
            # A ViT's position embeddings fix its input size: timm resamples them to the size asked for.
            net.set_input_size(img_size=self.teacher_img_size)
        net.eval().requires_grad_(False)
        self._teacher[:] = [net]
        # One multiply-add per batch takes the student's input to the teacher's: back to pixels in [0, 1] with the
        # student's statistics, then normalised with the teacher's. Kept as tensors, moved once with the teacher.
        student_mean, student_std = torch.tensor(input_mean), torch.tensor(input_std)
        teacher_mean, teacher_std = torch.tensor(mean), torch.tensor(std)
        self._scale = (student_std / teacher_std).view(1, -1, 1, 1)
        self._shift = ((student_mean - teacher_mean) / teacher_std).view(1, -1, 1, 1)
        self.img_size = self.teacher_img_size or size

    def _timm_teacher(self, num_classes: int) -> nn.Module:
        if not timm.is_model(self.teacher_name):
            raise ConfigError(
                f"teacher={self.teacher_name!r} is neither a timm model nor a checkpoint file; e.g. resnet50, or "
                f"<run>/checkpoints/last.ckpt."
            )
        if self.teacher_file is None:  # timm's pretrained weights, with their own class count
            fix = "give the teacher's weights as --model.distillation.teacher_file"
            cached = hub_or_cache(self.teacher_name, fix)
            try:
                return timm.create_model(self.teacher_name, pretrained=True, **cached)
            except (OSError, RuntimeError, ValueError) as err:  # no such weights on the hub
                raise ConfigError(
                    f"timm's pretrained weights of the teacher {self.teacher_name} could not be loaded "
                    f"({type(err).__name__}); {fix}."
                ) from None
        path = Path(self.teacher_file).expanduser()
        if not path.is_file():
            raise ConfigError(f"teacher_file={self.teacher_file!r} does not exist; give the teacher's weights file.")
        net = timm.create_model(self.teacher_name, pretrained=False, num_classes=num_classes)
        refuse_compressed(path, "teacher_file")
        try:
            net.load_state_dict(timm.models.load_state_dict(str(path)))
        except (*UNREADABLE, RuntimeError, KeyError) as err:
            raise ConfigError(
                f"teacher_file={self.teacher_file!r} is not a readable state dict of {self.teacher_name} with "
                f"{num_classes} classes ({load_error(err)[:160]})."
            ) from None
        return net

    def to(self, device: torch.device) -> Distillation:
        """Move the teacher and its input conversion to ``device`` (the student's)."""
        self.teacher.to(device)
        self._scale, self._shift = self._scale.to(device), self._shift.to(device)
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Distillation:
        """A copy of the student (an EMA's average) shares the frozen teacher: it never changes, and is large."""
        return copy.copy(self)

    @torch.no_grad()
    def teacher_logits(self, images: torch.Tensor) -> torch.Tensor:
        """The teacher's logits for the student's normalised ``images``.

        The batch is normalised as the teacher expects (see `build`) and resized to its input size; Mixup, erasing
        and the crop the student saw are kept, so both judge the same picture.
        """
        # Moved with the first batch: BatchSizeSearch's trial steps run before the module's own fit hooks.
        if self._scale.device != images.device:
            self.to(images.device)
        weight = next(self.teacher.parameters(), None)
        if weight is not None and images.is_floating_point() and weight.dtype != images.dtype:
            self.teacher.to(images.dtype)  # a "true" precision (bf16-true) casts the student and its batches
        x = images * self._scale.to(images.dtype) + self._shift.to(images.dtype)
        if x.shape[-1] != self.img_size or x.shape[-2] != self.img_size:
            x = resize(x, [self.img_size, self.img_size], antialias=True)  # the image pipeline's resize, on floats
        return self.teacher(x)

    def loss(
        self, student: torch.Tensor | tuple[torch.Tensor, torch.Tensor], teacher: torch.Tensor, targets: torch.Tensor,
        criterion: nn.Module,
    ) -> torch.Tensor:  # fmt: skip
        """``alpha`` x the loss on the labels + ``1 - alpha`` x the teacher's term.

        Args:
            student: The student's logits, or ``(class head, distillation head)`` of a distilled DeiT in training.
            teacher: The teacher's logits.
            targets: Class indices, or class probabilities (Mixup/CutMix).
            criterion: The loss on the labels (the model's label-smoothed cross-entropy).
        """
        cls, dist = student if isinstance(student, tuple) else (student, student)
        if self.kind == "soft":
            teacher_term = soft_distillation_loss(dist, teacher, self.temperature)
        else:
            teacher_term = F.cross_entropy(dist, teacher.argmax(dim=-1))
        return self.alpha * criterion(cls, targets) + (1 - self.alpha) * teacher_term


class DistilledViTClassifier(ViTClassifier):
    """`vitlit.ViTClassifier` that learns from a frozen teacher as well as from the labels.

    Chosen in YAML as the model's class (``configs/addons/distill.yaml``); every option of ViTClassifier applies.

    Args:
        distillation: The teacher and the loss (`Distillation`: ``--model.distillation.teacher <timm name or vitlit
            .ckpt>``, ``kind`` soft or hard, ``alpha``, ``temperature``). The teacher is never saved with the student.
            ``None`` trains on the labels alone; the CLI gives it to a ``validate``/``test``/``predict`` from a
            checkpoint, which never reads the teacher.
        **kwargs: ViTClassifier's arguments.
    """

    def __init__(self, distillation: Distillation | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hparams["distillation"] = None if distillation is None else distillation.hparams()
        self.distillation = distillation
        if distillation is None:
            return
        if self.hparams.input_mean is None or self.hparams.input_std is None:
            raise ConfigError(
                "distillation needs the input normalisation (input_mean, input_std) to feed the teacher; the CLI "
                "links it from the data module."
            )
        hp = self.hparams
        distillation.build(hp.num_classes, hp.class_names, hp.input_mean, hp.input_std)
        if hasattr(self.net, "set_distilled_training"):  # DeiT's distillation token learns from the teacher
            self.net.set_distilled_training(True)

    def training_loss(self, output: Any, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The labels' loss and the teacher's term (`Distillation.loss`)."""
        if self.distillation is None:
            return super().training_loss(output, images, targets)
        teacher = self.distillation.teacher_logits(images)
        return self.distillation.loss(output, teacher, targets, self.criterion)
