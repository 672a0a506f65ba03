"""Data past one machine's disk: splits written as LitData chunks by ``vitlit prepare``, streamed to every rank.

    python -m vitlit prepare --data ImageFolderDataModule --data.root ~/photos --output s3://bucket/photos
    python -m vitlit fit --config configs/digits.yaml --data vitlit.data.streaming.StreamingDataModule
        --data.input_dir s3://bucket/photos

Needs the ``streaming`` extra (``pip install -e ".[streaming]"``: Lightning's ``litdata``). LitData streams the chunks
from a folder or object storage (``s3://``, ``gs://``, ...), caches them locally, gives every rank and node its own
shard of each epoch, and keeps its place in the checkpoint, so a run stopped mid-epoch resumes at the sample it
stopped at. Each sample is a uint8 image (``raw``: at the stored size) or the image's encoded bytes (``encoded``,
decoded by vitlit's decoder in the workers); either way the batches go through the same pipeline as every other
source (`vitlit.data.pipeline`, on the training device).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import multiprocessing
import os
import signal
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.images import PIL_MODES, image_problem, open_image
from vitlit.data.pipeline import ToStoredImage, resized_side
from vitlit.data.table import file_inside
from vitlit.errors import CheckFailed, ConfigError
from vitlit.owned import digest
from vitlit.private import litdata_formats
from vitlit.text import quoted, shown

#: vitlit's description of a prepared data set, itself a one-item LitData set beside the splits, so that it is
#: written and read by the storage code that moves the chunks (any folder or bucket LitData reaches).
META = "vitlit"
SPLITS = ("train", "val", "test")
#: The list of every file ``prepare`` wrote, with its hash (`vitlit.owned`): ``--overwrite`` replaces only those.
MANIFEST = ".vitlit-prepare"
#: The URL schemes LitData writes to (``optimize``: its ``litdata.constants._SUPPORTED_PROVIDERS``), and those it
#: reads from besides (its resolver's cloud prefixes). LitData takes any other ``scheme://`` for a local folder's
#: name: ``bogus://user:password@host/x`` was written under the current folder as ``bogus:/user:password@host/x``.
WRITE_SCHEMES = ("s3", "gs", "r2")
READ_SCHEMES = (*WRITE_SCHEMES, "azure", "hf")
#: The largest ``index.json`` vitlit lets LitData read: LitData reads an index whole before anything else, so a
#: device (``/dev/zero``), a FIFO or a file of gigabytes in its place hung the run before a word. An index names
#: each chunk in about 90 bytes: 16 MiB holds some 180,000 chunks, 11 TB of the default 64 MB chunks in one split.
INDEX_BYTES = 16 * 2**20
#: The one item of vitlit's description (`write_meta`): its JSON text.
DESCRIPTION_ITEM = {"json": "str"}
#: The fields of an index's ``config`` that change how LitData reads the chunks, as LitData writes them for ``prepare``:
#: no compression, no encryption, LitData's default item loader. Any other value is an index another tool wrote.
PLAIN_CONFIG = {"compression": None, "compression_level": None, "compression_batch_size": None,
                "ipc_compression": None, "encryption": None, "item_loader": "PyTreeLoader"}  # fmt: skip
#: Every field of an index's ``config`` and of its chunks that LitData writes for ``prepare``; any other (an MDS
#: ``format``, a ``temporal_schema``, a chunk's ``temporal_frames``) makes LitData read the bytes another way.
CONFIG_FIELDS = {*PLAIN_CONFIG, "chunk_size", "chunk_bytes", "data_format", "data_spec", "types"}
CHUNK_FIELDS = {"filename", "chunk_bytes", "chunk_size", "dim"}


def check_scheme(where: str, flag: str, schemes: tuple[str, ...]) -> None:
    """Refuse a URL whose scheme LitData does not know, in one line: LitData would take it for a local folder's name.

    Args:
        where: The folder or URL given.
        flag: The option that gave it, to name.
        schemes: The schemes LitData knows for this use (`WRITE_SCHEMES`, `READ_SCHEMES`), exactly as written: LitData
            compares them case by case, so ``S3://`` is a folder too.
    """
    scheme = where.split("://", 1)[0] if "://" in where else None
    if scheme is not None and scheme not in schemes:
        raise ConfigError(f"{flag} {shown(where)} names the scheme {shown(scheme)}://, which LitData does not know "
                          f"(it would take the URL for a local folder's name); give a folder, or a URL of "
                          f"{', '.join(s + '://' for s in schemes)}.")  # fmt: skip


def split_item(format: str) -> dict[str, str]:
    """What ``prepare`` writes as one item of a split in ``format``: each key and LitData's format of its value.

    The image (a uint8 array, or its encoded bytes), its label, its position in the split.
    """
    return {"image": "numpy" if format == "raw" else "bytes", "label": "int", "index": "int"}


def litdata() -> Any:
    """The ``litdata`` package, or one line saying which extra installs it."""
    try:
        import litdata
    except ImportError:
        raise ConfigError('LitData streaming needs the litdata package; pip install -e ".[streaming]"') from None
    return litdata


#: The item formats vitlit reads from chunks (``prepare`` writes ``str``, ``int``, ``bytes`` and ``numpy``): data that
#: LitData turns into values by their bytes alone. Every other format of LitData's is refused before a byte of it is
#: decoded: ``pickle`` (and ``graph``, ``pil``-in-pickle sub-formats) would run code from the chunk when read.
SAFE_FORMATS = ("str", "int", "bytes", "numpy", "no_header_numpy", "tensor", "no_header_tensor")


class RefusedFormat:
    """A LitData serializer for a format vitlit never reads: LitData meets it only on a chunk vitlit did not write.

    `stream` checks each index before LitData reads a chunk; this is the second lock on the same door, for a path
    through LitData's reader that the index check did not foresee: it refuses before the item's bytes are decoded.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def _refuse(self, *_: Any) -> Any:
        raise ConfigError(f"a chunk declares the item format {self.name!r}, which vitlit never reads (it can run "
                          f"code); prepare the data set again with vitlit prepare.")  # fmt: skip

    setup = deserialize = serialize = _refuse

    def can_serialize(self, item: Any) -> bool:
        return False


