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

import asyncio
import base64
import binascii
import contextlib
import ctypes
import io
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from email.message import Message
from pathlib import Path
from typing import Any, Literal

import litserve as ls
import torch
from fastapi import HTTPException
from fastapi.responses import JSONResponse
from PIL import Image, UnidentifiedImageError
from starlette.datastructures import Headers
from starlette.formparsers import MultiPartException, MultiPartParser

from vitlit.config import NonNegativeInt, PositiveFloat, PositiveInt
from vitlit.data.images import (
    FLOAT_PIXELS,
    MAX_PIXELS,
    PIL_MODES,
    RASTER_FORMATS,
    ImageTooLarge,
    open_image,
    pil_mode,
)
from vitlit.errors import ConfigError
from vitlit.text import say
from vitlit.trained import ModelCard, load_classifier

#: Parts a multipart upload may have: the one ``image`` field, and a few a client library may add.
MAX_FORM_PARTS = 8
#: The addresses LitServe listens on: this machine only, or every interface (IPv4, IPv6).
HOSTS = ("127.0.0.1", "0.0.0.0", "::")


def decode_image(request: Any, mode: str, side: int, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """The image of a request body, decoded by vitlit's one decoder (`vitlit.data.images.open_image`).

    The body is a multipart form's ``image`` file, or JSON with ``image`` in base64. The image's size is read from
    its header and checked against ``max_pixels`` before it is decoded, also once its shorter side is resized to
    ``side`` (the model card's ``stored_side``).

    Raises:
        ValueError: With a sentence for the client when there is no image, it cannot be read, or it is too large.
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
        return open_image(io.BytesIO(data), mode, side, max_pixels)
    except ImageTooLarge as err:
        raise ValueError(f"the image is too large: {err}; downscale it before sending") from None
    except UnidentifiedImageError:  # PostScript and every other format outside the allow-list land here
        raise ValueError(
            f"the upload is not an image of the formats vitlit reads ({', '.join(RASTER_FORMATS)})"
        ) from None
    except ValueError as err:
        if str(err) == FLOAT_PIXELS:  # a readable image of float pixels, refused as predict_dir refuses it
            raise ValueError(f"the image has {FLOAT_PIXELS}") from None
        raise ValueError(f"the upload is a damaged image ({type(err).__name__})") from None
    except (OSError, SyntaxError) as err:
        raise ValueError(f"the upload is a damaged image ({type(err).__name__})") from None


def top_classes(probabilities: torch.Tensor, class_names: list[str], k: int) -> list[dict[str, Any]]:
    """The ``k`` most probable classes of one image, most probable first."""
    values, indices = probabilities.topk(min(k, len(class_names)))
    return [{"class": class_names[i], "probability": round(float(p), 6)} for p, i in zip(values, indices, strict=True)]


class RequestCheck:
    """ASGI middleware in front of LitServe's ``/predict``: every body it could not take gets 400 or 413, not 500.

    LitServe parses a multipart form or else JSON, and answers 500 to anything else: a raw image body, a multipart
    form without its boundary, JSON nested too deep for Python's parser. This reads the body once (up to
    ``max_size`` bytes, beyond which the answer is 413), answers 400 with the reason for what `decode_image` would
    not get, and hands a good body on unchanged.

    A body that has not arrived whole within ``body_timeout`` seconds gets 408: a client that stops sending would
    otherwise hold its part of the body in the server's memory for as long as it keeps the connection open.

    Args:
        app: The ASGI app it wraps.
        max_size: Largest body in bytes.
        path: The endpoint it guards.
        card: The model's card, whose preprocessing the images get here; ``None`` hands the body on as it came.
        max_pixels: Largest image in pixels (`decode_image`).
        body_timeout: Seconds a body may take to arrive whole.
    """

    def __init__(
        self,
        app: Any,
        max_size: int,
        path: str = "/predict",
        card: ModelCard | None = None,
        max_pixels: int = 0,
        body_timeout: float = 60.0,
    ) -> None:
        self.app, self.max_size, self.path, self.card, self.max_pixels = app, max_size, path, card, max_pixels
        self.transform = card.preprocess() if card is not None else None
        self.body_timeout = body_timeout

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        content_type = headers.get(b"content-type", b"").decode("latin-1")  # a boundary keeps its case
        body, more = bytearray(), True  # appended in place: a body of many small pieces costs each piece once
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout
        while more:
            try:  # asyncio.wait_for: Python 3.10 has no asyncio.timeout_at
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                detail = f"the request body did not arrive within {self.body_timeout:g} s"
                await JSONResponse({"detail": detail}, status_code=408)(scope, receive, send)
                return
            except HTTPException as err:  # LitServe's size limit, raised while the body arrives
                await JSONResponse({"detail": err.detail}, status_code=err.status_code)(scope, receive, send)
                return
            except asyncio.CancelledError:  # the server stops and --shutdown_timeout is over: an answer, no traceback
                await JSONResponse({"detail": "the server is stopping"}, status_code=503)(scope, receive, send)
                return
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_size:
                await JSONResponse({"detail": "Payload too large"}, status_code=413)(scope, receive, send)
                return
        request = pixels = None
        try:
            request = await parsed_body(content_type, bytes(body))
            if self.card is not None:  # decoded here, in a thread of the API server: the model's worker only predicts
                pixels = await asyncio.to_thread(self._pixels, request)
        except ValueError as err:
            await JSONResponse({"detail": str(err)}, status_code=400)(scope, receive, send)
            return
        finally:
            if hasattr(request, "close"):  # a form's uploaded files
                await request.close()
        if pixels is not None:
            body = json.dumps({"pixels": base64.b64encode(pixels.numpy().tobytes()).decode(),
                               "shape": list(pixels.shape)}).encode()  # fmt: skip
            kept = [(k, v) for k, v in scope.get("headers") or [] if k not in (b"content-type", b"content-length")]
            scope = {**scope, "headers": [*kept, (b"content-type", b"application/json"),
                                          (b"content-length", str(len(body)).encode())]}  # fmt: skip
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _pixels(self, request: Any) -> torch.Tensor:
        """The model's input for one request: decoded (`decode_image`) and prepared as in training's evaluation."""
        image = decode_image(request, PIL_MODES.get(self.card.in_chans, "RGB"), self.card.stored_side, self.max_pixels)
        return self.transform(image).float().contiguous()


async def parsed_body(content_type: str, body: bytes) -> Any:
    """A ``/predict`` body as LitServe hands it to ``decode_request``: the multipart form (to close), or the JSON.

    A multipart form is parsed by starlette's own parser, as LitServe parses it, with its limits on parts: a body it
    would fail on (malformed, or thousands of parts) gets its reason here instead of a 500 there.

    Raises:
        ValueError: Why the body cannot hold an image vitlit reads, in a sentence for the client.
    """
    how = 'send the image as a multipart file \'image\' (curl -F image=@file.png) or as JSON {"image": "<base64>"}'
    header = Message()
    header["content-type"] = content_type  # the standard library's parser: the type in any case, quoted parameters
    media = header.get_content_type() if content_type else ""
    if media == "multipart/form-data":
        if not header.get_param("boundary"):
            raise ValueError(f"the multipart body has no boundary in its Content-Type; {how}")

        async def stream() -> AsyncIterator[bytes]:
            yield body

        parser = MultiPartParser(Headers({"content-type": content_type}), stream(), max_files=MAX_FORM_PARTS,
                                 max_fields=MAX_FORM_PARTS)  # fmt: skip
        try:
            return await parser.parse()
        except MultiPartException as err:  # its limits
            raise ValueError(f"the multipart form cannot be read: {err.message.rstrip('.')} (it may have "
                             f"{MAX_FORM_PARTS} parts); {how}") from None  # fmt: skip
        except Exception as err:  # python-multipart's own errors for a body that is not a form (LitServe: 500)
            raise ValueError(f"the multipart body is malformed ({type(err).__name__}); {how}") from None
    if media.endswith("json"):
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than Python's parser goes
            raise ValueError(f"the body is not valid JSON (or is nested too deep); {how}") from None
        if not isinstance(payload, dict):
            raise ValueError(f"the JSON body is not an object; {how}")
        return payload
    raise ValueError(f"a body of type {content_type or 'unknown (no Content-Type)'} is not taken; {how}")


class ViTClassifierAPI(ls.LitAPI):
    """One image in, its top-k classes out; the images of a batch share one forward pass.

    Args:
        ckpt_path: The checkpoint; each worker process loads it in `setup`.
        weights_only: Read it with ``weights_only`` loading.
        top_k: Classes in each answer.
        **kwargs: LitAPI's (``max_batch_size``, ``batch_timeout``).
    """

    def __init__(self, ckpt_path: str, weights_only: bool, top_k: int, max_pixels: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ckpt_path, self.weights_only, self.top_k, self.max_pixels = ckpt_path, weights_only, top_k, max_pixels
        self.owner = os.getpid()  # the `vitlit serve` process; this object is copied into the worker processes

    def setup(self, device: str) -> None:
        die_with(self.owner)  # a worker process, started by the server: it must not outlive it
        if os.getpid() != self.owner:  # a terminal's Ctrl-C reaches every process; the server stops this one itself
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if hasattr(os, "setpgid"):  # and a SIGTERM to the server's group (kill -- -PGID) must not end it first:
                os.setpgid(0, 0)  # LitServe's monitor said "Worker inference-worker died" and shut down twice
        net, card = load_classifier(self.ckpt_path, self.weights_only)
        self.net, self.card, self.device = net.to(device), card, device
        self.transform = card.preprocess()
        self.mode = PIL_MODES.get(card.in_chans, "RGB")

    # No annotation on `request`: LitServe reads it to choose how to parse the body, and only an empty one (or
    # starlette's Request object, which postponed annotations turn into a string) means "the form or the JSON".
    def decode_request(self, request) -> torch.Tensor:
        if hasattr(request, "get") and "pixels" in request:  # `RequestCheck` decoded it (a client's body never is)
            return torch.frombuffer(bytearray(base64.b64decode(request["pixels"])), dtype=torch.float32).reshape(
                request["shape"]
            )
        try:
            image = decode_image(request, self.mode, self.card.stored_side, self.max_pixels)
        except ValueError as err:
            raise HTTPException(status_code=400, detail=str(err)) from None
        return self.transform(image)

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
    max_pixels: PositiveInt = MAX_PIXELS,
    top_k: PositiveInt = 3,
    accelerator: Literal["auto", "cpu", "cuda"] = "auto",
    weights_only: bool = True,
    shutdown_timeout: NonNegativeInt = 5,
    body_timeout: PositiveFloat = 60.0,
    max_connections: PositiveInt | None = None,
) -> None:
    """Serve a checkpoint over HTTP until interrupted: ``POST /predict`` (one image), ``GET /health``.

    Args:
        ckpt_path: A checkpoint written by ``vitlit fit``.
        host: Address to listen on, one of LitServe's three: ``127.0.0.1`` answers this machine only, ``0.0.0.0``
            (or ``::``, IPv6) every interface.
        port: TCP port, 1024 to 65535 (LitServe's range); it must be free.
        max_batch_size: Dynamic batching: at most this many concurrent requests share one forward pass (1: none).
        batch_timeout: Dynamic batching: seconds to wait for more requests before a batch goes.
        max_upload_mb: Largest request body in MiB; larger ones get HTTP 413.
        max_pixels: Largest image in pixels, as stored and once its shorter side is resized to the model's size;
            larger ones get HTTP 400 before they are decoded (a small file can hold a huge image).
        top_k: Classes in each answer, most probable first.
        accelerator: Device of the model: ``auto`` (a GPU when there is one), ``cpu`` or ``cuda``.
        weights_only: ``false`` reads checkpoints that hold Python objects; only for files you trust.
        shutdown_timeout: Seconds the requests in progress may take to finish once the server is told to stop
            (SIGTERM, Ctrl-C); then their connections are closed (uvicorn's ``timeout_graceful_shutdown``), so a
            slow or idle client cannot hold the server up. Keep it under your service manager's kill timeout.
        body_timeout: Seconds a request's body may take to arrive whole; a slower one gets HTTP 408 and its bytes
            are let go.
        max_connections: Connections each of LitServe's API server processes holds at once (uvicorn's
            ``limit_concurrency``); more get HTTP 503, ``/health`` too. With ``max_upload_mb`` it bounds the memory
            that uploads in progress hold, but idle connections count too, so that many idle clients turn every
            other away. ``None``: no bound (uvicorn's default); ``body_timeout`` still lets go of a stalled upload.
    """
    if host not in HOSTS:
        raise ConfigError(f"host={host!r} is not an address LitServe listens on; give 127.0.0.1 (this machine only), "
                          f"0.0.0.0 or :: (every interface).")  # fmt: skip
    if not 1024 <= port <= 65535:
        raise ConfigError(f"port={port} is not a TCP port LitServe listens on; give one from 1024 to 65535, e.g. "
                          f"8000.")  # fmt: skip
    if not 0.001 <= max_upload_mb <= 2**20:  # 1 KiB to 1 TiB; NaN fails too
        raise ConfigError(f"max_upload_mb={max_upload_mb} is not from 0.001 to 1,048,576 MiB; give the largest "
                          f"upload to take, e.g. 10.")  # fmt: skip
    if not 0 <= batch_timeout <= 1:  # NaN fails too
        raise ConfigError(f"batch_timeout={batch_timeout} is not from 0 to 1 second (each request may wait that "
                          f"long for others); give seconds to wait, e.g. 0.005, or 0.")  # fmt: skip
    if accelerator == "cuda" and not torch.cuda.is_available():
        raise ConfigError("accelerator=cuda, but this machine has no CUDA GPU that PyTorch can use; pass cpu or auto.")
    _check_port_free(host, int(port))
    _, card = load_classifier(ckpt_path, weights_only)  # a bad checkpoint stops here, in one line
    pil_mode(card.in_chans, "serve")  # a model of a channel count no image file holds would refuse every request
    if max_pixels < card.stored_side**2:  # the side evaluation resizes to, before the centre crop
        side = card.stored_side
        raise ConfigError(f"max_pixels={max_pixels} is less than one image of the size the model's inputs are "
                          f"cut from ({side} x {side}), so every image would be refused; give at least "
                          f"{side**2}.")  # fmt: skip
    api = ViTClassifierAPI(
        str(Path(ckpt_path).expanduser()), weights_only, int(top_k), int(max_pixels),
        max_batch_size=int(max_batch_size), batch_timeout=float(batch_timeout),
    )  # fmt: skip
    info = {"model_name": card.model_name, "classes": card.class_names, "img_size": card.img_size}
    limit = int(max_upload_mb * 2**20)
    check = {"max_size": limit, "card": card, "max_pixels": int(max_pixels), "body_timeout": float(body_timeout)}
    server = ls.LitServer(
        api, accelerator=accelerator, max_payload_size=limit, model_metadata=info, middlewares=[(RequestCheck, check)]
    )
    describe_predict(server.app, int(top_k))
    # LitServer's uvicorn_graceful_timeout (30 s) is read twice: for uvicorn's drain when the server starts, and
    # for how long LitServe then waits for uvicorn's process to end; the stop gives that wait a margin.
    server.uvicorn_graceful_timeout = int(shutdown_timeout)
    # Processes LitServe forks (its API servers, its manager) end with this one, even when it is killed outright
    # (SIGKILL, the OOM killer), instead of holding the port; its spawned model workers do the same in `setup`.
    owner = os.getpid()
    if hasattr(os, "register_at_fork"):  # Windows never forks: LitServe spawns there, and `setup` covers the workers
        os.register_at_fork(after_in_child=lambda: die_with(owner))
    # SIGTERM (systemd, docker stop, kill) shuts down like Ctrl-C: LitServe then stops its worker processes,
    # which a plain SIGTERM to this process would leave running.
    stopping, server_log = ManagerGone(), logging.getLogger("litserve.server")
    server_log.addFilter(stopping)

    def on_stop() -> None:
        server.uvicorn_graceful_timeout = int(shutdown_timeout) + 10
        stopping.active = True

    stop = _interrupt_in(owner, on_stop)
    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    _say_when_ready(f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{int(port)}")
    try:
        limits = {} if max_connections is None else {"limit_concurrency": int(max_connections)}
        server.run(host=host, port=int(port), generate_client_file=False, **limits)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if not stopping.active:  # after a stop LitServe's monitor thread may still ask its manager, now gone
            server_log.removeFilter(stopping)


class ManagerGone(logging.Filter):
    """Leave out, once the server is stopping, LitServe's records of an error from its process manager's lost link.

    LitServe's stop shuts its manager down last, while its worker monitor (a thread) may still ask the manager
    whether to stop: that question then fails (``ConnectionResetError``, ``BrokenPipeError``, ``EOFError``) and
    LitServe logs it as "Monitoring worker crashed" with a traceback, by chance, on an orderly stop. Only records
    carrying such an exception are left out, and only after the stop began (``active``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.active = False

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (self.active and isinstance(error, (ConnectionError, EOFError)))


def _say_when_ready(url: str, wait: float = 0.5, within: float = 3600.0) -> None:
    """Print one ``vitlit: ready: <url>`` line once ``GET /health`` answers 200, asked from a thread, on loopback.

    LitServe's own lines come minutes before its model workers take a request on a loaded machine.
    """

    def poll() -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            # OSError: not listening yet, or its workers not ready (HTTP 503)
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return say(f"vitlit: ready: {url} (POST /predict, GET /health, /docs)")
            time.sleep(wait)

    threading.Thread(target=poll, name="vitlit-ready", daemon=True).start()


def describe_predict(app: Any, top_k: int) -> None:
    """Give ``POST /predict`` its request and answer in the OpenAPI schema (``/openapi.json``, ``/docs``).

    The route takes a form or JSON, which one annotation cannot say, so LitServe registers it without a schema; the
    schema is extended the way FastAPI documents ("Extending OpenAPI": ``app.openapi`` replaced).
    """
    from fastapi.openapi.utils import get_openapi

    def image(kind: str, text: str) -> dict[str, Any]:  # the one field, as a file (form) or base64 (JSON)
        field = {"type": "string", "format": kind, "description": text}
        return {"type": "object", "required": ["image"], "properties": {"image": field}}

    form = image("binary", "The image file (PNG, JPEG, WebP, ...).")
    body = image("byte", "The image file's bytes in base64.")
    entry = {"type": "object", "properties": {"class": {"type": "string"}, "probability": {"type": "number"}}}
    answer = {"type": "object", "properties": {"predictions": {"type": "array", "items": entry, "maxItems": top_k,
              "description": "The most probable classes, most probable first."}}}  # fmt: skip

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            predict = schema["paths"]["/predict"]["post"]
            predict["requestBody"] = {"required": True, "content": {"multipart/form-data": {"schema": form},
                                                                    "application/json": {"schema": body}}}  # fmt: skip
            predict["responses"] = {
                "200": {"description": "The top classes.", "content": {"application/json": {"schema": answer}}},
                "400": {"description": "Not a readable image, or too many pixels; `detail` says why."},
                "413": {"description": "Larger than --max_upload_mb."},
            }
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


def _check_port_free(host: str, port: int) -> None:
    """Refuse a port another program listens on (or an address this machine does not have), before the workers start."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
            probe.bind((host, port))
    except OSError as err:
        raise ConfigError(
            f"cannot listen on {host}:{port} ({err.strerror}); choose another --port or --host."
        ) from None


def die_with(parent: int) -> None:
    """End this process as soon as process ``parent`` ends, however it ends (SIGKILL included).

    Linux delivers a signal to a child when its parent dies (``PR_SET_PDEATHSIG``); elsewhere a daemon thread
    watches for the parent to be gone: on Windows by waiting on its process handle (Windows never re-parents a
    process, so ``getppid`` would not change), on other systems until the process is re-parented.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        else:
            if os.getppid() != parent:  # the parent died before the request took effect
                os._exit(1)
            return

    def watch() -> None:
        if sys.platform == "win32":
            kernel32 = ctypes.WinDLL("kernel32")
            handle = kernel32.OpenProcess(0x00100000, False, parent)  # SYNCHRONIZE; 0 if the parent is gone
            if handle:
                kernel32.WaitForSingleObject(handle, 0xFFFFFFFF)  # INFINITE: returns when the parent ends
            os._exit(1)
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="vitlit-die-with-parent", daemon=True).start()


def _interrupt_in(owner: int, stopping: Any) -> Any:
    """A SIGINT/SIGTERM handler: ``stopping()`` and Ctrl-C in process ``owner``, ignored in the processes it forks.

    A SIGTERM to the server's group reaches every process at once; LitServe's forked manager then died first and
    crashed LitServe's worker monitor with a traceback. The server stops its helpers in order (and they end with
    it whatever happens, `die_with`); its HTTP processes put uvicorn's own handlers in place of this one.
    """

    def handler(signum: int, frame: object) -> None:
        if os.getpid() == owner:
            stopping()
            raise KeyboardInterrupt

    return handler
