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
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitlit.data.base import ImageClassificationDataModule
from vitlit.data.images import PIL_MODES, image_problem, open_image
from vitlit.data.paths import inside
from vitlit.data.pipeline import Decode
from vitlit.errors import CheckFailed, ConfigError
from vitlit.text import quoted
from vitlit.owned import digest
from vitlit.private import litdata_formats
from vitlit.text import shown

#: vitlit's description of a prepared data set, itself a one-item LitData set beside the splits, so that it is
#: written and read by the storage code that moves the chunks (any folder or bucket LitData reaches).
META = "vitlit"
SPLITS = ("train", "val", "test")
#: The list of every file ``prepare`` wrote, with its hash (`vitlit.owned`): ``--overwrite`` replaces only those.
MANIFEST = ".vitlit-prepare"


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


def stream(where: str, **kwargs: Any) -> Any:
    """LitData's ``StreamingDataset`` of ``where``, admitted by its index before a chunk is read: vitlit's one reader.

    Every folder vitlit reads from a prepared data set (the description and each split) comes through here, local or
    remote: LitData fetches ``index.json`` (nothing else) as the dataset is made, and `check_index` refuses an item
    format that can carry code and a chunk named outside its folder before LitData reads a chunk. The serializers
    given to LitData refuse those formats once more (`RefusedFormat`).
    """
    refused = {name: RefusedFormat(name) for name in litdata_formats() if name not in SAFE_FORMATS}
    dataset = litdata().StreamingDataset(where, serializers=refused, **kwargs)
    check_index(Path(dataset.input_dir.path) / "index.json", where, local="://" not in where)
    return dataset


def check_index(index: Path, where: str, local: bool) -> None:
    """Refuse a LitData index whose items may carry code or whose chunks lie outside its folder, in one line.

    Args:
        index: The ``index.json`` as LitData read it (the folder's own, or its copy in the cache of a remote one).
        where: The folder or URL, to name.
        local: Whether the chunks lie beside ``index``: then each must hold the bytes its index says (a copy cut
            short is said before training, not as a decoding error mid-epoch).
    """
    try:
        described = json.loads(index.read_text(encoding="utf-8"))
        formats, chunks = described["config"]["data_format"], described["chunks"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{shown(where)}/index.json cannot be read ({type(err).__name__}); prepare the data set "
                          f"again with vitlit prepare.") from None  # fmt: skip
    unsafe = next((f for f in formats if not isinstance(f, str) or f.split(":")[0] not in SAFE_FORMATS
                   or not all(part.isdigit() for part in f.split(":")[1:])), None)  # fmt: skip
    if unsafe is not None:
        raise ConfigError(f"{shown(where)}/index.json declares the item format {shown(unsafe)!r}; vitlit reads only "
                          f"{', '.join(SAFE_FORMATS)} (never pickled items, which can run code): prepare the data "
                          f"set again with vitlit prepare.")  # fmt: skip
    for chunk in chunks:
        name = chunk.get("filename") if isinstance(chunk, dict) else None
        if not isinstance(name, str) or Path(name).name != name or name.startswith(".") or "\\" in name:
            raise ConfigError(f"{shown(where)}/index.json names the chunk {shown(name)!r}, which is no file of its "
                              f"folder; prepare the data set again.")  # fmt: skip
        path = index.parent / name
        if local and (path.is_symlink() or (inside(index.parent, name) is None and path.exists())):
            raise ConfigError(f"{shown(where)}/index.json names the chunk {shown(name)!r}, a link or no file inside "
                              f"its folder; prepare the data set again.")  # fmt: skip
        size = path.stat().st_size if local and path.is_file() else None
        if local and size != chunk.get("chunk_bytes"):
            found = "missing" if size is None else f"{size:,} bytes, not the {chunk.get('chunk_bytes')} of its index"
            raise ConfigError(f"{path} is {found}: the copy is incomplete; copy or prepare the data set again.")


def read_meta(input_dir: str) -> dict[str, Any]:
    """What ``vitlit prepare`` recorded: class names, channels, format, stored size, statistics, split sizes."""
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
    needed = {
        "class_names": list,
        "in_chans": int,
        "format": str,
        "size": int,
        "mean": list,
        "std": list,
        "splits": dict,
    }
    meta = meta if isinstance(meta, dict) else {}
    wrong = next((key for key, kind in needed.items() if not isinstance(meta.get(key), kind)), None)
    if wrong is not None or meta["format"] not in ("raw", "encoded"):  # a description of another vitlit, or edited
        raise ConfigError(f"--data.input_dir {input_dir}: vitlit's description of the data set has no valid "
                          f"{wrong or 'format'!r}; prepare the data set again.")  # fmt: skip
    local_splits = (
        {name: local / name / "index.json" for name in meta.get("indexes", {})} if "://" not in input_dir else {}
    )
    changed = next((name for name, index in local_splits.items() if not index.is_file()
                    or digest(index) != meta["indexes"][name]), None)  # fmt: skip
    if changed is not None:  # a split written by another prepare (a half-finished one, a copy of other data)
        raise ConfigError(f"--data.input_dir {input_dir}: the {changed} split is not the one vitlit's description "
                          f"was written with (its index.json differs); prepare the data set again.")  # fmt: skip
    return meta


