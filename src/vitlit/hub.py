"""The Hugging Face hub, asked once: whether it answers, and what an earlier download left in the local cache.

Without the network, ``datasets`` and ``huggingface_hub`` retry for half a minute or more before they fail; a run that
needs the hub probes it once here (seconds) and says in one line what to do instead. Loaded where a run names a hub
data set or pretrained weights only.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def hub_unreachable(timeout: float = 5.0) -> str | None:
    """Why the hub cannot be reached (in a few words), or ``None``: one connection to ``HF_ENDPOINT``'s port."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return "HF_HUB_OFFLINE is set"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = endpoint.hostname or "huggingface.co"
    try:  # the endpoint's own port: a mirror at another one is probed where it listens
        port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    except ValueError:
        return f"HF_ENDPOINT {os.environ['HF_ENDPOINT']} has no valid port"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        return f"{host}:{port} cannot be reached: {err.strerror or type(err).__name__}"
    return None


def cached_weights(hub_id: str) -> str | None:
    """The weights file of the hub repository ``hub_id`` (``user/name[@revision]``) in the local cache, or ``None``.

    The files timm asks the hub for, in its order: ``model.safetensors``, then ``pytorch_model.bin``.
    """
    from huggingface_hub import try_to_load_from_cache

    repo, _, revision = hub_id.partition("@")
    for name in ("model.safetensors", "pytorch_model.bin"):
        found = try_to_load_from_cache(repo, name, revision=revision or None)
        if isinstance(found, str):
            return found
    return None