def stream(where: str, item: dict[str, str] = DESCRIPTION_ITEM, count: int | None = 1, **kwargs: Any) -> Any:
    """LitData's ``StreamingDataset`` of ``where``, admitted by its index before a chunk is read: vitlit's one reader.

    Every folder vitlit reads from a prepared data set (the description and each split) comes through here, local or
    remote. `check_index` admits an index only as ``prepare`` writes it (its item's layout, no compression, every
    chunk inside its folder and, locally, whole) before LitData opens it; a remote one as LitData fetched it (its
    ``index.json``, nothing else) as the dataset was made. The serializers given to LitData refuse an item format
    that can carry code once more (`RefusedFormat`), and an item LitData cannot read is one line naming its chunk
    (`chunk_stream`).

    Args:
        where: The folder or URL of one LitData set.
        item: What one item holds (`split_item`); by default vitlit's description's one item.
        count: The items the set holds (the description's count of a split), or ``None`` where unknown.
        **kwargs: ``StreamingDataset``'s options.
    """
    refused = {name: RefusedFormat(name) for name in litdata_formats() if name not in SAFE_FORMATS}
    local = "://" not in where
    where = str(Path(where).expanduser()) if local else where
    if local:  # before LitData reads a byte: it reads index.json whole, whatever it is
        names = check_index(Path(where) / "index.json", where, True, item, count)
    dataset = chunk_stream()(where, serializers=refused, **kwargs)
    if not local:
        names = check_index(Path(dataset.input_dir.path) / "index.json", where, False, item, count)
    dataset.where, dataset.chunk_names = where, tuple(names or ())
    return dataset


def index_text(index: Path, where: str) -> str:
    """The text of ``index``, refused in one line unless a regular file of at most `INDEX_BYTES`."""
    try:
        status = index.stat()
    except OSError:
        raise ConfigError(f"{shown(where)} has no index.json; prepare the data set again with vitlit "
                          f"prepare.") from None  # fmt: skip
    if not stat.S_ISREG(status.st_mode) or status.st_size > INDEX_BYTES:
        what = "no regular file" if not stat.S_ISREG(status.st_mode) else f"{status.st_size:,} bytes"
        raise ConfigError(f"{shown(where)}/index.json is {what}, no index vitlit prepare writes (a file of at most "
                          f"{INDEX_BYTES:,} bytes); prepare the data set again.")  # fmt: skip
    with index.open("rb") as f:
        return f.read(INDEX_BYTES + 1).decode("utf-8")


