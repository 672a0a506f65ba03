"""A trained classifier read back from its checkpoint: the timm network and the card of what it expects.

Export, serve and distillation's teacher read a checkpoint with `load_classifier`; the CLI's own runs rebuild the
model from their config instead. A checkpoint is data from wherever it came from: its claims (model name, sizes) are
checked before anything of their size is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import timm
import torch
from torch import nn

from vitlit.checkpoints import check_weights, read_checkpoint
from vitlit.data.images import PIL_MODES, ImageFiles
from vitlit.data.pipeline import DeviceTransform, ToStoredImage, resized_side
from vitlit.errors import CheckFailed, ConfigError


@dataclass
class ModelCard:
    """What a program needs to run an exported classifier: the input it expects and the names of its outputs."""

    model_name: str
    class_names: list[str]
    img_size: int
    in_chans: int
    mean: list[float]
    std: list[float]
    crop_pct: float = 1.0
    interpolation: str = "bilinear"

    @property
    def stored_side(self) -> int:
        """The side an image's shorter side is resized to before the centre crop, ``floor(img_size / crop_pct)``.

        Also the side at which an image's pixels are bounded (`vitlit.data.images.MAX_PIXELS`), as the
        evaluation split of training bounds them.
        """
        return resized_side(self.img_size, self.crop_pct)

    def preprocess(self) -> Any:
        """The evaluation pipeline of training for one image: resize (shorter side), centre crop, normalise.

        In the same two steps as evaluation in training, so the pixels are the same: stored as an evaluation split
        is (`vitlit.data.base.ImageClassificationDataModule.stored_size`), then cropped as its batches are.
        """
        decode = ToStoredImage(self.in_chans, self.stored_side, self.interpolation)
        crop = DeviceTransform(
            self.img_size, self.mean, self.std, crop_pct=self.crop_pct, interpolation=self.interpolation
        )
        return lambda image: crop(decode(image)[None])[0]

    def batch(self, files: Sequence[Path]) -> torch.Tensor:
        """Image files, decoded with ``in_chans`` channels and prepared by `preprocess`, as one batch."""
        mode = PIL_MODES.get(self.in_chans, "RGB")
        dataset = ImageFiles([(str(p), -1) for p in files], self.class_names, mode, self.stored_side)
        transform = self.preprocess()
        return torch.stack([transform(dataset[i][0]) for i in range(len(dataset))])


#: How an exported model's input is made from an image file, for code of one's own (the sidecar and ONNX metadata
#: carry it): what `ModelCard.preprocess` does. PIL's own bilinear resize differs enough to change some top-1 classes.
PREPROCESS = (
    "turn the image upright by its EXIF orientation (PIL.ImageOps.exif_transpose); decode to uint8 with in_chans "
    "channels (1: L, 3: RGB, 4: RGBA): 16- and 32-bit integer grey images scaled "
    "(value * 255 / 65535, clipped to 0-65535 first, rounded; PIL's convert would clip them to white), other modes "
    "(palette, CMYK, grey with alpha) through PIL's convert; as a uint8 CHW tensor, resize the shorter side to "
    "s = floor(img_size / crop_pct) with the given interpolation and antialiasing (torchvision.transforms.v2.Resize("
    "s, interpolation, antialias=True) on the tensor, not on the PIL image); centre-crop to s x s, then to img_size x "
    "img_size; divide by 255; subtract mean and divide by std per channel; float32 NCHW, input 'images'"
)


#: Bounds on the hyperparameters read from a checkpoint: a crafted file must not make vitlit allocate hundreds of GB.
#: (ImageNet-21k has 21,843 classes; a ViT at 4,096 px with 16 px patches has 65,536 tokens.)
LIMITS = {"num_classes": 100_000, "img_size": 4096, "in_chans": 64, "patch_size": 4096}


def checked_hyperparameters(hp: dict[str, Any], path: Path) -> dict[str, Any]:
    """The architecture a checkpoint claims, checked as strictly as the same values given as flags.

    A checkpoint is data from wherever it came from: its ``model_name`` must be a model timm has built in (never a
    ``hf-hub:`` name, which would reach the network), and its sizes must be positive whole numbers within `LIMITS`.

    Raises:
        ConfigError: Naming the first value that is out of bounds.
    """
    if "model_name" not in hp:
        raise ConfigError(
            f"{path} is not a checkpoint of vitlit's ViTClassifier (no model_name in its hyperparameters)."
        )
    name = hp["model_name"]
    if not isinstance(name, str) or ":" in name or not timm.is_model(name):
        raise ConfigError(
            f"{path} names the model {name!r}, which is not one of timm's built-in models (vitlit never writes such a "
            f"checkpoint; hub names are not followed); use a checkpoint written by vitlit fit."
        )
    for key, high in LIMITS.items():
        value = hp.get(key)
        if value is None and key in ("patch_size", "in_chans"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise ConfigError(f"{path} has {key}={value!r}; vitlit reads checkpoints with {key} from 1 to {high:,}.")
    names = hp.get("class_names")
    if names is not None and (not isinstance(names, list) or len(names) != hp["num_classes"]):
        raise ConfigError(f"{path} has class_names that are not a list of num_classes={hp['num_classes']} names.")
    for key in ("input_mean", "input_std"):
        values = hp.get(key)
        if values is None:
            raise ConfigError(
                f"{path} does not record the normalisation it was trained with (written before vitlit recorded it); "
                f"train or fine-tune once more with this version of vitlit."
            )
        if not isinstance(values, list) or len(values) != hp.get("in_chans", 3):
            raise ConfigError(f"{path} has {key}={values!r}, not one number per input channel.")
        # Every input is divided by the std: a zero, a NaN or a word there gives NaN logits or a traceback later.
        if not all(_finite(v) for v in values) or (key == "input_std" and not all(v > 0 for v in values)):
            kind = "positive finite numbers" if key == "input_std" else "finite numbers"
            raise ConfigError(f"{path} has {key}={values!r}; vitlit reads checkpoints whose {key} are {kind}, one per "
                              f"input channel; use a checkpoint written by vitlit fit.")  # fmt: skip
    # The evaluation geometry exports and servers resize by: floor(img_size / crop_pct) must be a size.
    crop_pct, interpolation = hp.get("input_crop_pct", 1.0), hp.get("input_interpolation", "bilinear")
    side, number = LIMITS["img_size"], isinstance(crop_pct, int | float) and not isinstance(crop_pct, bool)
    if not number or not 0 < crop_pct <= 1 or resized_side(hp["img_size"], crop_pct) > side:
        raise ConfigError(f"{path} has input_crop_pct={crop_pct!r}; vitlit reads checkpoints with it in (0, 1] and "
                          f"floor(img_size / input_crop_pct) at most {side:,}.")  # fmt: skip
    if interpolation not in ("bilinear", "bicubic"):
        raise ConfigError(f"{path} has input_interpolation={interpolation!r}, not bilinear or bicubic.")
    return hp


def _finite(value: Any) -> bool:
    """Whether ``value`` is a finite real number (an int or a float, not a bool) that a float holds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond any float
        return False


