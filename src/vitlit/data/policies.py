"""AutoAugment, RandAugment and TrivialAugmentWide on whole uint8 batches, each image with its own operations.

torchvision's policies transform one image at a time on the CPU, far fewer images per second than a small ViT
trains on with one GPU (benchmarks/RESULTS.md has the figures). Here a policy draws, for every image of a batch at
once and on the batch's device, which operation(s) it gets, with which magnitude and sign, exactly as torchvision
draws them for one image (`torchvision.transforms.v2.AutoAugment` with the CIFAR-10 policy, ``RandAugment``,
``TrivialAugmentWide``: the same operation set, magnitude bins and signs), and then applies them batched:

- rotate, shear and translate as one affine resampling (``grid_sample``, nearest, zero fill) with a matrix per
  image, built as torchvision builds it (`torchvision.transforms.v2.functional.affine`), so the pixels agree;
- brightness, colour, contrast, sharpness, posterize, solarize and autocontrast as torchvision's formulas with a
  parameter per image; equalize and invert with torchvision's own kernels, which take batches.

There is no Python loop over images. On the CPU each operation runs on the images that drew it; on an accelerator
each runs on the whole batch with a neutral parameter (or a per-image select) for the others, so that no step
waits for the host to learn how many images drew what. Random numbers come from the device's default generator, whose
state `vitlit.runs.checkpoint_io.RNGStateCheckpoint` saves, so resumed runs draw what the interrupted run would have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TF

#: Every operation the three policies use, in one numbering (a policy's space is a subset).
OPS = (
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
    "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert",
)  # fmt: skip
OP = {name: i for i, name in enumerate(OPS)}
_GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")

#: Magnitude bins of one operation: (number of bins, image height, image width) -> bins, or None for no magnitude.
Bins = Callable[[int, int, int], torch.Tensor | None]


def _linspace(high: float) -> Bins:
    return lambda n, h, w: torch.linspace(0.0, high, n)


def _posterize(levels: int) -> Bins:
    return lambda n, h, w: (8 - (torch.arange(n) / ((n - 1) / levels))).round().int()


def _none(n: int, h: int, w: int) -> None:
    return None


_SOLARIZE: Bins = lambda n, h, w: torch.linspace(1.0, 0.0, n)  # noqa: E731
# The spaces of torchvision.transforms.v2: operation -> (bins, signed). tests/test_policies.py compares them.
_AUTOAUGMENT_SPACE: dict[str, tuple[Bins, bool]] = {
    "ShearX": (_linspace(0.3), True),
    "ShearY": (_linspace(0.3), True),
    "TranslateX": (lambda n, h, w: torch.linspace(0.0, 150.0 / 331.0 * w, n), True),
    "TranslateY": (lambda n, h, w: torch.linspace(0.0, 150.0 / 331.0 * h, n), True),
    "Rotate": (_linspace(30.0), True),
    "Brightness": (_linspace(0.9), True),
    "Color": (_linspace(0.9), True),
    "Contrast": (_linspace(0.9), True),
    "Sharpness": (_linspace(0.9), True),
    "Posterize": (_posterize(4), False),
    "Solarize": (_SOLARIZE, False),
    "AutoContrast": (_none, False),
    "Equalize": (_none, False),
    "Invert": (_none, False),
}
_RANDAUGMENT_SPACE = {"Identity": (_none, False), **{k: v for k, v in _AUTOAUGMENT_SPACE.items() if k != "Invert"}}
_TRIVIAL_SPACE: dict[str, tuple[Bins, bool]] = {
    "Identity": (_none, False),
    "ShearX": (_linspace(0.99), True),
    "ShearY": (_linspace(0.99), True),
    "TranslateX": (_linspace(32.0), True),
    "TranslateY": (_linspace(32.0), True),
    "Rotate": (_linspace(135.0), True),
    "Brightness": (_linspace(0.99), True),
    "Color": (_linspace(0.99), True),
    "Contrast": (_linspace(0.99), True),
    "Sharpness": (_linspace(0.99), True),
    "Posterize": (_posterize(6), False),
    "Solarize": (_SOLARIZE, False),
    "AutoContrast": (_none, False),
    "Equalize": (_none, False),
}
#: AutoAugment's learned CIFAR-10 policy: 25 sub-policies of two (operation, probability, magnitude bin).
CIFAR10_POLICY = (
    (("Invert", 0.1, None), ("Contrast", 0.2, 6)),
    (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
    (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
    (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)),
    (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
    (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
    (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
    (("Equalize", 0.6, None), ("Equalize", 0.5, None)),
    (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
    (("Color", 0.7, 7), ("TranslateX", 0.5, 8)),
    (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
    (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)),
    (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
    (("Solarize", 0.5, 2), ("Invert", 0.0, None)),
    (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.2, None), ("Equalize", 0.6, None)),
    (("Color", 0.9, 9), ("Equalize", 0.6, None)),
    (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)),
    (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
    (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)),
    (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)),
    (("Equalize", 0.8, None), ("Invert", 0.1, None)),
    (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
)


def magnitude_table(space: dict[str, tuple[Bins, bool]], bins: int, height: int, width: int) -> torch.Tensor:
    """Magnitudes as a (len(OPS), bins) table (zeros for operations without one or outside ``space``)."""
    table = torch.zeros(len(OPS), bins, dtype=torch.float64)
    for name, (fn, _) in space.items():
        values = fn(bins, height, width)
        if values is not None:
            table[OP[name]] = values.double()
    return table


# -- the operations, batched, one parameter per image --------------------------------------------------------------


def _per_image(values: torch.Tensor) -> torch.Tensor:
    return values.view(-1, 1, 1, 1)


def _to_uint8(images: torch.Tensor) -> torch.Tensor:
    return images.clamp_(0, 255).to(torch.uint8)  # truncation, as torchvision's float-to-uint8 casts


def _blend(images: torch.Tensor, other: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """The blend of torchvision's colour operations, with a ratio per image: ``images * r + other * (1 - r)``."""
    ratio = _per_image(ratio.float())
    return _to_uint8(images.mul(ratio).add_(other * (1.0 - ratio)))


