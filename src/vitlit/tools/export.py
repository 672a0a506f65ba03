"""``vitlit export``: a checkpoint as a file other programs run, verified right after it is written.

    python -m vitlit export --ckpt_path <run>/checkpoints/last.ckpt --format onnx --output vit.onnx

Formats: ``onnx`` (opset 17, dynamic batch), checked in ONNX Runtime against PyTorch's logits; ``int8``, the ONNX
model with its matrix products quantized to int8 by ONNX Runtime's dynamic quantization, for CPUs; ``pt2``, a
``torch.export`` program (``torch.export.load(path).module()``), PyTorch's successor to TorchScript. int8 uses
ONNX Runtime's quantizer rather than ``torch.ao.quantization.quantize_dynamic``, which PyTorch has deprecated (in
favour of torchao) and whose result only PyTorch can run. Each file gets a sidecar ``<file>.json`` (and ONNX files
the same in their metadata): class names, image size, channels and normalisation, so nothing else is needed to run
it. The checkpoint is read with ``weights_only`` loading, as everywhere in vitlit.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import timm
import torch
from torch import nn

from vitlit.data.images import PIL_MODES, ImageFiles, image_files, image_problem
from vitlit.data.transforms import eval_transform
from vitlit.errors import CheckFailed, ConfigError
from vitlit.runs.atomic import replacing, write_atomically
from vitlit.runs.resume import read_checkpoint, require_checkpoint_file

Format = Literal["onnx", "int8", "pt2"]
#: Largest difference of a logit between PyTorch and the exported fp32 model that still counts as the same model.
TOLERANCE = 1e-3


@dataclass
class ModelCard:
    """What a program needs to run an exported classifier: the input it expects and the names of its outputs."""

    model_name: str
    class_names: list[str]
    img_size: int
    in_chans: int
    mean: list[float]
    std: list[float]

    def preprocess(self) -> Any:
        """The eval transform of training: resize (shorter side), centre crop, scale to [0, 1], normalise."""
        return eval_transform(self.img_size, self.mean, self.std, resize=True)

    def batch(self, files: Sequence[Path]) -> torch.Tensor:
        """Image files, decoded with ``in_chans`` channels and prepared by `preprocess`, as one batch."""
        mode = PIL_MODES.get(self.in_chans, "RGB")
        dataset = ImageFiles([(str(p), -1) for p in files], self.class_names, mode, self.img_size)
        transform = self.preprocess()
        return torch.stack([transform(dataset[i][0]) for i in range(len(dataset))])


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
    return hp


def load_classifier(ckpt_path: str | Path, weights_only: bool = True) -> tuple[nn.Module, ModelCard]:
    """The trained timm network of a vitlit checkpoint (in eval mode) and its model card.

    The network is first built on the meta device (no memory) and the shapes of its weights compared with the
    file's, so that no claim of the checkpoint makes vitlit allocate more than the file itself holds.

    Raises:
        ConfigError: For a missing, unreadable or damaged file, a checkpoint vitlit did not write, or one whose
            hyperparameters are out of bounds or do not match its weights.
    """
    path = require_checkpoint_file(ckpt_path)
    checkpoint = read_checkpoint(path, weights_only)
    hp = checked_hyperparameters(checkpoint.get("hyper_parameters") or {}, path)
    kwargs = {k: hp[k] for k in ("num_classes", "img_size", "in_chans", "patch_size") if hp.get(k) is not None}
    state = {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    try:
        with torch.device("meta"):
            probe = timm.create_model(hp["model_name"], pretrained=False, **kwargs)
    except Exception as err:  # timm's own checks of the geometry (TypeError, AssertionError, ValueError)
        raise ConfigError(f"{path}: {hp['model_name']} cannot be built with {kwargs} ({err}).") from None
    expected = {k: tuple(v.shape) for k, v in probe.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
    if expected != found:
        differ = sorted(set(expected) ^ set(found)) or [k for k in expected if expected[k] != found[k]]
        raise ConfigError(
            f"{path}: its weights do not fit {hp['model_name']} with {kwargs} (first difference: {differ[0]}); use "
            f"a checkpoint written by vitlit fit."
        )
    net = timm.create_model(hp["model_name"], pretrained=False, **kwargs)
    net.load_state_dict(state)
    card = ModelCard(
        model_name=hp["model_name"],
        class_names=[str(c) for c in hp.get("class_names") or range(hp["num_classes"])],
        img_size=int(hp["img_size"]),
        in_chans=int(hp.get("in_chans", 3)),
        mean=[float(v) for v in hp["input_mean"]],
        std=[float(v) for v in hp["input_std"]],
    )
    return net.eval(), card


def sample_batch(card: ModelCard, images: Path | None, n: int = 8) -> torch.Tensor:
    """A batch to verify the export with: up to ``n`` images of the folder ``images``, else random pixels.

    Either way the batch goes through the model card's transform, so its values are those real inputs have.
    """
    if images is None:
        pixels = torch.randint(0, 256, (n, card.in_chans, card.img_size, card.img_size), dtype=torch.uint8)
        transform = card.preprocess()
        return torch.stack([transform(p) for p in pixels])
    if not Path(images).is_dir():
        raise ConfigError(f"images={images} is not a folder; give a folder of images to check the export with.")
    # Decoded in full, so that a file damaged inside is left out too; checked only until n readable ones are found.
    readable = (p for p in image_files(Path(images)) if image_problem(p, card.img_size, decode=True) is None)
    files = list(itertools.islice(readable, n))
    if not files:
        first = next(iter(image_files(Path(images))), None)
        why = f" ({first}: {image_problem(first, card.img_size, decode=True)})" if first is not None else ""
        raise ConfigError(f"images={images} holds no readable image{why}.")
    return card.batch(files)


def export_onnx(net: nn.Module, batch: torch.Tensor, output: Path, opset: int = 17) -> None:
    """Write ``net`` as ONNX with a dynamic batch dimension (input ``images``, output ``logits``)."""
    # The TorchScript-based exporter: it needs no extra package (the dynamo one wants onnxscript) and handles
    # timm's ViTs at opset 17 with a dynamic batch dimension. Its tracer warnings (Python conditions on shapes in
    # timm's code, fixed for the traced size, and true for every batch size) and deprecation notes are not the
    # user's to act on; the export is checked numerically instead.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (batch,), str(output), opset_version=opset, input_names=["images"], output_names=["logits"],
            dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False,
        )  # fmt: skip


def quantize_int8(fp32: Path, output: Path) -> None:
    """ONNX Runtime's dynamic quantization: int8 weights for MatMul/Gemm, activations quantized per batch."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # ONNX Runtime logs a hint to run its pre-processing (shape inference, for static quantization); the dynamic
    # quantization of MatMul/Gemm weights used here does not need it.
    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(str(fp32), str(output), weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)


