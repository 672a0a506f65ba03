"""A small HTTP client on the standard library: multipart uploads and JSON posts to a local server."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from typing import Any


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unreachable_hub(monkeypatch: Any, cache: Any) -> None:
    """The Hugging Face hub unreachable (``HF_ENDPOINT``: a local port nothing listens on) and its cache ``cache``."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))


def wait_for(url: str, timeout: float, alive: Any = None) -> None:
    """Poll ``url`` until it answers 200; ``alive()`` returning False (the server process died) ends the wait."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise RuntimeError(f"the server died before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def _send(request: urllib.request.Request) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def post_file(url: str, field: str, filename: str, data: bytes) -> tuple[int, dict]:
    """POST ``data`` as the multipart file ``field``; return the status and the JSON answer."""
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{filename}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return _send(urllib.request.Request(url, data=body, headers=headers, method="POST"))


def post_json(url: str, payload: Any) -> tuple[int, dict]:
    """POST ``payload`` as JSON (bytes are sent as they are); return the status and the JSON answer."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    return _send(request)


def post_raw(url: str, body: bytes, content_type: str | None) -> tuple[int, dict]:
    """POST ``body`` as it is, with ``content_type`` (``None``: no Content-Type header at all)."""
    request = urllib.request.Request(url, data=body, method="POST")
    if content_type is not None:
        request.add_header("Content-Type", content_type)
    else:  # urllib adds application/x-www-form-urlencoded to a body without one
        request.unredirected_hdrs.pop("Content-type", None)
        request.add_unredirected_header("Content-Type", "")
    return _send(request)