def _grayscale(images: torch.Tensor) -> torch.Tensor:
    r, g, b = images.unbind(dim=-3)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(-3).floor_()


def brightness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``adjust_brightness`` with a factor per image."""
    return _to_uint8(images.mul(_per_image(factor.float())))


def color(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``adjust_saturation`` with a factor per image (1-channel images are returned as they are, as PIL does)."""
    if images.shape[-3] == 1:
        return images
    return _blend(images, _grayscale(images), factor)


def contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``adjust_contrast`` with a factor per image: blend with the mean of the grayscale image."""
    gray = _grayscale(images) if images.shape[-3] == 3 else images.float()
    return _blend(images, gray.mean(dim=(-3, -2, -1), keepdim=True), factor)


def sharpness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``adjust_sharpness`` with a factor per image: blend the interior with a 3x3 smoothing, borders kept."""
    height, width = images.shape[-2:]
    if height <= 2 or width <= 2:
        return images
    output = images.to(torch.float32, copy=True)
    # torchvision's 3x3 kernel (1s around a 5, over 13) as a sum of shifted views: a depthwise convolution of three
    # channels is several times slower on a CPU. The sums' order differs, so a rounding may differ by one level.
    blurred = output[..., 1:-1, 1:-1] * 4.0
    for dy in range(3):
        for dx in range(3):
            blurred += output[..., dy : dy + height - 2, dx : dx + width - 2]
    blurred = blurred.div_(13.0).round_()
    view = output[..., 1:-1, 1:-1]
    view.add_(blurred.sub_(view).mul_(_per_image(1.0 - factor.float())))
    return _to_uint8(output)