def _with_metadata(path: Path, card: ModelCard) -> None:
    import onnx

    model = onnx.load(str(path))
    for key, value in asdict(card).items():
        model.metadata_props.add(key=key, value=json.dumps(value))
    onnx.save(model, str(path))


def _run_onnx(path: Path, batch: torch.Tensor) -> torch.Tensor:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {"images": batch.numpy()})[0])


def check_output(output: Path, ckpt_path: Path, overwrite: bool) -> None:
    """Refuse an output that would destroy a file or cannot be written, before anything is read or exported.

    Raises:
        ConfigError: For an output (or its ``.json`` sidecar) that is the checkpoint itself (also through a link),
            a folder, an existing file without ``overwrite``, or a path in a missing or read-only folder.
    """
    sidecar = Path(f"{output}.json")
    for path in (output, sidecar):
        if _same_file(path, ckpt_path):
            raise ConfigError(f"output={path} is the checkpoint being exported; give another file name, e.g. vit.onnx.")
        if path.is_dir():
            raise ConfigError(f"output={path} is a folder; give a file name inside it, e.g. {path / 'vit.onnx'}.")
        if path.exists() and not path.is_file():
            raise ConfigError(f"output={path} exists and is not a regular file (a device, a pipe); choose a file name.")
    folder = output.parent
    if not folder.is_dir():
        raise ConfigError(f"output={output}: the folder {folder} does not exist; create it or choose another.")
    if not os.access(folder, os.W_OK | os.X_OK) or not _can_create_in(folder):
        raise ConfigError(f"output={output}: the folder {folder} is not writable; choose a folder you can write to.")
    existing = [str(p) for p in (output, sidecar) if p.exists() or p.is_symlink()]
    if existing and not overwrite:
        raise ConfigError(f"{' and '.join(existing)} already exist(s); pass --overwrite true to replace, or choose "
                          f"another --output.")  # fmt: skip


