"""``vitlit export``: a checkpoint as a file other programs run, verified right after it is written.

    python -m vitlit export --ckpt_path <run>/checkpoints/last.ckpt --format onnx --output vit.onnx

Formats: ``onnx`` (opset 17, dynamic batch), checked in ONNX Runtime against PyTorch's logits; ``int8``, the ONNX
model with its matrix products quantized to int8 by ONNX Runtime's dynamic quantization, for CPUs; ``pt2``, a
``torch.export`` program (``torch.export.load(path).module()``), PyTorch's successor to TorchScript; ``timm``, the
folder timm and the Hugging Face hub share (`vitlit.tools.hf_folder`: config.json, model.safetensors, a model card),
which ``timm.create_model("local-dir:<folder>", pretrained=True)`` loads. int8 uses
ONNX Runtime's quantizer rather than ``torch.ao.quantization.quantize_dynamic``, which PyTorch has deprecated (in
favour of torchao) and whose result only PyTorch can run. Each file gets a sidecar ``<file>.json`` (and ONNX files
the same in their metadata): class names, image size, channels and normalisation, so nothing else is needed to run
it. The checkpoint is read with ``weights_only`` loading, as everywhere in vitlit.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import logging
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from vitlit.atomic import replacing, write_atomically
from vitlit.data.images import image_files, image_problem, pil_mode
from vitlit.errors import CheckFailed, ConfigError
from vitlit.owned import folders_made_for
from vitlit.run_dir import check_writable_folder
from vitlit.text import say, shown
from vitlit.tools.hf_folder import check_folder_output, write_timm_folder
from vitlit.trained import PREPROCESS, ModelCard, load_classifier

Format = Literal["onnx", "int8", "pt2", "timm"]
#: Largest difference of a logit between PyTorch and the exported fp32 model that still counts as the same model.
TOLERANCE = 1e-3
#: The smallest share of the check batch on which int8 must pick PyTorch's top-1 class (its logits differ by design).
#: Measured 1.0 on the digits model's 8-image batches, random and real, 3 seeds (RESULTS.md); a quarter may flip
#: where random pixels leave two classes nearly tied.
MIN_INT8_AGREEMENT = 0.75
#: The name each file format ends in: what ONNX Runtime's and torch.export's users (and torch.export.load) expect.
SUFFIX = {"onnx": ".onnx", "int8": ".onnx", "pt2": ".pt2"}
#: The most bytes of weights one ONNX file holds: a protobuf message stops at 2 GiB (onnx.checker.MAXIMUM_PROTOBUF),
#: less 64 MiB for the graph's own nodes. Past it torch's exporter writes each weight as its own file instead.
ONNX_MAX_BYTES = 2**31 - 2**26


def sample_batch(card: ModelCard, images: Path | None, n: int = 8) -> torch.Tensor:
    """A batch to verify the export with: up to ``n`` images of the folder ``images``, else random pixels.

    Either way the batch goes through the model card's transform, so its values are those real inputs have.
    """
    if images is not None:
        images = Path(images).expanduser()  # a config file's ~/ is not expanded by any shell
    if images is None:
        pixels = torch.randint(0, 256, (n, card.in_chans, card.img_size, card.img_size), dtype=torch.uint8)
        transform = card.preprocess()
        return torch.stack([transform(p) for p in pixels])
    if not images.is_dir():
        raise ConfigError(f"images={images} is not a folder; give a folder of images to check the export with.")
    pil_mode(card.in_chans, "export --images")  # a model of another channel count takes no image file
    # Decoded in full, so that a file damaged inside is left out too; checked only until n readable ones are found.
    readable = (p for p in image_files(images) if image_problem(p, card.stored_side, decode=True) is None)
    files = list(itertools.islice(readable, n))
    if not files:
        first = next(iter(image_files(images)), None)
        why = f" ({first}: {image_problem(first, card.stored_side, decode=True)})" if first is not None else ""
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
    for key, value in {**asdict(card), "preprocess": PREPROCESS}.items():
        model.metadata_props.add(key=key, value=json.dumps(value))
    onnx.save(model, str(path))


def _run_onnx(path: Path, batch: torch.Tensor) -> torch.Tensor:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {"images": batch.numpy()})[0])


def check_output(output: Path, ckpt_path: Path, overwrite: bool, format: Format = "onnx") -> None:
    """Refuse an output that would destroy a file or cannot be written, before anything is read or exported.

    A missing folder is left for `export` to create once everything is checked, as ``prepare --output`` does.

    Raises:
        ConfigError: For an output whose name does not end as ``format``'s files do, an output (or its ``.json``
            sidecar) that is the checkpoint itself (also through a link), a folder, an existing file without
            ``overwrite``, or a path in a folder that cannot be created or written to.
    """
    sidecar = Path(f"{output}.json")
    for path in (output, sidecar):
        if _same_file(path, ckpt_path):
            raise ConfigError(f"output={path} is the checkpoint being exported; give another file name, e.g. vit.onnx.")
        if path.is_dir():
            raise ConfigError(f"output={path} is a folder; give a file name inside it, e.g. {path / 'vit.onnx'}.")
        if path.exists() and not path.is_file():
            raise ConfigError(f"output={path} exists and is not a regular file (a device, a pipe); choose a file name.")
    suffix = SUFFIX[format]
    if output.suffix != suffix:  # a pt2 archive named .onnx would be opened by ONNX Runtime, and fail there
        named = " or ".join(f for f, s in SUFFIX.items() if s == output.suffix)
        other = f" or pass --format {named}" if named else ""
        raise ConfigError(f"output={shown(output)} does not end in {suffix}, as --format {format} files do; name it "
                          f"{shown(output.with_suffix(suffix).name)}{other}.")  # fmt: skip
    folder = output.parent
    if not folder.is_dir():  # a folder to create: its nearest existing part a writable folder, no dangling link
        check_writable_folder(folder, "--output")
    elif not os.access(folder, os.W_OK | os.X_OK) or not _can_create_in(folder):
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
    # torch keeps its supported range private (torch.onnx._constants), so the probe asks the exporter itself.
    try:
        with warnings.catch_warnings(), _silent_stdout():
            warnings.simplefilter("ignore")
            torch.onnx.export(nn.LayerNorm(2), (torch.zeros(1, 2),), io.BytesIO(), opset_version=opset, dynamo=False)
    except Exception as err:  # the exporter says "Unsupported onnx_opset_version" in a RuntimeError or ValueError
        raise ConfigError(
            f"opset={opset} is not one this PyTorch can export ({str(err).splitlines()[0][:80]}); use 17, the default."
        ) from None


@contextlib.contextmanager
def _silent_stdout() -> Iterator[None]:
    """Send file descriptor 1 to the null device for the block: torch's C++ code prints a refused graph there."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no standard output at all: nothing to keep clean
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def check_onnx_size(net: nn.Module, format: Format) -> None:
    """Refuse a model whose weights one ONNX file cannot hold (`ONNX_MAX_BYTES`), before anything is exported.

    Raises:
        ConfigError: Naming the weights' size and the formats that take it.
    """
    size = sum(t.numel() * t.element_size() for t in itertools.chain(net.parameters(), net.buffers()))
    if size > ONNX_MAX_BYTES:
        raise ConfigError(
            f"the model's weights take {size / 2**30:.2f} GiB, more than one ONNX file holds (2 GiB, a protobuf's "
            f"limit), so --format {format} cannot write it; export it with --format pt2 or --format timm instead."
        )


