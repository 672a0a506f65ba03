"""``vitlit serve``: a checkpoint as an HTTP service, on LitServe.

    python -m vitlit serve --ckpt_path <run>/checkpoints/last.ckpt --port 8000
    curl -F image=@cat.png http://127.0.0.1:8000/predict
    curl -H 'Content-Type: application/json' -d '{"image": "<base64 of the file>"}' http://127.0.0.1:8000/predict

LitServe is Lightning's server: FastAPI and uvicorn underneath, with dynamic batching built in (requests that arrive
within ``batch_timeout`` of each other go through the model as one batch, up to ``max_batch_size``), a health
endpoint, a request size limit, and model workers in their own processes. That is everything this service needs
without writing a batching queue by hand. ``POST /predict`` takes one image, as a multipart upload (field
``image``) or as JSON ``{"image": "<base64>"}``, and answers ``{"predictions": [{"class": ..., "probability":
...}, ...]}`` with the ``top_k`` classes; ``GET /health`` answers ``ok``. An upload that is not a readable image gets
HTTP 400 with the reason, one over ``max_upload_mb`` gets 413; neither reaches the model or stops the server.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import signal
from pathlib import Path
from typing import Any, Literal

import litserve as ls
import torch
from fastapi import HTTPException
from fastapi.responses import JSONResponse
from PIL import Image, UnidentifiedImageError

from vitlit.data.device import PIL_MODES
from vitlit.errors import ConfigError
from vitlit.export import load_classifier
from vitlit.types import PositiveFloat, PositiveInt


def decode_image(request: Any) -> Image.Image:
    """The image of a request body: a multipart form's ``image`` file, or a JSON ``image`` field in base64.

    Raises:
        ValueError: With a sentence for the client when there is no image or it cannot be read.
    """
    item = request.get("image") if hasattr(request, "get") else None
    if item is None:
        raise ValueError("the request has no 'image' field; send a multipart file 'image' or JSON {'image': base64}")
    if hasattr(item, "file"):  # an uploaded file (starlette's UploadFile)
        data = item.file.read()
    elif isinstance(item, str):
        try:
            data = base64.b64decode(item, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the 'image' field is not valid base64") from None
    else:
        raise ValueError("the 'image' field must be a file upload or a base64 string")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return image.copy()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise ValueError(f"the upload is not an image PIL can read ({type(err).__name__})") from None


def top_classes(probabilities: torch.Tensor, class_names: list[str], k: int) -> list[dict[str, Any]]:
    """The ``k`` most probable classes of one image, most probable first."""
    values, indices = probabilities.topk(min(k, len(class_names)))
    return [{"class": class_names[i], "probability": round(float(p), 6)} for p, i in zip(values, indices, strict=True)]


class JSONBodyCheck:
    """ASGI middleware: HTTP 400 for a JSON request whose body is not JSON (LitServe would answer 500).

    The body is read once (up to ``max_size`` bytes, beyond which the answer is 413) and handed on unchanged.
    """

    def __init__(self, app: Any, max_size: int) -> None:
        self.app, self.max_size = app, max_size

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] != "http" or b"json" not in headers.get(b"content-type", b""):
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            try:
                message = await receive()
            except HTTPException as err:  # LitServe's size limit, raised while the body arrives
                await JSONResponse({"detail": err.detail}, status_code=err.status_code)(scope, receive, send)
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_size:
                await JSONResponse({"detail": "Payload too large"}, status_code=413)(scope, receive, send)
                return
        try:
            json.loads(body)
        except ValueError:
            detail = 'the body is not valid JSON; send {"image": "<base64 of the file>"}'
            await JSONResponse({"detail": detail}, status_code=400)(scope, receive, send)
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class ViTClassifierAPI(ls.LitAPI):
    """One image in, its top-k classes out; the images of a batch share one forward pass.

    Args:
        ckpt_path: The checkpoint; each worker process loads it in `setup`.
        weights_only: Read it with ``weights_only`` loading.
        top_k: Classes in each answer.
        **kwargs: LitAPI's (``max_batch_size``, ``batch_timeout``).
    """

    def __init__(self, ckpt_path: str, weights_only: bool, top_k: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ckpt_path, self.weights_only, self.top_k = ckpt_path, weights_only, top_k

    def setup(self, device: str) -> None:
        net, card = load_classifier(self.ckpt_path, self.weights_only)
        self.net, self.card, self.device = net.to(device), card, device
        self.transform = card.preprocess()
        self.mode = PIL_MODES.get(card.in_chans, "RGB")

    # No annotation on `request`: LitServe reads it to choose how to parse the body, and only an empty one (or
    # starlette's Request object, which postponed annotations turn into a string) means "the form or the JSON".
    def decode_request(self, request) -> torch.Tensor:
        try:
            image = decode_image(request)
        except ValueError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        return self.transform(image.convert(self.mode))

    def batch(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(inputs)

    @torch.inference_mode()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        single = images.ndim == 3  # without batching LitServe passes one image
        batch = (images.unsqueeze(0) if single else images).to(self.device)
        probs = self.net(batch).softmax(-1).cpu()
        return probs[0] if single else probs

    def unbatch(self, output: torch.Tensor) -> list[torch.Tensor]:
        return list(output)

    def encode_response(self, probabilities: torch.Tensor) -> dict[str, Any]:
        return {"predictions": top_classes(probabilities, self.card.class_names, self.top_k)}


def serve(
    ckpt_path: Path,
    host: str = "127.0.0.1",
    port: PositiveInt = 8000,
    max_batch_size: PositiveInt = 16,
    batch_timeout: float = 0.005,
    max_upload_mb: PositiveFloat = 10.0,
    top_k: PositiveInt = 3,
    accelerator: Literal["auto", "cpu", "cuda"] = "auto",
    weights_only: bool = True,
) -> None:
    """Serve a checkpoint over HTTP until interrupted: ``POST /predict`` (one image), ``GET /health``.

    Args:
        ckpt_path: A checkpoint written by ``vitlit fit``.
        host: Address to listen on; the default answers this machine only (``0.0.0.0`` for every interface).
        port: TCP port.
        max_batch_size: Dynamic batching: at most this many concurrent requests share one forward pass (1: none).
        batch_timeout: Dynamic batching: seconds to wait for more requests before a batch goes.
        max_upload_mb: Largest request body in MiB; larger ones get HTTP 413.
        top_k: Classes in each answer, most probable first.
        accelerator: Device of the model: ``auto`` (a GPU when there is one), ``cpu`` or ``cuda``.
        weights_only: ``false`` reads checkpoints that hold Python objects; only for files you trust.
    """
    _, card = load_classifier(ckpt_path, weights_only)  # a bad checkpoint stops here, in one line
    if batch_timeout < 0:
        raise ConfigError(f"batch_timeout={batch_timeout} is negative; give seconds to wait, e.g. 0.005, or 0.")
    api = ViTClassifierAPI(
        str(Path(ckpt_path).expanduser()), weights_only, int(top_k), max_batch_size=int(max_batch_size),
        batch_timeout=float(batch_timeout),
    )  # fmt: skip
    info = {"model_name": card.model_name, "classes": card.class_names, "img_size": card.img_size}
    limit = int(max_upload_mb * 2**20)
    server = ls.LitServer(
        api, accelerator=accelerator, max_payload_size=limit, model_metadata=info,
        middlewares=[(JSONBodyCheck, {"max_size": limit})],
    )  # fmt: skip
    # SIGTERM (systemd, docker stop, kill) shuts down like Ctrl-C: LitServe then stops its worker processes,
    # which a plain SIGTERM to this process would leave running.
    previous = signal.signal(signal.SIGTERM, _interrupt_in(os.getpid()))
    try:
        server.run(host=host, port=int(port), generate_client_file=False)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt_in(owner: int) -> Any:
    """A SIGTERM handler that is Ctrl-C in process ``owner``, and the default (exit) in the processes it forks."""

    def handler(signum: int, frame: object) -> None:
        if os.getpid() == owner:
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked server process: LitServe stops it this way
        signal.raise_signal(signal.SIGTERM)

    return handler