def _can_create_in(folder: Path) -> bool:
    """Whether a file can be created in ``folder`` (the mount may be read-only, or a kernel's, whatever its mode)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".vitlit-probe.", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path after links, or hard links of one inode."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist: they cannot be the same file
        return False


def check_opset(opset: int) -> None:
    """Refuse an opset this PyTorch's ONNX exporter cannot write, by exporting a one-layer model to memory."""
    if opset < 17:
        raise ConfigError(f"opset={opset} is below 17, the first with a LayerNormalization operator; use 17 or newer.")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(nn.LayerNorm(2), (torch.zeros(1, 2),), io.BytesIO(), opset_version=opset, dynamo=False)
    except Exception as err:  # the exporter says "Unsupported onnx_opset_version" in a RuntimeError or ValueError
        raise ConfigError(
            f"opset={opset} is not one this PyTorch can export ({str(err).splitlines()[0][:80]}); use 17, the default."
        ) from None


def export(
    ckpt_path: Path,
    output: Path,
    format: Format = "onnx",
    images: Path | None = None,
    opset: int = 17,
    overwrite: bool = False,
    weights_only: bool = True,
) -> dict[str, Any]:
    """Export a checkpoint and check the result against PyTorch on a batch; print and return the figures.

    The file (and its sidecar) is written under a temporary name beside ``output`` and takes its name only once the
    check passed, so an existing file is replaced whole or not at all, and a failed export leaves nothing behind.

    Args:
        ckpt_path: A checkpoint written by ``vitlit fit`` (``<run>/checkpoints/*.ckpt``).
        output: The file to write (``.onnx`` for onnx and int8, ``.pt2`` for pt2); ``<output>.json`` is written
            beside it with the class names and the input transform. Never the checkpoint itself.
        format: ``onnx`` (fp32), ``int8`` (ONNX with int8 matrix products, for CPUs) or ``pt2`` (torch.export).
        images: A folder of images to check the export on; without it, a batch of random pixels.
        opset: ONNX opset (17 or newer: LayerNorm is one operator from 17 on).
        overwrite: Replace ``output`` and its sidecar if they exist (otherwise an existing file is refused).
        weights_only: ``false`` reads checkpoints that hold Python objects; only for files you trust.

    Raises:
        ConfigError: For a bad checkpoint, output, opset or images folder.
        CheckFailed: When the exported fp32 model disagrees with PyTorch by more than `TOLERANCE` (nothing is
            written then).
    """
    output = Path(output).expanduser()
    check_output(output, Path(ckpt_path).expanduser(), overwrite)
    if format != "pt2":
        check_opset(opset)
    net, card = load_classifier(ckpt_path, weights_only)
    batch = sample_batch(card, images)
    with torch.no_grad():
        expected = net(batch)
    report: dict[str, Any] = {"format": format, "output": str(output), "batch": len(batch)}
    with replacing(output) as staged:
        if format == "pt2":
            # Traced on two images at least: torch.export specialises a batch dimension of 1 to a constant.
            example = batch if len(batch) > 1 else batch.repeat(2, 1, 1, 1)
            program = torch.export.export(net, (example,), dynamic_shapes=({0: torch.export.Dim("batch", min=1)},))
            torch.export.save(program, str(staged))
            with torch.no_grad():
                got = torch.export.load(str(staged)).module()(batch)
        elif format == "onnx":
            export_onnx(net, batch, staged, opset)
            _with_metadata(staged, card)
            got = _run_onnx(staged, batch)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                fp32 = Path(tmp) / "fp32.onnx"
                export_onnx(net, batch, fp32, opset)
                quantize_int8(fp32, staged)
                report["fp32_bytes"] = fp32.stat().st_size
            _with_metadata(staged, card)
            got = _run_onnx(staged, batch)
        difference = float((got - expected).abs().max())
        agreement = float((got.argmax(1) == expected.argmax(1)).float().mean())
        report.update(max_abs_diff=difference, top1_agreement=agreement, bytes=staged.stat().st_size)
        if format != "int8" and difference > TOLERANCE:
            raise CheckFailed(
                f"the exported model's logits differ from PyTorch's by {difference:.2e} (more than {TOLERANCE:g}); "
                f"nothing was written to {output}; report it with the model name {card.model_name}"
            )
        write_atomically(Path(f"{output}.json"), json.dumps({**asdict(card), "export": report}, indent=2) + "\n")
    print(
        f"vitlit: wrote {output} ({report['bytes'] / 2**20:.1f} MiB, {format}); against PyTorch on {len(batch)} "
        f"images: max |logit difference| {difference:.2e}, same top-1 class for {agreement:.0%}"
    )
    return report