def load_classifier(ckpt_path: str | Path, weights_only: bool = True) -> tuple[nn.Module, ModelCard]:
    """The trained timm network of a vitlit checkpoint (in eval mode) and its model card.

    The network is first built on the meta device (no memory) and the shapes of its weights compared with the
    file's, so that no claim of the checkpoint makes vitlit allocate more than the file itself holds.

    Raises:
        ConfigError: For a missing, unreadable or damaged file, a checkpoint vitlit did not write, or one whose
            hyperparameters are out of bounds or do not match its weights.
    """
    path = Path(ckpt_path).expanduser()
    checkpoint = read_checkpoint(path, weights_only)
    hp = checked_hyperparameters(checkpoint.get("hyper_parameters") or {}, path)
    kwargs = {k: hp[k] for k in ("num_classes", "img_size", "in_chans", "patch_size") if hp.get(k) is not None}
    state = {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    try:
        with torch.device("meta"):
            probe = timm.create_model(hp["model_name"], pretrained=False, **kwargs)
    except Exception as err:  # timm's own checks of the geometry (TypeError, AssertionError, ValueError)
        raise ConfigError(f"{path}: {hp['model_name']} cannot be built with {kwargs} ({err}).") from None
    check_weights(state, probe.state_dict(), path)  # before anything the size of the claims is allocated
    net = timm.create_model(hp["model_name"], pretrained=False, **kwargs)
    net.load_state_dict(state)
    broken = next((k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()), None)
    if broken is not None:  # every answer would be NaN (a server's "probability": null, an int8 copy agreeing 0%)
        raise CheckFailed(f"checkpoint {path} has weights that are not finite numbers (NaN or infinity, first in "
                          f"{broken}); use an earlier checkpoint of the run (its checkpoints/ folder).")  # fmt: skip
    card = ModelCard(
        model_name=hp["model_name"],
        class_names=[str(c) for c in hp.get("class_names") or range(hp["num_classes"])],
        img_size=int(hp["img_size"]),
        in_chans=int(hp.get("in_chans", 3)),
        mean=[float(v) for v in hp["input_mean"]],
        std=[float(v) for v in hp["input_std"]],
        # Checkpoints written before these were recorded were evaluated so (vitlit's former fixed geometry).
        crop_pct=float(hp.get("input_crop_pct", 1.0)),
        interpolation=str(hp.get("input_interpolation", "bilinear")),
    )
    return net.eval(), card