def posterize(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """``posterize`` with a bit count per image (8 keeps the image)."""
    mask = (255 << (8 - bits.long())) & 255
    return images & _per_image(mask.to(torch.uint8))


def solarize(images: torch.Tensor, fraction: torch.Tensor) -> torch.Tensor:
    """``solarize`` at ``255 * fraction`` per image (torchvision's threshold for uint8; above 1 changes nothing)."""
    # uint8 >= t  <=>  uint8 >= ceil(t): compared in uint8, not after promoting every pixel to float.
    threshold = torch.ceil(255.0 * fraction.float())
    active = _per_image(threshold <= 255)
    threshold = _per_image(threshold.clamp(0, 255).to(torch.uint8))
    return torch.where((images >= threshold) & active, images.bitwise_not(), images)


def autocontrast(images: torch.Tensor) -> torch.Tensor:
    """``autocontrast``: stretch each channel of each image to 0..255, by torchvision's formula.

    torchvision's own kernel indexes with a boolean mask, which makes the host wait for the GPU; this one selects.
    """
    values = images.float()
    low = values.amin(dim=(-2, -1), keepdim=True)
    high = values.amax(dim=(-2, -1), keepdim=True)
    flat = high == low
    inv_scale = torch.where(flat, 1.0, (high - low).mul_(1.0 / 255))
    low = torch.where(flat, 0.0, low)
    return values.sub_(low).div_(inv_scale).clamp_(0, 255).to(torch.uint8)


def affine_matrices(op: torch.Tensor, magnitude: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The inverse affine matrix of each image's geometric operation, as torchvision computes it, shape (B, 2, 3).

    ``ShearX``/``ShearY`` shear by ``atan(magnitude)`` about the top-left corner, ``TranslateX``/``TranslateY`` move by
    ``int(magnitude)`` pixels, ``Rotate`` turns by ``magnitude`` degrees about the centre; any other operation gets
    the identity. The formula is `torchvision.transforms.v2.functional`'s ``_get_inverse_affine_matrix``, per image.
    """
    dtype = torch.float64 if op.device.type in ("cpu", "cuda") else torch.float32
    m = magnitude.to(dtype)
    zero = torch.zeros_like(m)
    shear_deg = torch.rad2deg(torch.atan(m))
    shear_x = torch.where(op == OP["ShearX"], shear_deg, zero)
    shear_y = torch.where(op == OP["ShearY"], shear_deg, zero)
    tx = torch.where(op == OP["TranslateX"], torch.trunc(m), zero)
    ty = torch.where(op == OP["TranslateY"], torch.trunc(m), zero)
    angle = torch.where(op == OP["Rotate"], -m, zero)  # rotate() hands the matrix the negated angle
    sheared = (op == OP["ShearX"]) | (op == OP["ShearY"])
    cx = torch.where(sheared, torch.full_like(m, -width * 0.5), zero)  # center=[0, 0]: the top-left corner
    cy = torch.where(sheared, torch.full_like(m, -height * 0.5), zero)
    rot, sx, sy = torch.deg2rad(angle), torch.deg2rad(shear_x), torch.deg2rad(shear_y)
    a = torch.cos(rot - sy) / torch.cos(sy)
    b = -(a * torch.tan(sx) + torch.sin(rot))
    c = torch.sin(rot - sy) / torch.cos(sy)
    d = torch.cos(rot) - c * torch.tan(sx)
    m00, m01, m10, m11 = d, -b, -c, a
    m02 = cx - m00 * (cx + tx) - m01 * (cy + ty)
    m12 = cy - m10 * (cx + tx) - m11 * (cy + ty)
    return torch.stack([m00, m01, m02, m10, m11, m12], dim=-1).view(-1, 2, 3)


def affine(images: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """Resample each image with its own inverse affine matrix: nearest neighbour, zero outside (torchvision's grid)."""
    n, _, h, w = images.shape
    theta = matrices.to(torch.float32)
    xs = torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, steps=w, device=images.device)
    ys = torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, steps=h, device=images.device)
    base = torch.stack([xs.expand(h, w), ys[:, None].expand(h, w), torch.ones(h, w, device=images.device)], dim=-1)
    rescaled = theta.transpose(1, 2).clone()
    rescaled[..., 0] /= 0.5 * w
    rescaled[..., 1] /= 0.5 * h
    grid = base.view(1, h * w, 3).expand(n, -1, -1).bmm(rescaled).view(n, h, w, 2)
    sampled = F.grid_sample(images.float(), grid, mode="nearest", padding_mode="zeros", align_corners=False)
    return sampled.round_().to(torch.uint8)


def _geometric(images: torch.Tensor, op: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    return affine(images, affine_matrices(op, magnitude, images.shape[-2], images.shape[-1]))


#: Operation -> batched kernel of (images, per-image magnitude); the geometric ones are handled together.
_KERNELS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "Brightness": lambda x, m: brightness(x, 1.0 + m),
    "Color": lambda x, m: color(x, 1.0 + m),
    "Contrast": lambda x, m: contrast(x, 1.0 + m),
    "Sharpness": lambda x, m: sharpness(x, 1.0 + m),
    "Posterize": lambda x, m: posterize(x, m),
    "Solarize": lambda x, m: solarize(x, m),
    "AutoContrast": lambda x, m: autocontrast(x),
    "Equalize": lambda x, m: TF.equalize_image(x),
    "Invert": lambda x, m: TF.invert_image(x),
}
#: Magnitudes that leave an image as it is, for the operations applied to a whole batch on an accelerator.
_NEUTRAL = {"Brightness": 0.0, "Color": 0.0, "Contrast": 0.0, "Sharpness": 0.0, "Posterize": 8.0, "Solarize": 2.0}


def apply_operations(
    images: torch.Tensor, op: torch.Tensor, magnitude: torch.Tensor, gather: bool | None = None
) -> torch.Tensor:
    """Apply operation ``op[i]`` with signed magnitude ``magnitude[i]`` to image ``i`` of a uint8 batch.

    Args:
        images: (B, C, H, W) uint8, C 1 or 3.
        op: (B,) indices into `OPS`.
        magnitude: (B,) signed magnitudes, as torchvision hands them to its operations (degrees, pixels, factors
            minus one, bits, threshold fractions).
        gather: Run each operation on the images that drew it only (``True``: the CPU default, where asking which
            images those are costs nothing), or on the whole batch with neutral parameters for the others
            (``False``: the accelerator default, where the question would make the host wait). Same result.
    """
    if gather if gather is not None else images.device.type == "cpu":
        # Where asking which images drew what costs nothing (the CPU): sort the batch by operation, run each
        # operation on its own slice, and put the images back in place: one gather and one scatter in all.
        order = torch.argsort(op, stable=True)
        counts = torch.bincount(op, minlength=len(OPS)).tolist()
        ops, magnitudes = op[order], magnitude[order]
        sorted_images = images.index_select(0, order)  # index_select: several times faster than [order] on a CPU
        pieces, start = [], 0
        for name, count in zip(OPS, counts, strict=True):
            part, start = slice(start, start + count), start + count
            if not count:
                continue
            if name in _GEOMETRIC:
                pieces.append(_geometric(sorted_images[part], ops[part], magnitudes[part]))
            elif name in _KERNELS:
                pieces.append(_KERNELS[name](sorted_images[part], magnitudes[part]))
            else:  # Identity
                pieces.append(sorted_images[part])
        return torch.cat(pieces).index_select(0, torch.argsort(order))  # back to the batch's order
    geometric = torch.zeros_like(op, dtype=torch.bool)
    for name in _GEOMETRIC:
        geometric |= op == OP[name]
    # On an accelerator: every operation on the whole batch, neutral (or not selected) for the others: no sync.
    out = torch.where(_per_image(geometric), _geometric(images, op, magnitude), images)
    for name, kernel in _KERNELS.items():
        chosen = op == OP[name]
        if name in _NEUTRAL:
            out = kernel(out, torch.where(chosen, magnitude, torch.full_like(magnitude, _NEUTRAL[name])))
        else:
            out = torch.where(_per_image(chosen), kernel(out, magnitude), out)
    return out


# -- the policies ----------------------------------------------------------------------------------------------------

PolicyName = Literal["autoaugment", "randaugment", "trivialaugment"]


class BatchPolicy:
    """A torchvision augmentation policy drawn and applied per image on whole uint8 batches.

    Args:
        name: ``autoaugment`` (the CIFAR-10 policy), ``randaugment`` or ``trivialaugment`` (TrivialAugmentWide).
        num_ops: RandAugment: operations per image, applied one after the other.
        magnitude: RandAugment: the magnitude bin of every operation (0 to 30).
    """

    def __init__(self, name: PolicyName, num_ops: int = 2, magnitude: int = 9) -> None:
        self.name = name
        self.num_ops = num_ops
        self.magnitude = magnitude
        space = {"autoaugment": _AUTOAUGMENT_SPACE, "randaugment": _RANDAUGMENT_SPACE}.get(name, _TRIVIAL_SPACE)
        self.bins = {"autoaugment": 10, "randaugment": 31, "trivialaugment": 31}[name]
        self.space = space
        self.space_ops = torch.tensor([OP[k] for k in space])
        self.signed = torch.tensor([name in space and space[name][1] for name in OPS])
        if name == "autoaugment":
            self.sub_ops = torch.tensor([[OP[op] for op, _, _ in sub] for sub in CIFAR10_POLICY])
            self.sub_probs = torch.tensor([[p for _, p, _ in sub] for sub in CIFAR10_POLICY])
            self.sub_bins = torch.tensor([[b or 0 for _, _, b in sub] for sub in CIFAR10_POLICY])
        self._tables: dict[tuple, torch.Tensor] = {}
        self._on_device: dict[torch.device, dict[str, torch.Tensor]] = {}

    def _table(self, height: int, width: int, device: torch.device) -> torch.Tensor:
        key = (height, width, device)
        if key not in self._tables:
            self._tables[key] = magnitude_table(self.space, self.bins, height, width).to(device)
        return self._tables[key]

    def _constants(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The policy's index tables on ``device``, copied once (a copy per batch would wait for the GPU's queue)."""
        if device not in self._on_device:
            names = ("signed", "space_ops", "sub_ops", "sub_probs", "sub_bins")
            self._on_device[device] = {n: getattr(self, n).to(device) for n in names if hasattr(self, n)}
        return self._on_device[device]

    def draw(self, n: int, height: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw operations and signed magnitudes for ``n`` images: two (rounds, n) tensors; rounds apply in order."""
        table = self._table(height, width, device)
        const = self._constants(device)
        signed = const["signed"]
        if self.name == "autoaugment":
            sub = torch.randint(len(CIFAR10_POLICY), (n,), device=device)
            rounds = []
            for j in range(2):
                apply = torch.rand(n, device=device) <= const["sub_probs"][sub, j]
                op = torch.where(apply, const["sub_ops"][sub, j], OP["Identity"])
                magnitude = table[op, const["sub_bins"][sub, j]]
                negative = signed[op] & (torch.randint(2, (n,), device=device) == 0)
                rounds.append((op, torch.where(negative, -magnitude, magnitude)))
        else:
            rounds = []
            for _ in range(self.num_ops if self.name == "randaugment" else 1):
                op = const["space_ops"][torch.randint(len(self.space_ops), (n,), device=device)]
                if self.name == "randaugment":
                    magnitude = table[op, self.magnitude]
                else:
                    magnitude = table[op, torch.randint(self.bins, (n,), device=device)]
                negative = signed[op] & (torch.rand(n, device=device) <= 0.5)
                rounds.append((op, torch.where(negative, -magnitude, magnitude)))
        ops, magnitudes = zip(*rounds, strict=True)
        return torch.stack(ops), torch.stack(magnitudes)

    def __call__(self, images: torch.Tensor, among: int | None = None, share: slice = slice(None)) -> torch.Tensor:
        """Augment a (B, C, H, W) uint8 batch, each image with its own draw.

        Args:
            images: The batch.
            among: Draw for a batch of this many images, of which ``images`` are those at ``share`` (one DDP process's
                part of a step, `vitlit.data.base.ImageClassificationDataModule.on_after_batch_transfer`); ``None``:
                for ``images`` alone.
            share: See ``among``.
        """
        b = len(images)
        ops, magnitudes = self.draw(among or b, images.shape[-2], images.shape[-1], images.device)
        ops, magnitudes = ops[:, share], magnitudes[:, share]
        for op, magnitude in zip(ops, magnitudes, strict=True):
            images = apply_operations(images, op, magnitude)
        return images

    def __repr__(self) -> str:
        extra = f", num_ops={self.num_ops}, magnitude={self.magnitude}" if self.name == "randaugment" else ""
        return f"BatchPolicy({self.name!r}{extra})"