def check_index(index: Path, where: str, local: bool, item: dict[str, str], count: int | None) -> list[str]:
    """Refuse, in one line naming the file and the field, a LitData index other than one ``prepare`` writes.

    No item format that may carry code, no chunk outside its folder, the item's layout (``data_format``,
    ``data_spec``), no compression or encryption or another item loader, and chunks whose ``chunk_size`` fields add
    up to the ``count`` the description names: LitData reads each of these fields as it is, and a crafted one ended
    mid-epoch in its traceback.

    Args:
        index: The ``index.json``: the folder's own, or LitData's copy in the cache of a remote one.
        where: The folder or URL, to name.
        local: Whether the chunks lie beside ``index``: then each must hold the bytes and the items its index says
            (a copy cut short is said before training, not as a decoding error mid-epoch).
        item: The layout of one item (`split_item`, `DESCRIPTION_ITEM`).
        count: The number of items the set holds, or ``None`` where unknown.

    Returns:
        The chunks' file names, in the index's order.
    """
    named = f"{shown(where)}/index.json"
    try:
        described = json.loads(index_text(index, where))
        config, chunks = described["config"], described["chunks"]
        formats = config["data_format"]
        unsafe = next((f for f in formats if not isinstance(f, str) or f.split(":")[0] not in SAFE_FORMATS
                       or not all(part.isdigit() for part in f.split(":")[1:])), None)  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{named} cannot be read ({type(err).__name__}); prepare the data set again with vitlit "
                          f"prepare.") from None  # fmt: skip
    if unsafe is not None:
        raise ConfigError(f"{named} declares the item format {shown(unsafe)!r}; vitlit reads only "
                          f"{', '.join(SAFE_FORMATS)} (never pickled items, which can run code): prepare the data "
                          f"set again with vitlit prepare.")  # fmt: skip
    wrong = next((f for f in config if f not in CONFIG_FIELDS), None) if isinstance(config, dict) else "config"
    wrong = wrong or next((f for f, value in PLAIN_CONFIG.items() if config.get(f) != value), None)
    wrong = wrong or ("data_format" if formats != list(item.values()) else None)
    wrong = wrong or ("data_spec" if spec_keys(config.get("data_spec")) != list(item) else None)
    if wrong is not None:
        value = config.get(wrong) if isinstance(config, dict) else config
        raise ConfigError(f"{named}: its config field {wrong!r} is {short(value)}, which vitlit prepare never writes "
                          f"(items {short(item)}, no compression or encryption, LitData's PyTreeLoader); prepare the "
                          f"data set again.")  # fmt: skip
    if not isinstance(chunks, list) or not chunks:
        raise ConfigError(f"{named}: its field 'chunks' is {short(chunks)}, not a list of the chunks it holds; "
                          f"prepare the data set again.")  # fmt: skip
    names = [check_entry(chunk, where) for chunk in chunks]
    total = sum(chunk["chunk_size"] for chunk in chunks)
    if count is not None and total != count:  # LitData would read that many items, whatever the chunks hold
        raise ConfigError(f"{named}: its chunks' 'chunk_size' fields add up to {total:,} items, not the {count:,} "
                          f"vitlit's description names: the index is damaged; prepare the data set again.")  # fmt: skip
    for chunk in chunks if local else ():
        check_chunk(index.parent, chunk, where)
    return names


def check_entry(chunk: Any, where: str) -> str:
    """Refuse one entry of an index's ``chunks`` unlike those ``prepare`` writes; return the chunk's file name."""
    name = chunk.get("filename") if isinstance(chunk, dict) else None
    if not isinstance(name, str) or Path(name).name != name or name.startswith(".") or "\\" in name:
        raise ConfigError(f"{shown(where)}/index.json names the chunk {shown(name)!r}, which is no file of its "
                          f"folder; prepare the data set again.")  # fmt: skip
    fields = {"chunk_size": positive(chunk.get("chunk_size")), "chunk_bytes": positive(chunk.get("chunk_bytes")),
              "dim": chunk.get("dim") is None, **{f: False for f in chunk if f not in CHUNK_FIELDS}}  # fmt: skip
    wrong = next((f for f, ok in fields.items() if not ok), None)
    if wrong is not None:
        raise ConfigError(f"{shown(where)}/index.json: the chunk {shown(name)!r} has the field {wrong!r} "
                          f"{short(chunk.get(wrong))}, which vitlit prepare never writes; prepare the data set "
                          f"again.")  # fmt: skip
    return name


def check_chunk(folder: Path, chunk: dict[str, Any], where: str) -> None:
    """Refuse a local chunk's file unlike its entry of the index (`check_entry`), in one line naming it.

    It must lie inside ``folder``, be as long as its entry says, and begin with LitData's table of its items: their
    count (the entry's ``chunk_size``) and where each begins and ends, in order, inside the file (LitData may append
    the same rows in Arrow's format after them). A chunk with another table (offsets that lie, a file cut short and
    its entry with it) made LitData read past the items.
    """
    name = chunk["filename"]
    path = folder / name
    if path.is_symlink() or (file_inside(folder, name) is None and path.exists()):
        raise ConfigError(f"{shown(where)}/index.json names the chunk {shown(name)!r}, a link or no file inside "
                          f"its folder; prepare the data set again.")  # fmt: skip
    size = path.stat().st_size if path.is_file() else None
    if size != chunk["chunk_bytes"]:
        found = "missing" if size is None else f"{size:,} bytes, not the {chunk['chunk_bytes']} of its index"
        raise ConfigError(f"{path} is {found}: the copy is incomplete; copy or prepare the data set again.")
    items = chunk["chunk_size"]
    table = 4 * (items + 2)  # the count, and where each item begins, and where the last ends
    with path.open("rb") as f:
        head = np.frombuffer(f.read(table), "<u4") if table <= size else np.zeros(0, "<u4")
    ends = head[1:].astype(np.int64)  # where each item begins, and where the last ends (an Arrow copy may follow)
    if len(head) != items + 2 or head[0] != items or head[1] != table or ends[-1] > size or (np.diff(ends) < 0).any():
        raise ConfigError(f"{path} does not hold the {items:,} items its index names (its table of where each item "
                          f"lies disagrees): the chunk is damaged; copy or prepare the data set again.")  # fmt: skip


def positive(value: Any) -> bool:
    """Whether ``value`` is a count of 1 or more (an int, not a bool)."""
    return type(value) is int and value > 0


def short(value: Any) -> str:
    """A value read from a file, for a message: as JSON, escaped and masked, cut to 80 characters."""
    text = shown(json.dumps(value, default=str))
    return text if len(text) <= 80 else f"{text[:77]}..."


