"""The inputs pretrained weights expect, so that they never have to be copied into a config by hand; their loading.

A pretrained ViT expects its inputs as in its own training (timm's pretrained config: normalised 0.5/0.5 for the
AugReg ViTs, ImageNet's statistics for DeiT; bicubic resizes; evaluation's 0.9 centre crop). The data module cannot
know the model, so the CLI, where the two meet, fills ``data.mean``/``std``/``interpolation``/``crop_pct`` from the
model's pretrained config when the weights are pretrained and the user gave none. The values then stand in the run's
saved ``config.yaml``, so evaluation, exports and resume use the same ones.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

import timm
import torch
from lightning.pytorch.utilities import rank_zero_info
from safetensors import SafetensorError
from timm.models import get_pretrained_cfg
from torch import nn

from vitlit.checkpoints import UNREADABLE, refuse_compressed
from vitlit.data.pipeline import channel_statistics
from vitlit.errors import ConfigError
from vitlit.hub import cached_weights, hub_unreachable


def pretrained_statistics(model_name: str, in_chans: int = 3) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """``(mean, std)`` the weights of timm's ``model_name`` were trained with, fitted to ``in_chans`` channels.

    Args:
        model_name: A timm model name, with or without a pretrained tag (``vit_base_patch16_224.augreg_in21k``).
        in_chans: Channels of the images; grey images get the average of the colour channels' statistics.

    Returns:
        The statistics, or ``None`` where timm has no pretrained config for the name.

    Raises:
        ConfigError: If the statistics cannot be fitted to ``in_chans`` (then they must be given explicitly).
    """
    cfg = get_pretrained_cfg(model_name)
    if cfg is None or cfg.mean is None or cfg.std is None:
        return None
    return channel_statistics(cfg.mean, in_chans, "mean"), channel_statistics(cfg.std, in_chans, "std")


def fill_pretrained_inputs(model: MutableMapping[str, Any], data: MutableMapping[str, Any]) -> None:
    """Set ``data``'s missing ``mean``, ``std``, ``interpolation`` and ``crop_pct`` from the weights' pretrained config.

    As timm's ``resolve_data_config`` does: the inputs the weights were trained and evaluated with. In place.

    Args:
        model: The parsed ``model`` options (``model_name``, ``pretrained``, ``pretrained_file``).
        data: The parsed data module options (``init_args``): ``mean``, ``std``, ``in_chans``, ...
    """
    cfg = get_pretrained_cfg(model["model_name"])
    if not (model.get("pretrained") or model.get("pretrained_file")) or cfg is None:
        return
    given = data.get("mean") is not None and data.get("std") is not None  # (then any channel count goes)
    stats = None if given else pretrained_statistics(model["model_name"], data.get("in_chans") or 3)
    stats = stats or (None, None)
    known = {
        "mean": stats[0] and list(stats[0]),
        "std": stats[1] and list(stats[1]),
        "crop_pct": cfg.crop_pct,
        "interpolation": cfg.interpolation if cfg.interpolation in ("bilinear", "bicubic") else None,
    }
    for key, value in known.items():
        if data.get(key) is None and value is not None:
            data[key] = value


def say_adapted(
    model_name: str, net: nn.Module, source: str, original: dict[str, Any] | None = None, left: Sequence[str] = ()
) -> None:
    """Say in one line which pretrained tensors timm adapted to this run's geometry (and which it left new).

    ``original``: the weights' own tensors (a file's); timm's pretrained weights have the model's default geometry.
    ``left``: the model's tensors besides the head that a file lacks, which keep their initial values.
    """
    if original is None:
        with torch.device("meta"):  # the weights' own geometry: the model with its pretrained defaults
            original = timm.create_model(model_name, pretrained=False).state_dict()
    changed = [(k, tuple(original[k].shape), tuple(v.shape)) for k, v in net.state_dict().items()
               if k in original and original[k].shape != v.shape]  # fmt: skip
    said = [f"{k} {a} -> {b} ({'new' if k.startswith('head') else 'resampled'})" for k, a, b in changed]
    line = f"vitlit: loaded {source} into {model_name}; adapted: {', '.join(said) or 'nothing'}"
    if left:
        line += (f"; not in the file, so left as initialised: {len(left)} tensor(s), {', '.join(left[:4])}"
                 f"{', ...' if len(left) > 4 else ''}")  # fmt: skip
    rank_zero_info(line)


def _converted_shapes(
    model_name: str, weights: dict[str, Any], converted: dict[str, torch.Tensor], probe: nn.Module
) -> dict[str, torch.Tensor]:
    """The stored geometry of a file timm converts as it loads, as meta tensors under the model's names.

    Each tensor's shape is the one stored under a name that ends in the model's (OpenCLIP's ``visual.trunk.pos_embed``;
    only where one shape is stored so: I-JEPA's file holds two encoders), else the converted head's (a projection
    made the head), else the model's own geometry (timm's files have it). A file without a head lists none: it is new.
    """
    with torch.device("meta"):
        shapes = timm.create_model(model_name, pretrained=False).state_dict()
    stored: dict[str, torch.Size] = {}
    for k, v in weights.items():  # one level of mappings (I-JEPA's encoder) read through
        for name, value in v.items() if isinstance(v, dict) else [("", v)]:
            if isinstance(value, torch.Tensor):
                stored[f"{k}.{name}" if name else k] = value.shape
    heads = tuple(f"{name}." for name in _classifiers(probe))
    shapes = {k: v for k, v in shapes.items() if not k.startswith(heads) or k in converted}
    for key, value in converted.items():
        found = {shape for name, shape in stored.items() if name == key or name.endswith(f".{key}")}
        if key.startswith(heads) or len(found) == 1:
            shapes[key] = torch.empty(value.shape if key.startswith(heads) else found.pop(), device="meta")
    return shapes


def _classifiers(probe: nn.Module) -> tuple[str, ...]:
    """The names of the model's classifier layers (``head``; a distilled DeiT's ``head_dist`` too), as timm's config."""
    names = probe.pretrained_cfg.get("classifier") if isinstance(probe.pretrained_cfg, dict) else None
    return (names,) if isinstance(names, str) else tuple(names or ())


