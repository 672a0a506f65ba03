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

import itertools
import json
import logging
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import timm
import torch
from torch import nn

from vitlit.checkpoint_io import read_checkpoint, require_checkpoint_file
from vitlit.data.device import PIL_MODES
from vitlit.data.images import ImageFiles, image_files, image_problem
from vitlit.data.transforms import eval_transform
from vitlit.errors import CheckFailed, ConfigError

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
        dataset = ImageFiles([(str(p), -1) for p in files], self.class_names, PIL_MODES.get(self.in_chans, "RGB"))
        transform = self.preprocess()
        return torch.stack([transform(dataset[i][0]) for i in range(len(dataset))])


def load_classifier(ckpt_path: str | Path, weights_only: bool = True) -> tuple[nn.Module, ModelCard]:
    """The trained timm network of a vitlit checkpoint (in eval mode) and its model card.

    Raises:
        ConfigError: For a missing or unreadable file, or a checkpoint vitlit did not write.
    """
    path = require_checkpoint_file(ckpt_path)
    checkpoint = read_checkpoint(path, weights_only)
    hp = checkpoint.get("hyper_parameters") or {}
    if "model_name" not in hp or "state_dict" not in checkpoint:
        raise ConfigError(
            f"{path} is not a checkpoint of vitlit's ViTClassifier (no model_name in its hyperparameters)."
        )
    if hp.get("input_mean") is None or hp.get("input_std") is None:
        raise ConfigError(
            f"{path} does not record the normalisation it was trained with (written before vitlit recorded it); "
            f"train or fine-tune once more with this version of vitlit."
        )
    kwargs = {k: hp[k] for k in ("num_classes", "img_size", "in_chans", "patch_size") if hp.get(k) is not None}
    net = timm.create_model(hp["model_name"], pretrained=False, **kwargs)
    state = {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    try:
        net.load_state_dict(state)
    except RuntimeError as err:
        raise ConfigError(f"{path}: its weights do not fit {hp['model_name']} ({str(err).splitlines()[0]}).") from None
    card = ModelCard(
        model_name=hp["model_name"],
        class_names=list(hp.get("class_names") or [str(i) for i in range(hp["num_classes"])]),
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
    readable = (p for p in image_files(Path(images)) if image_problem(p) is None)
    files = list(itertools.islice(readable, n))  # checks files only until n readable ones are found
    if not files:
        raise ConfigError(f"images={images} holds no readable image.")
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


def export(
    ckpt_path: Path,
    output: Path,
    format: Format = "onnx",
    images: Path | None = None,
    opset: int = 17,
    weights_only: bool = True,
) -> dict[str, Any]:
    """Export a checkpoint and check the result against PyTorch on a batch; print and return the figures.

    Args:
        ckpt_path: A checkpoint written by ``vitlit fit`` (``<run>/checkpoints/*.ckpt``).
        output: The file to write (``.onnx`` for onnx and int8, ``.pt2`` for pt2); ``<output>.json`` is written
            beside it with the class names and the input transform.
        format: ``onnx`` (fp32), ``int8`` (ONNX with int8 matrix products, for CPUs) or ``pt2`` (torch.export).
        images: A folder of images to check the export on; without it, a batch of random pixels.
        opset: ONNX opset (17 or newer: LayerNorm is one operator from 17 on).
        weights_only: ``false`` reads checkpoints that hold Python objects; only for files you trust.

    Raises:
        ConfigError: For a bad checkpoint, output or images folder.
        CheckFailed: When the exported fp32 model disagrees with PyTorch by more than `TOLERANCE`.
    """
    output = Path(output).expanduser()
    if not output.parent.is_dir():
        raise ConfigError(f"output={output}: the folder {output.parent} does not exist; create it or choose another.")
    if opset < 17:
        raise ConfigError(f"opset={opset} is below 17, the first with a LayerNormalization operator; use 17 or newer.")
    net, card = load_classifier(ckpt_path, weights_only)
    batch = sample_batch(card, images)
    with torch.no_grad():
        expected = net(batch)
    report: dict[str, Any] = {"format": format, "output": str(output), "batch": len(batch)}
    if format == "pt2":
        program = torch.export.export(net, (batch,), dynamic_shapes=({0: torch.export.Dim("batch", min=1)},))
        torch.export.save(program, str(output))
        with torch.no_grad():
            got = torch.export.load(str(output)).module()(batch)
    elif format == "onnx":
        export_onnx(net, batch, output, opset)
        _with_metadata(output, card)
        got = _run_onnx(output, batch)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            fp32 = Path(tmp) / "fp32.onnx"
            export_onnx(net, batch, fp32, opset)
            quantize_int8(fp32, output)
            report["fp32_bytes"] = fp32.stat().st_size
        _with_metadata(output, card)
        got = _run_onnx(output, batch)
    difference = float((got - expected).abs().max())
    agreement = float((got.argmax(1) == expected.argmax(1)).float().mean())
    report.update(max_abs_diff=difference, top1_agreement=agreement, bytes=output.stat().st_size)
    Path(f"{output}.json").write_text(json.dumps({**asdict(card), "export": report}, indent=2) + "\n")
    print(
        f"vitlit: wrote {output} ({report['bytes'] / 2**20:.1f} MiB, {format}); against PyTorch on {len(batch)} "
        f"images: max |logit difference| {difference:.2e}, same top-1 class for {agreement:.0%}"
    )
    if format != "int8" and difference > TOLERANCE:
        raise CheckFailed(
            f"the exported model's logits differ from PyTorch's by {difference:.2e} (more than {TOLERANCE:g}); "
            f"do not use {output}; report it with the model name {card.model_name}"
        )
    return report