def spec_keys(spec: Any) -> list[str] | None:
    """The keys of the one flat dict that a ``data_spec`` describes (LitData's tree, as JSON text); else ``None``.

    ``prepare`` writes each item as one dict of plain values; a spec of another type (a list, a class LitData
    rebuilds) or of nested values handed vitlit something other than the dict it reads.
    """
    leaf = {"type": None, "context": None, "children_spec": []}
    try:
        _, node = json.loads(spec)
        keys, children = json.loads(node["context"]), node["children_spec"]
        ok = node["type"] == "builtins.dict" and len(keys) == len(children) and all(c == leaf for c in children)
    except (ValueError, TypeError, KeyError):
        return None
    return keys if ok else None


@functools.cache
def chunk_stream() -> type:
    """LitData's ``StreamingDataset``, where an item LitData cannot read is one line naming its chunk.

    The index is checked before a chunk is read (`check_index`); an item is read only as the epoch reaches it. A
    chunk damaged inside an item (a numpy header naming no dtype, a shape that lies) failed mid-epoch in LitData's
    40-line traceback. Pickled by its name in this module (spawned DataLoader workers), which `__getattr__` gives.
    """

    class ChunkStream(litdata().StreamingDataset):
        #: The folder or URL, and its chunks' file names in the index's order (`stream` sets them).
        where: str = ""
        chunk_names: tuple[str, ...] = ()

        def __getitem__(self, index: Any) -> Any:
            try:
                return super().__getitem__(index)
            except ConfigError:
                raise
            except Exception as err:
                chunk = getattr(index, "chunk_index", None)  # an int, or numpy's in the loader's workers
                known = isinstance(chunk, (int, np.integer)) and 0 <= chunk < len(self.chunk_names)
                name = self.chunk_names[int(chunk)] if known else None
                place = f"{shown(self.where)}/{shown(name)}" if name else shown(self.where)
                raise ConfigError(f"{place}: item {getattr(index, 'index', index)} cannot be read ({quoted(err)}); "
                                  f"the chunk is damaged: copy or prepare the data set again.") from None  # fmt: skip

    ChunkStream.__qualname__ = "ChunkStream"
    return ChunkStream


def __getattr__(name: str) -> Any:
    """``ChunkStream`` (`chunk_stream`), made on first use: LitData is an optional dependency."""
    if name == "ChunkStream":
        return chunk_stream()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_meta(input_dir: str) -> dict[str, Any]:
    """What ``vitlit prepare`` recorded: class names, channels, format, stored size, statistics, split sizes.

    Each field is checked as ``prepare`` writes it, and, in a folder, each split's index (`check_index`) and its
    hash where the description has one: a damaged or foreign set is one line before a run starts.
    """
    check_scheme(input_dir, "--data.input_dir", READ_SCHEMES)
    local = Path(input_dir).expanduser()
    if "://" not in input_dir and not (local / META / "index.json").is_file():
        raise ConfigError(f"--data.input_dir {input_dir} holds no data set written by vitlit prepare (no "
                          f"{META}/index.json); write one with vitlit prepare --output {input_dir}.")  # fmt: skip
    try:
        meta = json.loads(stream(f"{input_dir.rstrip('/')}/{META}")[0]["json"])
    except ConfigError:
        raise
    except Exception as err:  # an unreachable bucket, missing credentials, a damaged index
        raise ConfigError(f"--data.input_dir {input_dir}: vitlit's description of the data set cannot be read "
                          f"({quoted(err)}).") from None  # fmt: skip
    meta = meta if isinstance(meta, dict) else {}
    wrong = next((key for key, ok in _DESCRIBED.items() if not _holds(ok, meta, key)), None)
    if wrong is not None:  # a description of another vitlit, or edited
        raise ConfigError(f"--data.input_dir {input_dir}: vitlit's description of the data set has no valid "
                          f"{wrong!r} ({short(meta.get(wrong))}); prepare the data set again.")  # fmt: skip
    if "://" in input_dir:  # a bucket's indexes are checked as LitData fetches them (`stream`)
        return meta
    for name, count in meta["splits"].items():
        where = f"{input_dir.rstrip('/')}/{name}"
        index_text(local / name / "index.json", where)  # a regular file of a bounded size, before it is hashed
        if name in meta.get("indexes", {}) and digest(local / name / "index.json") != meta["indexes"][name]:
            # a split written by another prepare (a half-finished one, a copy of other data)
            raise ConfigError(f"--data.input_dir {input_dir}: the {name} split is not the one vitlit's description "
                              f"was written with (its index.json differs); prepare the data set again.")  # fmt: skip
        check_index(local / name / "index.json", where, True, split_item(meta["format"]), count)
    return meta


def _holds(ok: Any, meta: dict[str, Any], key: str) -> bool:
    """Whether the description's field ``key`` is as ``prepare`` writes it (``ok``), or one it may lack.

    An earlier vitlit's description has no ``indexes`` (nor has a bucket's), ``eval_size``, ``native_size`` or
    ``interpolation``.
    """
    try:
        return bool(ok(meta[key], meta))
    except (KeyError, TypeError, ValueError, OverflowError):
        return key in ("indexes", "eval_size", "native_size", "interpolation") and key not in meta