def _body(probe: nn.Module) -> list[str]:
    """The names of the model's tensors besides its classifier, which a pretrained file must provide."""
    heads = tuple(f"{name}." for name in _classifiers(probe)) or ("\0",)
    return [name for name in probe.state_dict() if not name.startswith(heads)]


def _another_models(weights: dict[str, Any], probe: nn.Module) -> str | None:
    """What shows a weights file to be another model's (the refusal's words), else ``None``.

    timm renames some keys of released files before it loads them (DeiT III's ``gamma_1``, DINOv2's register
    tokens), so a few absent names are no proof; a numbered part absent whole (a block of another depth), or most of
    the model's tensors absent, is. The classifier is left out: a new head is made where the class count differs.
    """
    heads = tuple(f"{name}." for name in _classifiers(probe)) or ("\0",)
    needed = _body(probe)
    missing = [name for name in needed if name not in weights]
    # Its numbered parts: the name up to each of its numbers (layers.2, then layers.2.blocks.6 of a deeper stage).
    parts = lambda name: [".".join(name.split(".")[: i + 1]) for i, word in enumerate(name.split("."))  # noqa: E731
                          if word.isdigit()]  # fmt: skip
    present = {part for name in weights for part in parts(name)}
    absent = next((part for name in missing for part in parts(name) if part not in present), None)
    # A deeper model's file: timm skips its extra blocks without a word. Proof is a number past the model's own in
    # one of its lists, at any depth (blocks.6 of a 6-block model, Swin's layers.2.blocks.6); other lists (MAE's
    # decoder_blocks) are not.
    ours = {part for name in probe.state_dict() for part in parts(name)}
    lists = {part.rsplit(".", 1)[0] for part in ours}
    extra = next((part for name in weights if not name.startswith(heads) for part in parts(name)
                  if part not in ours and part.rsplit(".", 1)[0] in lists), None)  # fmt: skip
    if extra is not None:
        return f"it holds {extra}, which {type(probe).__name__} of this depth has not: a deeper or other model's file"
    if absent is None and len(missing) * 2 <= len(needed):
        return None
    return (f"it lacks {len(missing)} of the model's {len(needed)} tensors besides the head"
            f"{f', all of {absent}' if absent else ''}, the first {missing[0]}")  # fmt: skip