def export(
    ckpt_path: Path,
    output: Path,
    format: Format = "onnx",
    images: Path | None = None,
    opset: int = 17,
    overwrite: bool = False,
    weights_only: bool = True,
    license: str | None = None,
) -> dict[str, Any]:
    """Export a checkpoint and check the result against PyTorch on a batch; print and return the figures.

    The file (and its sidecar) is written under a temporary name beside ``output`` and takes its name only once the
    check passed, so an existing file is replaced whole or not at all, and a failed export leaves nothing behind.

    Args:
        ckpt_path: A checkpoint written by ``vitlit fit`` (``<run>/checkpoints/*.ckpt``).
        output: The file to write (``.onnx`` for onnx and int8, ``.pt2`` for pt2; a missing folder is created);
            ``<output>.json`` is written beside it with the class names and the input transform. Never the
            checkpoint itself. For ``timm``: a new folder.
        format: ``onnx`` (fp32), ``int8`` (ONNX with int8 matrix products, for CPUs), ``pt2`` (torch.export) or
            ``timm`` (a timm / Hugging Face folder with a model card).
        images: A folder of images to check the export on; without it, a batch of random pixels.
        opset: ONNX opset (17 or newer: LayerNorm is one operator from 17 on).
        overwrite: Replace ``output`` and its sidecar if they exist (otherwise an existing file is refused).
        weights_only: ``false`` reads checkpoints that hold Python objects; only for files you trust.
        license: ``--format timm``: the model card's license field (default ``other``: the weights' terms follow
            from the data and any pretrained weights, which only you know).

    Raises:
        ConfigError: For a bad checkpoint, output, opset or images folder, or an ONNX export of a model over 2 GiB.
        CheckFailed: When the exported fp32 model disagrees with PyTorch by more than `TOLERANCE`, or int8 picks
            its top-1 class on less than `MIN_INT8_AGREEMENT` of the check images (nothing is written then).
    """
    output = Path(output).expanduser()
    # Once, for every use below: the run folder beside it is found from this path, also from inside checkpoints/.
    ckpt_path = Path(ckpt_path).expanduser().absolute()
    if license is not None and format != "timm":
        raise ConfigError(f"--license is the model card's, which --format timm writes; drop it for --format {format}.")
    if format == "timm":
        check_folder_output(output, ckpt_path, overwrite, "other" if license is None else license)
    else:
        check_output(output, ckpt_path, overwrite, format)
    if format not in ("pt2", "timm"):
        check_opset(opset)
    net, card = load_classifier(ckpt_path, weights_only)
    if format in ("onnx", "int8"):
        check_onnx_size(net, format)
    batch = sample_batch(card, images)
    with torch.no_grad():
        expected = net(batch)
    if not torch.isfinite(expected).all():  # every comparison with NaN is false: the check below could not fail
        raise CheckFailed(
            f"checkpoint {ckpt_path} gives logits that are not finite numbers (NaN or infinity) on the sample images; "
            f"nothing was written to {output}; export an earlier checkpoint of the run"
        )
    report: dict[str, Any] = {"format": format, "output": str(output), "batch": len(batch)}
    if format == "timm":
        with folders_made_for(output.parent):  # checked: a missing folder is created, as by prepare
            report |= write_timm_folder(
                net, card, batch, output, ckpt_path, license or "other", TOLERANCE, weights_only
            )
        say(f"vitlit: wrote {output}/ ({', '.join(report['files'])}; {report['bytes'] / 2**20:.1f} MiB); timm's "
              f"model from it against the checkpoint on {len(batch)} images: max |logit difference| "
              f"{report['max_abs_diff']:.2e}")  # fmt: skip
        return report
    # A missing folder is created, as by prepare (checked above); the private folder is for the ONNX files: torch's
    # exporter may write files of its own beside its output (one per weight), which must never land in the user's.
    # It is a hidden one beside the output, on its disk: the system's temporary folder may be too small.
    with (
        folders_made_for(output.parent),
        replacing(output) as staged,
        tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.") as private,
    ):
        if format == "pt2":
            # Traced on two images at least: torch.export specialises a batch dimension of 1 to a constant.
            example = batch if len(batch) > 1 else batch.repeat(2, 1, 1, 1)
            program = torch.export.export(net, (example,), dynamic_shapes=({0: torch.export.Dim("batch", min=1)},))
            # Through open files: given a path, torch logs a warning for each name not ending in .pt2, as the staged
            # file's temporary name does.
            with staged.open("wb") as f:
                torch.export.save(program, f)
            with staged.open("rb") as f, torch.no_grad():
                got = torch.export.load(f).module()(batch)
        else:
            written = Path(private) / "model.onnx"
            if format == "onnx":
                export_onnx(net, batch, written, opset)
            else:
                fp32 = Path(private) / "fp32.onnx"
                export_onnx(net, batch, fp32, opset)
                quantize_int8(fp32, written)
                report["fp32_bytes"] = fp32.stat().st_size
            _with_metadata(written, card)
            got = _run_onnx(written, batch)
            shutil.copyfile(written, staged)
        difference = float((got - expected).abs().max())
        agreement = float((got.argmax(1) == expected.argmax(1)).float().mean())
        report.update(max_abs_diff=difference, top1_agreement=agreement, bytes=staged.stat().st_size)
        if format != "int8" and not difference <= TOLERANCE:  # NaN fails too
            raise CheckFailed(
                f"the exported model's logits differ from PyTorch's by {difference:.2e} (more than {TOLERANCE:g}); "
                f"nothing was written to {output}; report it with the model name {card.model_name}"
            )
        if format == "int8" and not agreement >= MIN_INT8_AGREEMENT:
            raise CheckFailed(
                f"int8 picks PyTorch's top-1 class for {agreement:.0%} of the {len(batch)} check images (at least "
                f"{MIN_INT8_AGREEMENT:.0%} needed); nothing was written to {output}; export --format onnx (fp32) "
                f"instead"
            )
        write_atomically(
            Path(f"{output}.json"),
            json.dumps({**asdict(card), "preprocess": PREPROCESS, "export": report}, indent=2) + "\n",
        )
    say(
        f"vitlit: wrote {output} ({report['bytes'] / 2**20:.1f} MiB, {format}); against PyTorch on {len(batch)} "
        f"images: max |logit difference| {difference:.2e}, same top-1 class for {agreement:.0%}"
    )
    return report