def _numbers(values: Any, meta: dict[str, Any]) -> bool:
    """Whether ``values`` are one finite number per channel."""
    return len(values) == meta["in_chans"] and all(type(v) in (int, float) and np.isfinite(v) for v in values)


#: Each field of vitlit's description, and what ``prepare`` writes in it (given the description: the channels).
_DESCRIBED = {
    "class_names": lambda v, m: type(v) is list and v and all(isinstance(n, str) for n in v),
    "in_chans": lambda v, m: type(v) is int and v in PIL_MODES,
    "format": lambda v, m: v in ("raw", "encoded"),
    "size": lambda v, m: positive(v),  # training's stored size
    "eval_size": lambda v, m: positive(v),  # validation's and test's (an earlier vitlit's description: "size")
    "native_size": lambda v, m: v is None or positive(v),  # the images' own size, where they share one
    "interpolation": lambda v, m: v in ("bilinear", "bicubic"),  # how eval_size was resampled
    "mean": _numbers,
    "std": lambda v, m: _numbers(v, m) and all(s > 0 for s in v),  # images are divided by it
    "splits": lambda v, m: type(v) is dict and "train" in v and all(k in SPLITS and positive(n) for k, n in v.items()),
    "indexes": lambda v, m: type(v) is dict and all(k in m["splits"] and isinstance(h, str) for k, h in v.items()),
}


class Sample:
    """A streamed sample as ``(uint8 image, class index)``: LitData's ``transform``, run in its workers.

    A predicted stream's sample also carries its position in the split as ``prepare`` stored it: LitData hands the
    items out worker by worker and each process a block of its own, so predictions are put back in order by it.

    Args:
        decode: The per-image geometry (`vitlit.data.pipeline.ToStoredImage`) of encoded images; ``None`` for raw ones.
        where: The split, to name in messages.
        classes: The number of classes the description names: a label past them is refused, naming its sample.
        shape: The shape of a raw image as the description names it (channels, size, size): an item whose header
            says another (the same bytes as 3 x 16 x 64) is refused, naming it, not stacked into a batch.
        indexed: Also hand over the sample's stored position (``(image, class index, position)``).
    """

    def __init__(
        self, decode: ToStoredImage | None, where: str, classes: int, shape: tuple[int, ...], indexed: bool = False
    ) -> None:
        self.decode, self.where, self.classes, self.shape, self.indexed = decode, where, classes, shape, indexed

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, ...]:
        image, label = self._image_and_label(sample)
        return (image, label, int(sample["index"])) if self.indexed else (image, label)

    def _image_and_label(self, sample: dict[str, Any]) -> tuple[torch.Tensor, int]:
        label, image = sample["label"], sample["image"]
        if not isinstance(label, (int, np.integer)) or isinstance(label, bool) or not 0 <= label < self.classes:
            # the loss's "target out of bounds" traceback, a step later
            raise ConfigError(f"{self.where} sample {sample['index']}: label {short(label)} is none of the "
                              f"{self.classes} classes the data set's description names; prepare the data set "
                              f"again.")  # fmt: skip
        label = int(label)
        if self.decode is None:
            if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.shape != self.shape:
                found = f"{image.dtype} of shape {image.shape}" if isinstance(image, np.ndarray) else short(image)
                raise ConfigError(f"{self.where} sample {sample['index']}: the image is {found}, not the uint8 "
                                  f"{self.shape} of the data set's description; prepare the data set "
                                  f"again.")  # fmt: skip
            return torch.from_numpy(np.ascontiguousarray(image)), label
        if not isinstance(image, (bytes, bytearray, memoryview)):
            raise ConfigError(f"{self.where} sample {sample['index']}: the image is {short(image)}, not an image "
                              f"file's bytes; prepare the data set again.")  # fmt: skip
        data = bytes(image)
        try:
            problem = image_problem(data)
            if problem is not None:
                raise ValueError(problem)
            image = open_image(io.BytesIO(data), PIL_MODES[self.decode.in_chans], self.decode.size)
        except (OSError, SyntaxError, ValueError) as err:
            raise ConfigError(f"{self.where} sample {sample['index']}: the image cannot be decoded ({err}); "
                              f"prepare the data set again without it.") from None  # fmt: skip
        return self.decode(image), label