def as_timm_loads(weights: dict[str, Any], net: nn.Module) -> dict[str, Any] | None:
    """A weights file's tensors as timm converts them when it loads a pretrained file into ``net``, if it does.

    Released files keep their own layout (OpenAI's and OpenCLIP's CLIP, Meta's DINOv2 and ConvNeXt); the model's timm
    module converts them with its ``checkpoint_filter_fn``, which timm runs on every pretrained file. ``None`` where
    the module has none, or it cannot run on ``net`` (a model on the meta device).
    """
    convert = getattr(sys.modules.get(type(net).__module__), "checkpoint_filter_fn", None)
    if convert is None:
        return None
    try:
        return dict(convert(dict(weights), net))
    except Exception:  # another library's code on an untrusted file: the names as stored are checked instead
        return None


def load_error(err: BaseException) -> str:
    """The line of a weights file's load error that names its cause (a key, a shape), for a one-line refusal.

    torch's report starts "Error(s) in loading state_dict for ...:", and the line after it names the key.
    """
    lines = [line.strip() for line in str(err).strip("'\" \n").splitlines() if line.strip()]
    first = lines[1:2] if lines and lines[0].startswith("Error(s) in loading") else lines[:1]
    return first[0] if first else type(err).__name__


def _file_classes(weights: dict[str, Any], probe: nn.Module) -> dict[str, Any]:
    """The pretrained config's class count for a weights file: its classifier's rows, where it has one.

    timm keeps pretrained classifier weights only where the run's class count is the pretrained config's (1000 for
    ImageNet names), so a file whose head already predicts this data's classes was given a new head.
    """
    head = weights.get(f"{(_classifiers(probe) or ('',))[0]}.weight")
    return {} if head is None else {"num_classes": head.shape[0], "label_offset": 0}


def hub_or_cache(model_name: str, fix: str) -> dict[str, Any]:
    """``timm.create_model``'s keyword to read ``model_name``'s pretrained weights from the local cache, if it must.

    The hub is asked once: without the network huggingface_hub would retry for most of a minute.

    Args:
        model_name: A timm model name.
        fix: What to do instead, the end of the refusal.

    Returns:
        ``{}`` where the hub answers (or the weights come from elsewhere), else ``pretrained_cfg_overlay`` naming
        the weights an earlier download left in the cache.

    Raises:
        ConfigError: If the hub cannot be reached and the weights are not in its cache.
    """
    hub_id = getattr(get_pretrained_cfg(model_name), "hf_hub_id", None)
    why = hub_unreachable() if hub_id else None
    if why is None:
        return {}
    cached = cached_weights(hub_id)
    if cached is None:
        raise ConfigError(f"timm's pretrained weights of {model_name} come from the Hugging Face hub ({why}) and are "
                          f"not in its local cache; {fix}.")  # fmt: skip
    return {"pretrained_cfg_overlay": {"file": cached}}