class Sample:
    """A streamed sample as ``(uint8 image, class index)``: LitData's ``transform``, run in its workers.

    Args:
        decode: The per-image geometry (`vitlit.data.pipeline.Decode`) of encoded images; ``None`` for raw ones.
        where: The split, to name in messages.
        classes: The number of classes the description names: a label past them is refused, naming its sample.
    """

    def __init__(self, decode: Decode | None, where: str, classes: int) -> None:
        self.decode, self.where, self.classes = decode, where, classes

    def __call__(self, sample: dict[str, Any]) -> tuple[torch.Tensor, int]:
        label = int(sample["label"])
        if not 0 <= label < self.classes:  # the loss's "target out of bounds" traceback, a step later
            raise ConfigError(f"{self.where} sample {sample['index']}: label {label} is none of the {self.classes} "
                              f"classes the data set's description names; prepare the data set again.")  # fmt: skip
        if self.decode is None:
            return torch.from_numpy(np.ascontiguousarray(sample["image"])), label
        data = bytes(sample["image"])
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

    #: A run stopped mid-epoch resumes at its place in the stream (`vitlit.runs.resume` says so).
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
        super().__init__(**kwargs)
        self.input_dir, self.cache_dir, self.max_cache_size = str(input_dir).rstrip("/"), cache_dir, max_cache_size
        self.meta = meta
        self.native_size = meta["size"] if meta["format"] == "raw" else None
        self._train_loader: Any = None  # its place in the stream goes into checkpoints (`state_dict`)
        self._resume_from: dict[str, Any] | None = None
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

    def _stream(self, split: str, train: bool) -> Any:
        if split not in self.meta["splits"]:
            raise ConfigError(f"{self.input_dir} has no {split} split; vitlit prepare writes one where the data "
                              f"module has it.")  # fmt: skip
        raw, where = self.meta["format"] == "raw", f"{self.input_dir}/{split}"
        decode = None if raw else Decode(self.in_chans, self.stored_size(train), self.interpolation)  # as in memory
        return stream(
            where, cache_dir=self.cache_dir, max_cache_size=self.max_cache_size, shuffle=train, drop_last=train,
            seed=self.run_seed(), transform=Sample(decode, where, len(self.meta["class_names"])),
        )  # fmt: skip

    def setup(self, stage: str) -> None:
        """The streams ``stage`` reads (nothing is read before the first batch)."""
        if stage in ("fit", "validate") and self.val_set is None:
            self.train_set, self.val_set = self._stream("train", True), self._stream("val", False)
        if stage == "test" and self.test_set is None:
            self.test_set = self._stream("test", False)
        if stage == "predict" and self.predict_set is None:
            self.predict_set = self._stream("test", False) if self.predict_dir is None else None
            if self.predict_set is None:
                super().setup(stage)

    def _loader(self, split: Any, train: bool) -> Any:
        if split is None or not hasattr(split, "input_dir"):  # not a stream: predict_dir's files
            return super()._loader(split, train)
        self._augments.pop(True, None)
        loader = epoch_loader()(
            split, batch_size=self.batch_size, num_workers=self.workers,
            pin_memory=self.pin_memory and torch.cuda.is_available(), persistent_workers=False,
        )  # fmt: skip
        if train:
            self._train_loader = loader
            if self._resume_from is not None:  # a checkpoint's place in the stream (`load_state_dict`)
                loader.load_state_dict(self._resume_from)
                self._resume_from = None
        if len(loader) == 0:  # LitData shares a split out by batches of every worker of every process
            rank, world_size = self.rank_and_world_size()
            where = split.input_dir.path or split.input_dir.url  # LitData's Dir: where the split is read from
            raise ConfigError(f"{where} leaves process {rank} of {world_size} no batch of {self.batch_size} with "
                              f"{max(1, self.workers)} worker(s) per process; use a smaller --data.batch_size or "
                              f"--data.num_workers.")  # fmt: skip
        return loader

    def state_dict(self) -> dict[str, Any]:
        """The training stream's place (LitData's loader state), saved in every checkpoint.

        Lightning saves and restores a stateful loader itself, but restores it only into a loader it builds after the
        checkpoint's loops are read; vitlit's schedule asks for the run's length (and so builds the loader) before.
        The data module's own state is restored before any loader exists, and applied to the first training loader.
        """
        return {} if self._train_loader is None else {"train_stream": self._train_loader.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's place in the stream for the next training loader."""
        self._resume_from = state_dict.get("train_stream")

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
    round 6, class 5). An epoch whose batches were all handed out is over, whoever stops iterating.
    """

    class EpochLoader(litdata().StreamingDataLoader):
        def __iter__(self) -> Any:
            # The count of samples handed out this epoch, read (not set) where the loader keeps it: its public
            # state_dict() would do, but asking it of a restored stream moves where that stream resumes.
            if self.restore and self._num_samples_yielded_streaming >= len(self) * self.batch_size:
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