class StreamingDataModule(ImageClassificationDataModule):
    """A data set written by ``vitlit prepare`` as LitData chunks, streamed from a folder or object storage.

    Class names, channels, image format and size come from what ``prepare`` recorded. Every rank and node streams
    its own shard of each epoch (LitData's); a run stopped mid-epoch resumes at the sample it stopped at (the
    loader's state is in the checkpoint). ``source`` may not be ``memory`` (the chunks are streamed, never held
    whole), nor ``class_balanced`` (it needs every label before the first batch).

    Args:
        input_dir: Where ``vitlit prepare`` wrote: a folder, or a URL LitData reads (``s3://``, ``gs://``, ...).
        cache_dir: Local folder for chunks of a remote ``input_dir`` (LitData's default under ``~/.lightning``).
        max_cache_size: LitData's bound on that cache, e.g. ``100GB``.
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule` (``in_chans`` and
            ``val_size`` are those of the prepared data).
    """

    #: A run stopped mid-epoch resumes at its place in the stream (`vitlit.runs.checkpoint_io` says so).
    resumes_in_place = True

    def __init__(
        self, input_dir: str, cache_dir: str | None = None, max_cache_size: str = "100GB", **kwargs: Any
    ) -> None:
        meta = read_meta(str(input_dir))
        if kwargs.get("in_chans", meta["in_chans"]) != meta["in_chans"]:
            raise ConfigError(f"{input_dir} holds images with {meta['in_chans']} channel(s); drop --data.in_chans.")
        if kwargs.get("source") == "memory" or kwargs.get("class_balanced"):
            raise ConfigError("StreamingDataModule streams its chunks: --data.source memory (all images in memory) "
                              "and --data.class_balanced true (every label first) are the other modules'.")  # fmt: skip
        kwargs["in_chans"], kwargs["source"] = meta["in_chans"], "workers"  # what prepare wrote; streamed, never held
        # Images that share one size are kept at it, as the in-memory source keeps them: the device resizes and crops.
        self.native_size = meta.get("native_size")
        super().__init__(**kwargs)
        self.input_dir, self.cache_dir, self.max_cache_size = str(input_dir).rstrip("/"), cache_dir, max_cache_size
        self.meta = meta
        # Raw evaluation images resized for one crop (not kept at their native size) fit that geometry only.
        resized = meta["format"] == "raw" and "eval_size" in meta and meta.get("native_size") is None
        wanted = resized_side(self.img_size, self.crop_pct)
        if resized and (meta["eval_size"], meta.get("interpolation")) != (wanted, self.interpolation):
            raise ConfigError(f"{input_dir} holds its evaluation images resized to {meta['eval_size']} px "
                              f"({meta.get('interpolation')}), but this run evaluates at floor(img_size / crop_pct) = "
                              f"{wanted} px ({self.interpolation}), which would resample them twice; give the "
                              f"--data.img_size, --data.crop_pct and --data.interpolation it was prepared with, or "
                              f"prepare it again with these.")  # fmt: skip
        # So do raw training images: another stored size would crop other pixels than the in-memory source does.
        wanted = self.store_size or self.img_size
        if resized and meta["size"] != wanted:
            raise ConfigError(f"{input_dir} holds its training images resized to {meta['size']} px, but this run "
                              f"stores them at --data.store_size or --data.img_size = {wanted} px, which would "
                              f"resample them twice; give the {meta['size']} px it was prepared with "
                              f"(--data.store_size or --data.img_size), or prepare it again with these.")  # fmt: skip
        self._train_loader: Any = None  # its place in the stream goes into checkpoints (`state_dict`)
        self._resume_from: dict[str, Any] | None = None
        self._resume_epoch_done = False  # the checkpoint's epoch had handed out every batch asked of it
        #: The stored position and the class index of each item predicted so far, batch by batch, for the rows of
        #: ``predictions.csv`` (`vitlit.runs.prediction_table`): a stream keeps no file names, and hands items out
        #: worker by worker.
        self.predicted_indices: list[torch.Tensor] | None = None
        self.predicted_labels: list[torch.Tensor] = []
        self.default_mean, self.default_std = tuple(meta["mean"]), tuple(meta["std"])

    @property
    def class_names(self) -> list[str]:
        """The class names ``prepare`` recorded."""
        return list(self.meta["class_names"])

    @property
    def has_test_split(self) -> bool:
        """Whether ``prepare`` wrote a test split."""
        return "test" in self.meta["splits"]

    @property
    def description(self) -> str:
        """What the run card records as the data."""
        return f"LitData chunks at {self.input_dir} ({self.meta['format']}, {self.meta['splits']})"

    def stored_size(self, train: bool) -> int:
        """Raw chunks: the size ``prepare`` stored the split at; encoded ones are stored as the base class says.

        Raw chunks hold each split at its stored size: ``size`` for training, ``eval_size`` for evaluation (an earlier
        vitlit's hold every split at ``size``).
        """
        if self.meta["format"] != "raw":
            return super().stored_size(train)
        return self.meta["size"] if train else self.meta.get("eval_size", self.meta["size"])

    def _stream(self, split: str, train: bool, indexed: bool = False) -> Any:
        if split not in self.meta["splits"]:
            raise ConfigError(f"{self.input_dir} has no {split} split; vitlit prepare writes one where the data "
                              f"module has it.")  # fmt: skip
        raw, where = self.meta["format"] == "raw", f"{self.input_dir}/{split}"
        # Encoded images are brought to the stored size as the in-memory source stores them.
        decode = None if raw else ToStoredImage(self.in_chans, self.stored_size(train), self.interpolation)
        shape = (self.in_chans, self.stored_size(train), self.stored_size(train))  # what a raw item holds
        return stream(
            where, split_item(self.meta["format"]), self.meta["splits"][split], cache_dir=self.cache_dir,
            max_cache_size=self.max_cache_size, shuffle=train, drop_last=train, seed=self.run_seed(),
            transform=Sample(decode, where, len(self.meta["class_names"]), shape, indexed),
        )  # fmt: skip

    def setup(self, stage: str) -> None:
        """The streams ``stage`` reads (nothing is read before the first batch)."""
        if stage in ("fit", "validate") and self.val_set is None:
            self.train_set, self.val_set = self._stream("train", True), self._stream("val", False)
        if stage == "test" and self.test_set is None:
            self.test_set = self._stream("test", False)
        if stage == "predict" and self.predict_set is None:
            self.predict_set = self._stream("test", False, indexed=True) if self.predict_dir is None else None
            if self.predict_set is None:
                super().setup(stage)

    def _loader(self, split: Any, train: bool) -> Any:
        if split is None or not hasattr(split, "input_dir"):  # not a stream: predict_dir's files
            return super()._loader(split, train)
        self._device_transforms.pop(True, None)
        if split is self.predict_set:
            self.predicted_indices, self.predicted_labels = [], []  # filled batch by batch (`on_before_batch_transfer`)
        loader = epoch_loader()(
            split, batch_size=self.batch_size, num_workers=self.workers,
            pin_memory=self.pin_memory and torch.cuda.is_available(), persistent_workers=False,
        )  # fmt: skip
        if train:
            self._train_loader = loader
            loader.asked = self._batches_asked
            if self._resume_from is not None:  # a checkpoint's place in the stream (`load_state_dict`)
                loader.load_state_dict(self._resume_from)
                # Saved at an epoch's end under --trainer.limit_train_batches: LitData sees the stream unfinished
                # and would go on with its leftover samples, where the unbroken run starts the next epoch afresh.
                loader.restore = loader.restore and not self._resume_epoch_done
                self._resume_from = None
        if len(loader) == 0:  # LitData shares a split out by batches of every worker of every process
            rank, world_size = self.rank_and_world_size()
            where = split.input_dir.path or split.input_dir.url  # LitData's Dir: where the split is read from
            raise ConfigError(f"{where} leaves process {rank} of {world_size} no batch of {self.batch_size} with "
                              f"{max(1, self.workers)} worker(s) per process; use a smaller --data.batch_size or "
                              f"--data.num_workers.")  # fmt: skip
        return loader

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """A predicted stream's batch without its items' stored positions, which `predicted_indices` keeps."""
        if isinstance(batch, (list, tuple)) and len(batch) == 3 and self.predicted_indices is not None:
            images, targets, indices = batch
            self.predicted_indices.append(torch.as_tensor(indices).cpu())
            self.predicted_labels.append(torch.as_tensor(targets).cpu())
            batch = [images, targets]
        return super().on_before_batch_transfer(batch, dataloader_idx)

    def _batches_asked(self) -> float:
        """The training batches Lightning asks of each epoch (``num_training_batches``); infinite before it knows."""
        asked = getattr(self.trainer, "num_training_batches", float("inf"))
        return asked if isinstance(asked, int) else float("inf")

    def state_dict(self) -> dict[str, Any]:
        """The training stream's place (LitData's loader state) and whether its epoch was done, in every checkpoint.

        Lightning saves and restores a stateful loader itself, but restores it only into a loader it builds after the
        checkpoint's loops are read; vitlit's schedule asks for the run's length (and so builds the loader) before.
        The data module's own state is restored before any loader exists, and applied to the first training loader.
        """
        loader = self._train_loader
        if loader is None:
            return {}
        # The split's index digest (where prepare recorded one): a place means nothing in chunks prepared again.
        prepared = (self.meta.get("indexes") or {}).get("train")
        return {"train_stream": loader.state_dict(), "epoch_done": loader.epoch_done(), "prepared": prepared}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's place in the stream, and whether its epoch was done, for the next training loader.

        A place in chunks prepared again since (another index) would go on in other data, as if it were exact.
        """
        prepared, now = state_dict.get("prepared"), (self.meta.get("indexes") or {}).get("train")
        # An evaluation takes the weights only; without a Trainer (or with a stand-in) it is taken as a fit.
        fitting = getattr(getattr(self.trainer, "state", None), "fn", "fit") == "fit"
        if fitting and prepared is not None and now is not None and prepared != now:
            raise ConfigError(f"{self.input_dir} was prepared again since this checkpoint was saved, so its place in "
                              f"the training stream is in other data; resume on the chunks it trained on, or start "
                              f"a new run.")  # fmt: skip
        self._resume_from = state_dict.get("train_stream")
        self._resume_epoch_done = bool(state_dict.get("epoch_done", False))

    def train_dataset(self) -> Any:
        return self._stream("train", True)

    def val_dataset(self) -> Any:
        return self._stream("val", False)

    def test_dataset(self) -> Any:
        return self._stream("test", False)


@functools.cache
def epoch_loader() -> type:
    """LitData's ``StreamingDataLoader``, whose resumed epoch ends when its last batch has been handed out.

    A loader restored from a checkpoint keeps LitData's ``restore`` flag until an iteration runs to its end. Lightning
    stops asking after an epoch's last batch without running the iterator out, so the flag outlived the resumed epoch
    and the next epoch replayed the checkpoint's place at the end of the stream: no batch, an epoch skipped (hostile
    round 6, class 5). An epoch whose batches were all handed out is over, whoever stops iterating; under
    ``--trainer.limit_train_batches`` that is the batches Lightning asks for, not the stream's.
    """

    class EpochLoader(litdata().StreamingDataLoader):
        #: The batches Lightning asks of an epoch, where known (its ``num_training_batches``, the data module's).
        asked: Callable[[], float] | None = None

        def epoch_batches(self) -> float:
            """The batches one epoch hands out: all of them, or fewer where ``--trainer.limit_train_batches`` says."""
            return min(len(self), self.asked()) if self.asked is not None else len(self)

        def epoch_done(self) -> bool:
            """Whether this epoch's batches (those Lightning asks for: `epoch_batches`) were all handed out.

            The count of samples handed out this epoch is read (not set) where the loader keeps it: its public
            state_dict() would do, but asking it of a restored stream moves where that stream resumes.
            """
            return bool(self._num_samples_yielded_streaming >= self.epoch_batches() * self.batch_size)

        def __iter__(self) -> Any:
            # Judged against the batches Lightning asks for: under a limit, the epoch ends before the stream does.
            if self.restore and self.epoch_done():
                self.restore = False  # the resumed epoch is done: the next one starts afresh
            return super().__iter__()

    return EpochLoader


def optimize(**kwargs: Any) -> None:
    """``litdata.optimize(**kwargs)`` where its Ctrl-C handler cannot end this process, and on Linux forked.

    LitData installs a Ctrl-C handler that ends its process with status 0 (``os._exit``), and leaves it installed.
    On Linux it runs in a forked process of its own, as do its workers (forked, as DataLoader's: spawned, each would
    import vitlit, Lightning and torch afresh, seconds per split; benchmarks/RESULTS.md#prepare-forked), so that
    Ctrl-C stops this process as anywhere else: status 130, the staged output removed. Elsewhere (spawned workers) the
    handler is put back afterwards, so that a later fit in the same process (a notebook) stops at a step on Ctrl-C.
    """
    where = shown(kwargs.get("output_dir"))
    if sys.platform != "linux":
        handler = signal.getsignal(signal.SIGINT)
        try:
            litdata().optimize(**kwargs)
        except ConfigError:
            raise
        except Exception as err:
            raise ConfigError(_could_not_write(where, quoted(err))) from None
        finally:
            signal.signal(signal.SIGINT, handler)
        return
    fork = multiprocessing.get_context("fork")
    outcome, told = fork.Pipe(duplex=False)
    writer = fork.Process(target=_optimize_and_tell, args=(told, kwargs), name="vitlit-optimize")
    writer.start()
    told.close()
    try:
        said = outcome.recv()
    except EOFError:  # ended without a word: killed, or LitData's Ctrl-C handler with it
        said = None
    except BaseException:  # Ctrl-C here: LitData's handler stops its workers, given a few seconds to
        os.killpg(writer.pid, signal.SIGINT)
        _end(writer, wait=3)
        raise
    _end(writer, wait=10)
    if said is None:
        code = writer.exitcode or 0
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"ended with status {code}"
        raise CheckFailed(f"LitData's writer of {where} {how} before it finished (SIGKILL: often the out-of-memory "
                          f"killer); nothing was kept: run it again, with fewer --num_workers if memory is "
                          f"short.")  # fmt: skip
    kind, text = said
    if kind == "config":
        raise ConfigError(text)
    if kind == "error":  # LitData's or its storage client's: the text `quoted` made, credentials masked
        raise ConfigError(_could_not_write(where, text))


def _end(writer: Any, wait: float) -> None:
    """Wait up to ``wait`` seconds for the writer, then end its process group, workers included.

    A worker LitData forked and its Ctrl-C handler missed would outlive this process, holding its output (a pipe's
    reader waits for it forever) and writing into a folder that is gone.
    """
    writer.join(wait)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(writer.pid, signal.SIGKILL)


def _could_not_write(where: str, words: str) -> str:
    return (f"LitData could not write {where} ({words}); check --output (a new folder, or a bucket URL whose "
            f"credentials are in the environment) and run it again.")  # fmt: skip


def _optimize_and_tell(told: Any, kwargs: dict[str, Any]) -> None:
    """`optimize`'s forked process: run LitData's ``optimize`` and send back what became of it, as text.

    Sent: ``("done", "")``, ``("config", line)`` for a `ConfigError`, or ``("error", words)`` for another error (a
    storage client's may quote a URL: `vitlit.text.quoted` masks its credentials before it leaves this process).
    """
    os.setpgrp()  # a process group of its own, with LitData's workers: `optimize` ends them all together
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C before LitData's handler is in place: just end
    try:
        litdata().optimize(**kwargs, start_method="fork")
        told.send(("done", ""))
    except ConfigError as err:
        told.send(("config", str(err)))
    except Exception as err:
        told.send(("error", quoted(err)))


def write_meta(output: str, meta: dict[str, Any]) -> None:
    """Write vitlit's description of a prepared data set as a one-item LitData set in ``<output>/vitlit``."""
    optimize(fn=_meta_item, inputs=[json.dumps(meta)], output_dir=f"{output}/{META}", chunk_bytes="1MB",
             num_workers=1, mode="overwrite", verbose=False)  # fmt: skip


def _meta_item(text: str) -> dict[str, str]:
    return {"json": text}