def create_pretrained(hp: Any, probe: nn.Module, kwargs: dict[str, Any]) -> nn.Module:
    """The timm model of ``hp`` (a `ViTClassifier`'s hyperparameters) with pretrained weights: a file, or timm's own.

    Args:
        hp: The hyperparameters: ``model_name``, ``pretrained``, ``pretrained_file``.
        probe: The same model built on the meta device (its parameter names, to check a file's against).
        kwargs: The keyword arguments of ``timm.create_model`` for the architecture.

    Raises:
        ConfigError: For a file that is missing, unreadable or another model's, or hub weights that cannot be had.
    """
    if hp.pretrained_file is not None:
        path = Path(hp.pretrained_file).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"pretrained_file={hp.pretrained_file!r} does not exist; give the path of a weights file."
            )
        refuse_compressed(path, "pretrained_file")
        try:  # timm reads the file with torch.load(weights_only=True), or safetensors: no code runs from it
            # timm loads non-strictly when the class count changes, so a file of another model would be skipped
            # without a word and training would start from random weights: check the names first.
            weights = timm.models.load_state_dict(str(path))
            if not isinstance(weights, dict):
                raise KeyError(f"it holds a {type(weights).__name__}, not a state dict")
            lacking, converted = "it holds values that are not tensors", None
            if all(isinstance(v, torch.Tensor) for v in weights.values()):
                lacking = _another_models(weights, probe)
            if lacking:  # a layout timm converts as it loads (OpenCLIP's visual.trunk.*, I-JEPA's encoder)
                converted = as_timm_loads(weights, probe)
                if converted is not None and all(isinstance(v, torch.Tensor) for v in converted.values()):
                    lacking = _another_models(converted, probe)  # the words name what timm would load
                else:
                    converted = None
            if lacking:  # another depth or architecture: timm would leave its blocks random without a word
                raise KeyError(lacking)
            overlay = {"file": str(path), **_file_classes(weights if converted is None else converted, probe)}
            # The file's shapes, for the log line; its tensors are let go, as timm reads the file again.
            if converted is None:
                shapes = {k: torch.empty(v.shape, device="meta") for k, v in weights.items()}
            else:
                shapes = _converted_shapes(hp.model_name, weights, converted, probe)
            source = str(path) if converted is None else f"{path} (converted by timm from its own layout)"
            # Tensors besides the head whose names the file lacks (a variant's norm for fc_norm): timm leaves them
            # as initialised without a word, or fills them under names it converts (DeiT III's gamma_1).
            absent = [name for name in _body(probe) if name not in (weights if converted is None else converted)]
            del weights, converted
            drawn = torch.random.get_rng_state()  # the draws of the initial values, to tell which timm left so
            net = timm.create_model(hp.model_name, pretrained=True, **{**kwargs, "pretrained_cfg_overlay": overlay})
        except (*UNREADABLE, KeyError, SafetensorError, AttributeError, TypeError) as err:  # timm meets no mapping
            raise ConfigError(
                f"pretrained_file={hp.pretrained_file!r} is not a readable state dict of {hp.model_name} "
                f"({load_error(err)[:200]}); give a .pth/.safetensors file of that timm model's weights."
            ) from None
        left: list[str] = []
        if absent:  # the same draws without the file: a tensor still equal to its own was not loaded
            after = torch.random.get_rng_state()
            torch.random.set_rng_state(drawn)
            initial = timm.create_model(hp.model_name, pretrained=False, **kwargs).state_dict()
            torch.random.set_rng_state(after)  # the run's own draws go on as without the check
            loaded = net.state_dict()
            left = [name for name in absent if torch.equal(loaded[name], initial[name])]
        say_adapted(hp.model_name, probe, source, shapes, left)
        return net
    offline = ("give them as a file (--model.pretrained_file <weights>), or train from scratch "
               "(configs/own_images_scratch.yaml for your own images)")  # fmt: skip
    kwargs = {**kwargs, **hub_or_cache(hp.model_name, offline)}
    try:
        net = timm.create_model(hp.model_name, pretrained=True, **kwargs)
    except (OSError, RuntimeError, ValueError) as err:  # no network (the hub's errors are OSErrors), no weights
        raise ConfigError(
            f"timm's pretrained weights of {hp.model_name} could not be loaded ({type(err).__name__}); {offline}."
        ) from None
    say_adapted(hp.model_name, probe, "timm's pretrained weights")
    return net
