"""Hostile round 8 (issue 73), the LitData seam: where ``vitlit prepare`` writes, and what a prepared set's files may
hold before LitData reads them (`vitlit.data.streaming.check_index`, `read_meta`) and while it does (`chunk_stream`),
each refused in one line naming the file and the field.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import DIGITS_CONFIG, carries, refused, run_cli

pytest.importorskip("litdata")

STREAM = ["--data", "vitlit.data.streaming.StreamingDataModule"]
SECRET = "PASSWORD8"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits as vitlit prepare writes them (copied, not written again, per test)."""
    out = tmp_path_factory.mktemp("prepared") / "digits"
    run_cli("prepare", "--data", "DigitsDataModule", "--output", out)
    return out


@pytest.fixture(scope="module")
def unvouched(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same set, its description without ``indexes`` (as a prepare to a bucket writes it): nothing vouches for a
    split's index but the index itself."""
    return _described(prepared, tmp_path_factory.mktemp("unvouched") / "digits", indexes=None)


def _copy(source: Path, out: Path) -> Path:
    shutil.copytree(source, out, symlinks=True)
    return out


def _described(source: Path, out: Path, **changes: object) -> Path:
    """A copy of ``source`` whose description has ``changes`` (``None``: the field left out)."""
    from vitlit.data.streaming import read_meta, write_meta

    meta = {**read_meta(str(source)), **changes}
    out = _copy(source, out)
    shutil.rmtree(out / "vitlit")
    write_meta(str(out), {key: value for key, value in meta.items() if value is not None})
    return out


def _fit_refused(capsys: pytest.CaptureFixture[str], data: object, runs: Path, *extra: object) -> str:
    return refused(capsys, "fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", data,
                   "--trainer.max_epochs", "1", "--trainer.default_root_dir", runs, *extra)  # fmt: skip


@contextlib.contextmanager
def _within(seconds: int) -> Iterator[None]:
    """Fail, instead of hanging, where a read blocks (a FIFO opened by code without the check)."""

    def late(signum: int, frame: object) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- Security: a URL scheme LitData does not know --------------------------------------------------------------------


@pytest.mark.parametrize("url", [f"bogus://user:{SECRET}@host/x", f"s3a://AKIA8:{SECRET}@bucket/x",
                                 "abfs://container@account.dfs.core.windows.net/x", "S3://bucket/x",
                                 "out/s3://bucket/x"])  # fmt: skip
def test_an_unknown_scheme_is_refused_before_a_byte_is_written(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Class 1: LitData took ``bogus://user:PASSWORD@host/x`` for a folder's name and wrote the set into
    ``./bogus:/user:PASSWORD@host/x/``, the password in a folder's name; prepare exited 0."""
    from litdata.constants import _SUPPORTED_PROVIDERS  # LitData's own list of the schemes it writes to

    from vitlit.data.streaming import WRITE_SCHEMES

    assert set(WRITE_SCHEMES) == set(_SUPPORTED_PROVIDERS)  # a LitData that writes to more (or fewer) shows here
    monkeypatch.chdir(tmp_path)
    scheme = f"{url.split('://')[0]}://"
    line = refused(capsys, "prepare", "--data", "DigitsDataModule", "--output", url)
    carries(line, "--output", scheme, "s3://")
    assert SECRET not in line and "AKIA8" not in line
    assert list(tmp_path.iterdir()) == []  # nothing under the current folder
    line = _fit_refused(capsys, url, tmp_path / "runs")  # nor is one read from a folder of that name
    carries(line, "--data.input_dir", scheme, "hf://")
    assert SECRET not in line and list(tmp_path.iterdir()) == []


# -- Data loss: an output inside the data it is written from ---------------------------------------------------------


@pytest.mark.parametrize("how", ["inside", "through a link", "around"])
def test_an_output_inside_the_data_root_is_refused(
    how: str, digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 2: ``prepare --output <root>/chunks`` was accepted; the next fit of the root found ``chunks`` a class
    folder without an image."""
    root = _copy(digits_dir, tmp_path / "photos")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    extra: tuple[str, ...] = ()
    if how == "inside":
        output = root / "chunks"
    elif how == "through a link":
        (tmp_path / "link").symlink_to(root / "train")
        output = tmp_path / "link" / "chunks"
    else:  # a folder that holds the data, which --overwrite would replace
        output, extra = tmp_path, ("--overwrite", "true")
    line = refused(capsys, "prepare", "--data", "ImageFolderDataModule", "--data.root", root, "--output", output,
                   *extra)  # fmt: skip
    carries(line, "--output", output, "--data.root", root)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written into the data
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["photos", *(["link"] if "link" in how else [])])


# -- Hangs: an index LitData would read whole ------------------------------------------------------------------------


@pytest.mark.posix  # a FIFO, SIGALRM
@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_an_index_that_is_no_bounded_file_is_refused_before_litdata_reads_it(
    kind: str, unvouched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 3: a split's ``index.json`` a FIFO (or ``/dev/zero``, or gigabytes) under a description without
    ``indexes``: LitData read it whole before vitlit's check ran, and the fit hung without a word."""
    from vitlit.data.streaming import INDEX_BYTES

    data = _copy(unvouched, tmp_path / "data")
    index = data / "train" / "index.json"
    index.unlink()
    if kind == "fifo":
        os.mkfifo(index)
    else:
        with index.open("wb") as f:
            f.truncate(INDEX_BYTES + 1)  # sparse: no disk is used
    with _within(60):
        line = _fit_refused(capsys, data, tmp_path / "runs")
    carries(
        line, f"{data}/train/index.json", "prepare", "no regular file" if kind == "fifo" else f"{INDEX_BYTES + 1:,}"
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.posix  # /dev/zero
def test_a_device_as_index_is_refused_by_its_kind(tmp_path: Path) -> None:
    """Class 3: ``/dev/zero`` as ``index.json`` (through a link), said without reading a byte of it."""
    from vitlit.data.streaming import index_text
    from vitlit.errors import ConfigError

    (tmp_path / "index.json").symlink_to("/dev/zero")
    with pytest.raises(ConfigError) as err:
        index_text(tmp_path / "index.json", str(tmp_path))
    carries(str(err.value), f"{tmp_path}/index.json", "no regular file")


# -- Tracebacks: index fields vitlit never writes, damaged chunks ----------------------------------------------------


def _spec_of(kind: str) -> Callable[[dict], None]:
    def change(index: dict) -> None:
        index["config"]["data_spec"] = index["config"]["data_spec"].replace("builtins.dict", kind)

    return change


FIELDS: dict[str, tuple[Callable[[dict], object], str]] = {
    "another item loader": (lambda i: i["config"].update(item_loader="TokensLoader"), "item_loader"),
    "compression": (lambda i: i["config"].update(compression="zstd"), "compression"),
    "encryption": (lambda i: i["config"].update(encryption={"algorithm": "fernet", "level": "sample"}), "encryption"),
    "a spec of another type": (_spec_of("collections.OrderedDict"), "data_spec"),
    "a label stored as str": (lambda i: i["config"].update(data_format=["numpy", "str", "int"]), "data_format"),
    "MDS": (lambda i: i["config"].update(format="mds"), "format"),
    "no chunks": (lambda i: i.update(chunks=[]), "chunks"),
    "chunks as a dict": (lambda i: i.update(chunks={"0": i["chunks"][0]}), "chunks"),
    "chunk_size 0": (lambda i: i["chunks"][0].update(chunk_size=0), "chunk_size"),
    "chunk_size that lies": (lambda i: i["chunks"][0].update(chunk_size=5), "chunk_size"),
    "a dim": (lambda i: i["chunks"][0].update(dim=7), "dim"),
}


@pytest.mark.parametrize("case", list(FIELDS))
def test_an_index_field_unlike_prepares_is_one_line_naming_file_and_field(
    case: str, unvouched: Path, tmp_path: Path
) -> None:
    """Class 4: index fields vitlit's check never read crashed mid-epoch in LitData's 40-line tracebacks."""
    from vitlit.data.streaming import read_meta
    from vitlit.errors import ConfigError

    data = _copy(unvouched, tmp_path / "data")
    index = json.loads((data / "train" / "index.json").read_text())
    change, field = FIELDS[case]
    change(index)
    (data / "train" / "index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError) as err:
        read_meta(str(data))
    carries(str(err.value), f"{data}/train/index.json", repr(field), "prepare the data set again")


@pytest.mark.parametrize("size", ["5", "0"])
def test_a_chunk_size_that_lies_is_named_not_the_batch_size(
    size: str, unvouched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 6: ``chunk_size`` 5 or 0 in an index said "use a smaller --data.batch_size"."""
    data = _copy(unvouched, tmp_path / "data")
    index = json.loads((data / "train" / "index.json").read_text())
    index["chunks"][0]["chunk_size"] = int(size)
    (data / "train" / "index.json").write_text(json.dumps(index))
    line = _fit_refused(capsys, data, tmp_path / "runs")
    carries(line, f"{data}/train/index.json", "chunk_size", "prepare the data set again")
    assert "batch_size" not in line and not (tmp_path / "runs").exists()


def _table(chunk: Path) -> tuple[bytearray, np.ndarray]:
    """A chunk's bytes and LitData's table of where each item begins (and the last ends)."""
    data = bytearray(chunk.read_bytes())
    items = int(np.frombuffer(bytes(data[:4]), "<u4")[0])
    return data, np.frombuffer(bytes(data[4 : 4 + 4 * (items + 1)]), "<u4").copy()


@pytest.mark.parametrize("case", ["bad offsets", "cut short with its entry"])
def test_a_chunk_unlike_its_index_is_refused_before_a_run(case: str, unvouched: Path, tmp_path: Path) -> None:
    """Class 4: offsets that lie, or a chunk cut short whose index entry was cut with it, read past the items."""
    from vitlit.data.streaming import read_meta
    from vitlit.errors import ConfigError

    data = _copy(unvouched, tmp_path / "data")
    chunk = data / "train" / "chunk-0-0.bin"
    raw, offsets = _table(chunk)
    if case == "bad offsets":
        raw[4 + 4 * 10 : 4 + 4 * 11] = np.uint32(2**32 - 16).tobytes()
        chunk.write_bytes(bytes(raw))
    else:
        chunk.write_bytes(bytes(raw[: int(offsets[600])]))
        index = json.loads((data / "train" / "index.json").read_text())
        index["chunks"][0]["chunk_bytes"] = chunk.stat().st_size
        (data / "train" / "index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError) as err:
        read_meta(str(data))
    carries(str(err.value), chunk, "1,213 items", "prepare the data set again")


def _patch_items(chunk: Path, at: int, values: list[int]) -> None:
    """Write ``values`` (uint32) ``at`` bytes into every item of ``chunk``: its index stays as it was."""
    raw, offsets = _table(chunk)
    for start in offsets[:-1]:
        raw[int(start) + at : int(start) + at + 4 * len(values)] = np.array(values, "<u4").tobytes()
    chunk.write_bytes(bytes(raw))


#: Where a raw item's numpy header lies: after the item's three sizes (12 bytes), its dtype's code, its number of
#: dimensions, each dimension.
ITEMS = {"dtype code 99": (12, [99], "KeyError"), "dtype code 14 (object)": (12, [14], "OBJECT array"),
         "a shape that lies": (24, [16, 64], "(3, 16, 64)")}  # fmt: skip


@pytest.mark.parametrize("case", list(ITEMS))
def test_an_item_litdata_cannot_read_is_one_line_naming_its_chunk(case: str, unvouched: Path, tmp_path: Path) -> None:
    """Class 4: a numpy header naming no dtype, or a shape that lies, crashed mid-epoch in a 40-line traceback."""
    from vitlit.data.streaming import Sample, split_item, stream
    from vitlit.errors import ConfigError

    data = _copy(unvouched, tmp_path / "data")
    at, values, said = ITEMS[case]
    _patch_items(data / "train" / "chunk-0-0.bin", at, values)
    where = str(data / "train")
    split = stream(where, split_item("raw"), 1213, transform=Sample(None, where, 10, (3, 32, 32)))
    with pytest.raises(ConfigError) as err:
        next(iter(split))
    carries(str(err.value), said, "prepare the data set again")
    if "dtype" in case:  # LitData's own failure, named by its chunk
        carries(str(err.value), f"{where}/chunk-0-0.bin: item")
    assert type(pickle.loads(pickle.dumps(split))) is type(split)  # spawned workers find its class by name


def test_an_item_litdata_cannot_read_mid_epoch_is_one_line_from_a_worker(
    unvouched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 4, end to end: a DataLoader worker's failure reaches the command line as one line naming the chunk."""
    data = _copy(unvouched, tmp_path / "data")
    _patch_items(data / "train" / "chunk-0-0.bin", 12, [99])
    line = _fit_refused(capsys, data, tmp_path / "runs", "--data.num_workers", "1")
    carries(line, f"{data}/train/chunk-0-0.bin", "KeyError", "prepare the data set again")


@pytest.mark.parametrize("field", ["indexes", "mean", "std"])
def test_a_description_field_unlike_prepares_is_one_line(field: str, prepared: Path, tmp_path: Path) -> None:
    """Class 4: vitlit's own description with ``indexes`` as a list, ``mean`` as strings, ``std`` all zero."""
    from vitlit.data.streaming import read_meta
    from vitlit.errors import ConfigError

    meta = read_meta(str(prepared))
    value = {"indexes": list(meta["indexes"]), "mean": [str(m) for m in meta["mean"]], "std": [0.0] * len(meta["std"])}[
        field
    ]
    data = _described(prepared, tmp_path / "data", **{field: value})
    with pytest.raises(ConfigError) as err:
        read_meta(str(data))
    carries(str(err.value), data, repr(field), "prepare the data set again")


# -- Tracebacks: --chunk_bytes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["0", "0MB", "-1", "lots"])
def test_a_chunk_bytes_that_is_no_size_is_one_line_before_litdata_starts(
    size: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 4: ``prepare --chunk_bytes 0`` put LitData's worker traceback in the line, naming the staged folder."""
    from vitlit.data.prepare import chunk_size

    assert (chunk_size("64MB"), chunk_size("500000"), chunk_size("1.5 GB")) == (64_000_000, 500_000, 1_500_000_000)
    line = refused(capsys, "prepare", "--data", "DigitsDataModule", "--output", tmp_path / "out",
                   "--chunk_bytes", size)  # fmt: skip
    carries(line, f"--chunk_bytes {size}", "64MB")
    assert ".partial" not in line and list(tmp_path.iterdir()) == []
