"""Hugging Face data sets: a ``save_to_disk`` folder, Parquet shards, or a hub name, read with vitlit's decoder.

    python -m vitlit fit --config configs/digits.yaml --data vitlit.data.hf.HFDataModule --data.path <dir|glob|name>

Needs the ``hf`` extra (``pip install -e ".[hf]"``: the ``datasets`` package). Images are never decoded by
``datasets``: the image column is read as its encoded bytes and decoded by `vitlit.data.images.open_image`, whose
allow-list of raster formats the image folders use too, after the same start-up check of every row.
"""

from __future__ import annotations

import copy
import glob
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Literal

from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import Dataset

from vitlit.data.images import image_problem, open_image, refuse_unlisted
from vitlit.data.table import ItemTableDataModule, Scan, class_order, file_inside, label_name, lies_inside
from vitlit.errors import ConfigError
from vitlit.hub import hub_unreachable
from vitlit.text import shown

#: The split names data sets use, by the split vitlit gives them.
SPLIT_NAMES = {
    "train": ("train", "training"),
    "val": ("validation", "valid", "val", "dev"),
    "test": ("test", "testing"),
}


def _datasets(offline: bool = False) -> Any:
    if offline and "datasets" not in sys.modules:
        # datasets reads this variable when imported, and vitlit imports it only here: a hub name then loads from
        # the local cache at once, or fails at once, instead of after half a minute of retries
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        raise ConfigError('vitlit.data.hf.HFDataModule reads Hugging Face data sets with the datasets package; '
                          'pip install -e ".[hf]"') from None  # fmt: skip
    datasets.disable_progress_bars()  # one line per step of vitlit's own, not a bar per shard
    return datasets


def load_splits(path: str) -> dict[str, Any]:
    """The data set's splits by their own names, from a ``save_to_disk`` folder, Parquet files or a hub name.

    Parquet files are a folder of them (their names name the splits: `parquet_splits`), a file or a glob. A hub
    name without the network loads from the ``datasets`` cache, or is one line said within seconds.

    Raises:
        ConfigError: For a path that is none of these, or a hub name that cannot be read.
    """
    local = Path(path).expanduser()
    hub = not (local.is_dir() or local.is_file() or glob.has_magic(path))
    offline = hub_unreachable() if hub else None  # checked first: datasets would retry for half a minute
    datasets = _datasets(offline is not None)
    try:
        if local.is_dir() and ((local / "dataset_dict.json").is_file() or (local / "state.json").is_file()):
            check_saved(local)
            try:
                loaded = datasets.load_from_disk(str(local))
            except IndexError:  # datasets' own error for a split saved without rows
                raise ConfigError(f"--data.path {path} has no training rows; give a data set with images in its "
                                  f"train split.") from None  # fmt: skip
        elif not hub:
            loaded = datasets.load_dataset("parquet", data_files=_as_patterns(parquet_splits(path)))
        else:
            try:
                if offline is not None and not datasets.config.HF_HUB_OFFLINE:
                    raise ConnectionError  # datasets was imported online before vitlit: it would retry
                loaded = datasets.load_dataset(path)  # offline, from the datasets cache if it is there
            except ConnectionError:
                raise ConfigError(f"--data.path {path} is no local folder or file, and a hub name needs the network "
                                  f"({offline or 'the hub did not answer'}) or a copy in the datasets cache; save it "
                                  f"where there is one (datasets.load_dataset(name).save_to_disk(folder)) and pass "
                                  f"the folder.") from None  # fmt: skip
    except ConfigError:
        raise
    except Exception as err:  # Arrow/Parquet errors for files that are not what they claim
        raise ConfigError(f"--data.path {path} cannot be read as a Hugging Face data set ({type(err).__name__}: "
                          f"{' '.join(str(err).split())[:200]}).") from None  # fmt: skip
    return dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}


#: The words of a file's name that datasets reads as its split: vitlit's names, and "eval" for a test file.
FILE_SPLIT_NAMES = {**SPLIT_NAMES, "test": (*SPLIT_NAMES["test"], "eval", "evaluation")}
#: The hub's shard names: ``<split>-00000-of-00003.parquet`` names a split of any word (SVHN's ``extra``).
SHARD = re.compile(r"([A-Za-z]+)-\d{5}-of-\d{5}\b")
#: The hub's layout for splits of any name (datasets' ``data/{split}-00000-of-00003*``): the whole word names it.
HUB_SHARD = re.compile(r"data/(\w+)-\d{5}-of-\d{5}[^/]*")


def _named_split(relative: str) -> str | None:
    """The split a file's path says, or None: ``train``, ``val``, ``test``, or a hub split's own name.

    As datasets reads them: a hub shard in ``data/`` by its whole word (camelyon17's ``data/id_train-...`` is the
    split ``id_train``, no training split); else its split words, in any case, in its name first and then its
    folders' (``Test/0.parquet``, ``test/data-00000-of-00001.parquet`` and ``eval.parquet`` are test files).

    Args:
        relative: The file's path below the folder or the glob's fixed part: the folders above that name no split.

    Raises:
        ConfigError: For a name that says two splits (``test-dev.parquet``), which datasets reads into both.
    """
    if (hub := HUB_SHARD.fullmatch(Path(relative).as_posix())) is not None:
        word = hub[1].lower()
        return next((role for role, spelled in SPLIT_NAMES.items() if word in spelled), word)
    for part in reversed(Path(relative).parts):
        words = set(re.split(r"[-._ 0-9]+", part.lower()))
        roles = [role for role, spelled in FILE_SPLIT_NAMES.items() if words & set(spelled)]
        if len(roles) > 1:
            raise ConfigError(f"--data.path holds {shown(relative)}, whose name says both a {roles[0]} and a "
                              f"{roles[1]} split; rename it to say one.")  # fmt: skip
        if roles:
            return roles[0]
    return None


def _hidden(relative: str, path: str) -> bool:
    """Whether datasets' search would leave the file out: hidden, by a name of its path ``--data.path`` does not give.

    A name starting with ``.`` or ``__``: a backup's ``.old/``, macOS's ``._x.parquet`` and ``__MACOSX/``.
    """
    return any(part.startswith((".", "__")) and part not in Path(path).parts for part in Path(relative).parts)


def parquet_splits(path: str) -> dict[str, list[str]]:
    """``--data.path``'s Parquet files by split, for ``datasets.load_dataset("parquet", data_files=...)``.

    A folder's files name their splits (`_named_split`), or none do and all are training; a glob (``**`` too) and a
    file are training, and a glob's file that names a validation or test split is refused. Hidden files are left out
    (`_hidden`), as datasets' search leaves them. vitlit assigns the splits itself: datasets' search is
    case-sensitive (``Test.parquet`` was trained on), and leaves out a file that names no split beside files that do.

    Raises:
        ConfigError: For no Parquet files, a file that is no Parquet file, or a file that names no split or another.
    """
    local = Path(path).expanduser()
    if local.is_dir():
        files, base = parquet_files(local), local
    else:
        files = sorted(glob.glob(str(local), recursive=True)) if glob.has_magic(path) else [str(local)]
        base = root_of(path) or local.parent
    files = [f for f in files if not _hidden(os.path.relpath(f, base), path)]
    if not files:
        what = "holds neither a save_to_disk data set nor Parquet files" if local.is_dir() else "matches no file"
        raise ConfigError(f"--data.path {path} {what}; give a Parquet file, folder or glob, a save_to_disk folder or "
                          f"a hub name.")  # fmt: skip
    other = next((f for f in files if not f.endswith(".parquet")), None)
    if other is not None:  # datasets would read it as Parquet and fail deep inside (DatasetGenerationError)
        raise ConfigError(f"--data.path {path} matches {shown(other)}, which is no Parquet file; give a glob of "
                          f"*.parquet files.")  # fmt: skip
    roles = {f: _named_split(os.path.relpath(f, base)) for f in files}
    if not local.is_dir():  # a file given by name is read as training, whatever its name
        named = next((f for f in files if roles[f] in ("val", "test")), None) if glob.has_magic(path) else None
        if named is not None:
            raise ConfigError(f"--data.path {path} matches {shown(named)}, a {roles[named]} split's file by its "
                              f"name or folder, which a glob would train on; give the folder that holds the files "
                              f"(their names say their splits), or a glob of the training files alone.")  # fmt: skip
        return {"train": files}
    if any(roles.values()):  # beside files that name theirs, a hub shard's other word names a split (left out)
        roles |= {f: shard[1].lower() for f in files if roles[f] is None and (shard := SHARD.match(Path(f).name))}
    unnamed = next((f for f in files if roles[f] is None), None)
    if unnamed is not None and any(roles.values()):
        raise ConfigError(f"--data.path {path} holds {shown(unnamed)}, whose name says no split beside files whose "
                          f"names do; name it (train, validation or test, in its name or its folder's) or move it "
                          f"out.")  # fmt: skip
    # Training first: datasets takes the columns from the first split's files (a test file may lack the labels).
    splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    for file in files:
        role = roles[file] or "train"
        splits.setdefault({"val": "validation"}.get(role, role), []).append(file)
    return {split: split_files for split, split_files in splits.items() if split_files}


def _as_patterns(splits: dict[str, list[str]]) -> dict[str, list[str]]:
    """The files as datasets reads ``data_files``: patterns, so a ``[`` or ``*`` in a folder's name is escaped."""
    return {split: [glob.escape(file) for file in files] for split, files in splits.items()}


def parquet_files(folder: Path) -> list[str]:
    """The Parquet files below ``folder``, sorted; a link to a folder is refused, naming it.

    datasets' own search of a folder follows such links, and one to ``.`` or a parent is a loop it never leaves.
    """
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, onerror=refuse_unlisted, followlinks=False):
        dirnames[:] = [name for name in dirnames if not name.startswith((".", "__"))]  # hidden: never read (`_hidden`)
        link = next((name for name in dirnames if os.path.islink(os.path.join(dirpath, name))), None)
        if link is not None:
            raise ConfigError(f"--data.path {folder} holds {shown(os.path.join(dirpath, link))}, a link to a folder, "
                              f"which its search would follow (into a loop, or other data); remove the link or "
                              f"copy the files.")  # fmt: skip
        found += [os.path.join(dirpath, name) for name in filenames if name.endswith(".parquet")]
    return sorted(found)


def root_of(path: str) -> Path | None:
    """The folder a data set's rows may name files in: the data set's own (``None`` for a hub name: none)."""
    local = Path(path).expanduser()
    if local.is_dir():
        return local
    if local.is_file():
        return local.parent
    if glob.has_magic(path):  # the folder above the first part with a wildcard
        parts = local.parts
        return Path(*parts[: next(i for i, part in enumerate(parts) if glob.has_magic(part))] or ["."])
    return None


def check_saved(folder: Path) -> None:
    """Refuse a ``save_to_disk`` folder whose metadata names a split or an Arrow file outside it, before it is read.

    ``datasets.load_from_disk`` joins the names in ``dataset_dict.json`` and ``state.json`` to the folder, so an
    absolute or ``../`` name would load another file as this data set.
    """
    splits = [folder]
    if (folder / "dataset_dict.json").is_file():
        names = [str(name) for name in _json(folder / "dataset_dict.json").get("splits", [])]
        splits = [folder / name for name in names]
        outside = next((name for name in names if file_inside(folder, folder / name / "state.json") is None), None)
        if outside is not None:
            raise ConfigError(f"{folder}/dataset_dict.json names the split {shown(outside)!r}, which is no folder "
                              f"of {folder} with a state.json; a data set may only name files inside its "
                              f"folder.")  # fmt: skip
    for split in splits:
        for entry in _json(split / "state.json").get("_data_files", []):
            name = entry.get("filename") if isinstance(entry, dict) else None
            if file_inside(split, name) is None:
                raise ConfigError(f"{split}/state.json names the data file {shown(name)!r}, which is no file inside "
                                  f"{split}; a data set may only name files inside its folder.")  # fmt: skip


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} cannot be read as JSON ({type(err).__name__}); save the data set again.") from None
    return value if isinstance(value, dict) else {}


class HFImages(Dataset):
    """``(PIL image, class index)`` of rows of a Hugging Face data set, decoded with `open_image`.

    A split of the item table (`vitlit.data.table`), its items named ``<path> <split> row <n>``.

    Args:
        table: The split, its image column read as encoded bytes (``Image(decode=False)``) or raw bytes.
        rows: The rows of ``table`` this view holds.
        targets: The class index of each of those rows.
        image_column: The column of images.
        where: How to name the split in messages (``<path> train``).
        mode: PIL mode every image is converted to (``L``, ``RGB`` or ``RGBA``).
        stored_side: The side images are resized to afterwards, for `MAX_PIXELS`'s bound on the resized image.
        root: The only folder whose files a row's ``path`` may name (`root_of`); ``None``: embedded bytes only.
    """

    #: How messages name an item, from its name in ``samples``.
    ITEM = "{}: the image"

    def __init__(self, table: Any, rows: list[int], targets: list[int], image_column: str, where: str, mode: str,
                 stored_side: int, root: Path | None) -> None:  # fmt: skip
        self.table, self.rows, self.targets = table.select_columns([image_column]), rows, targets
        self.image_column, self.where, self.mode, self.stored_side, self.root = (
            image_column,
            where,
            mode,
            stored_side,
            root,
        )

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def samples(self) -> list[tuple[str, int]]:
        """Each row's name and class index (the names ``predictions.csv`` gives as the source)."""
        return [(f"{self.where} row {row}", target) for row, target in zip(self.rows, self.targets, strict=True)]

    def problem(self, i: int) -> str | None:
        """Why row ``i``'s image cannot be read (`image_problem` of its bytes), or ``None``."""
        data, named = self.encoded(i), self.value(i)[1]
        if data is None and named and self.root is not None and lies_inside(self.root, named):
            return f"missing: {shown(named)!r} is no file in {self.root}"
        if data is None and named:
            return f"a file outside the data set's folder ({shown(named)!r}), which is never read"
        return image_problem(data, self.stored_side) if data is not None else "no image"

    def keep(self, indices: list[int]) -> HFImages:
        """The rows at ``indices`` only."""
        kept = copy.copy(self)
        kept.rows, kept.targets = [self.rows[i] for i in indices], [self.targets[i] for i in indices]
        return kept

    def value(self, i: int) -> tuple[bytes | None, str | None]:
        """Item ``i``'s embedded bytes and the ``path`` its row names (either may be ``None``), as the row has them."""
        value = self.table[self.rows[i]][self.image_column]
        if isinstance(value, dict):
            return value.get("bytes"), value.get("path")
        return (value, None) if isinstance(value, (bytes, bytearray)) else (None, None)

    def files(self) -> list[Path | None]:
        """The file each item's row names where it embeds no image (as `encoded` reads it), else ``None``.

        Read from the Arrow column's ``bytes`` and ``path`` fields, so that no image is read: the item table refuses
        a file named by two rows (`vitlit.data.table.ItemTableDataModule`), as it refuses a table's.
        """
        column = self.table.with_format("arrow")[self.image_column]
        fields = [column.type.field(i).name for i in range(column.type.num_fields)]  # none: raw bytes
        if self.root is None or "path" not in fields:  # a hub name, or no row names a file
            return [None] * len(self.rows)
        import pyarrow.compute as pc  # pyarrow comes with datasets

        embedded = pc.fill_null(pc.binary_length(pc.struct_field(column, "bytes")), 0) if "bytes" in fields else None
        sizes = [0] * len(column) if embedded is None else embedded.to_pylist()
        paths = pc.struct_field(column, "path").to_pylist()
        return [None if sizes[row] else file_inside(self.root, paths[row]) for row in self.rows]

    def encoded(self, i: int) -> bytes | Path | None:
        """Item ``i``'s encoded image: its embedded bytes, else the file its row names if inside ``root``, else None.

        A row's ``path`` beside embedded bytes is only a name (datasets keeps where a file came from); alone, it is
        read only inside the data set's folder (`vitlit.data.table.file_inside`).
        """
        data, path = self.value(i)
        if data:
            return bytes(data)
        return None if self.root is None else file_inside(self.root, path)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        data = self.encoded(i)
        try:
            source = io.BytesIO(data) if isinstance(data, bytes) else data
            if source is None:
                raise ValueError("the row has no image bytes and names no file inside the data set")
            return open_image(source, self.mode, self.stored_side), self.targets[i]
        except (OSError, SyntaxError, ValueError, TypeError) as err:  # what the start-up check cannot see undecoded
            raise ConfigError(f"{self.where} row {self.rows[i]}: the image cannot be decoded ({err}); remove or "
                              f"replace the row.") from None  # fmt: skip


class HFDataModule(ItemTableDataModule):
    """A Hugging Face data set of images and class labels: ``save_to_disk`` folder, Parquet shards or hub name.

    The data set's own splits are used by their usual names (``train``; ``validation``, ``valid``, ``val`` or
    ``dev``; ``test``); a missing validation split is carved from training (``val_size``), a missing test split is
    held out of it (``test_size``), both seeded, and said in one line. Class names come from a ``ClassLabel`` label
    column; labels that are strings or integers become classes by the item table's rule (`class_order`: sorted, as
    numbers where all are integers, said in one line); anything else is refused. -1, the hub's mark of an unlabelled
    row, is no class in either: training and validation refuse it, ``test`` refuses a test split of it, ``predict``
    classifies one. Every row's image is checked before training, as image folders are (``bad_images``).

    Args:
        path: A folder written by ``save_to_disk``; Parquet files (a folder of ``*.parquet`` whose names or
            folders name the splits as the hub's do, a file, or a glob: `parquet_splits`); or a hub name such as
            ``user/name``, which needs the network (or the local cache).
        image_column: The column of images (``Image`` feature or encoded bytes); ``None``: the data set's only
            ``Image`` column (the hub's ``cifar10`` calls it ``img``), else one named ``image``.
        label_column: The column of class labels; ``None``: the only ``ClassLabel`` column, or of several the one with
            the most classes (the hub's ``cifar100``: ``fine_label``, not ``coarse_label``), said in one line; else one
            named ``label``.
        val_size: Validation images carved from training where the data set has no validation split: a count (int)
            or a fraction (float in (0, 1)).
        test_size: Test images held out of training where the data set has no test split, as ``val_size``.
        bad_images: ``error`` stops before training at the first row that cannot be read as an image; ``skip``
            leaves such rows out and lists them (``skipped``).
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule`.
    """

    def __init__(
        self,
        path: str,
        image_column: str | None = None,
        label_column: str | None = None,
        val_size: int | float = 0.1,
        test_size: int | float = 0.1,
        bad_images: Literal["error", "skip"] = "error",
        **kwargs: Any,
    ) -> None:
        super().__init__(val_size=val_size, test_size=test_size, bad_images=bad_images, **kwargs)
        self.path, self.image_column, self.label_column = str(path), image_column, label_column
        self.root = root_of(self.path)  # the only folder whose files a row's path may name (none for a hub name)

    def scan(self) -> Scan:
        """Read the data set's splits, columns and labels before any work starts."""
        found = load_splits(self.path)
        train = next((found[name] for name in found if name.lower() in SPLIT_NAMES["train"]), None)
        features = getattr(train, "features", {}) or {}
        chosen = self.label_column is None
        self.image_column = self.image_column or self._column(features, "Image", "image", "image_column")
        self.label_column = self.label_column or self._column(features, "ClassLabel", "label", "label_column")
        usual = next((name for name in ("label", "labels") if name in features and name != self.label_column), None)
        if chosen and usual is not None:  # the usual name beside a ClassLabel of another: either could be meant
            raise ConfigError(f"{self.path} has the ClassLabel column {self.label_column!r} and a column named "
                              f"{usual!r}; name the labels to train on with --data.label_column {usual} (or "
                              f"{self.label_column}).")  # fmt: skip
        self._tables = self._by_role(found)
        train = self._tables["train"]
        for flag, column in (("image_column", self.image_column), ("label_column", self.label_column)):
            if column not in train.column_names:
                raise ConfigError(f"{self.path} has no column {column!r} (it has {', '.join(train.column_names)}); "
                                  f"name yours with --data.{flag}.")  # fmt: skip
        if getattr(train.features[self.image_column], "dtype", None) in ("string", "large_string"):  # not an Image
            raise ConfigError(f"{self.path}: the image column {self.image_column!r} holds text (file paths?), not "
                              f"images; cast it (data.cast_column({self.image_column!r}, datasets.Image())) and save "
                              f"the data set again, or name the image column with --data.image_column.")  # fmt: skip
        classes, self._index = self._classes_of(train)
        rank_zero_info(f"vitlit: {self.path}: images from column {self.image_column!r}, labels from column "
                       f"{self.label_column!r} ({len(classes)} classes)")  # fmt: skip
        targets = {role: self._labels(role, classes) for role in self._tables}
        if len(set(targets["train"])) < 2 and -1 not in targets["train"]:  # ClassLabel names many, the rows one
            raise ConfigError(f"{self.path}: every training row has the label {classes[targets['train'][0]]!r}; a "
                              f"classifier needs rows of at least 2 of its {len(classes)} classes.")  # fmt: skip
        splits = {role: HFImages(table, list(range(len(table))), targets[role], self.image_column,
                                 f"{self.path} {role}", self.image_mode, self.stored_side, self.root)
                  for role, table in self._tables.items()}  # fmt: skip
        where = f"{self.path}'s class names (column {self.label_column!r})"
        return Scan(splits, classes, hold_out_test=self.path, classes_from=where)

    # -- reading the data set ------------------------------------------------------------------------------------

    def _column(self, features: dict[str, Any], kind: str, usual: str, flag: str) -> str:
        """The column of ``kind`` (``Image`` or ``ClassLabel``) where the data set has one, else ``usual``.

        Several labels (the hub's ``cifar100``: 100 fine and 20 coarse classes): the one with the most classes, said
        in one line; a tie is refused naming them.
        """
        found = [name for name, feature in features.items() if type(feature).__name__ == kind]
        if len(found) < 2:
            return found[0] if found else usual
        sizes = {name: getattr(features[name], "num_classes", 0) for name in found}
        most = sorted(found, key=lambda name: -sizes[name])
        if kind != "ClassLabel" or sizes[most[0]] == sizes[most[1]]:
            raise ConfigError(f"{self.path} has the {kind} columns {', '.join(found)}; name the one to use with "
                              f"--data.{flag}.")  # fmt: skip
        rank_zero_info(f"vitlit: {self.path}: labels from column {most[0]!r} ({sizes[most[0]]} classes), of the "
                       f"ClassLabel columns {', '.join(found)}; --data.{flag} takes another")  # fmt: skip
        return most[0]

    def _by_role(self, found: dict[str, Any]) -> dict[str, Any]:
        """The splits as vitlit's train/val/test, their image column read as encoded bytes."""
        datasets, tables = _datasets(), {}
        for role, names in SPLIT_NAMES.items():
            matched = [n for n in found if n.lower() in names]
            if len(matched) > 1:  # val and validation: taking one without a word would leave the other out
                raise ConfigError(f"{self.path} has the splits {', '.join(matched)}, all names of a {role} split; "
                                  f"keep one of them.")  # fmt: skip
            if matched:
                tables[role] = found[matched[0]]
        if "train" not in tables:
            raise ConfigError(f"{self.path} has the splits {', '.join(found)} but none named train; rename the "
                              f"training split to train.")  # fmt: skip
        # A split of another name (eval, the hub's SVHN extra) is left out: said, for rows neither tested nor used.
        others = [n for n in found if not any(n.lower() in names for names in SPLIT_NAMES.values())]
        if others:
            left = ", ".join(repr(shown(n)[:40]) for n in others)
            rank_zero_info(f"vitlit: {self.path}: the split(s) {left} left out (vitlit reads train, validation and "
                           f"test); rename one to use it")  # fmt: skip
        if len(tables["train"]) == 0:
            raise ConfigError(f"{self.path} has no training rows; give a data set with images in its train split.")
        for role, table in tables.items():
            if isinstance(table.features.get(self.image_column), datasets.Image):
                tables[role] = table.cast_column(self.image_column, datasets.Image(decode=False))
        return tables

    def _classes_of(self, train: Any) -> tuple[list[str], dict[Any, int]]:
        """The class names, and each label value's class index; -1, the hub's mark of an unlabelled row, stays -1.

        Labels that are strings or integers become classes by the item table's rule (`class_order`: whitespace
        around them dropped, sorted, as numbers where all are integers), said in one line.
        """
        datasets = _datasets()
        feature = train.features[self.label_column]
        if isinstance(feature, datasets.ClassLabel):
            return list(feature.names), {i: i for i in range(feature.num_classes)} | {-1: -1}
        dtype = getattr(feature, "dtype", None)
        if dtype in ("string", "large_string") or (dtype or "").startswith(("int", "uint")):  # Polars: large_string
            labels = train[self.label_column]
            names = {value: self._name(value, "train", labels) for value in set(labels) if value != -1}
            where = f"{self.path} column {self.label_column!r}"
            classes = class_order(names.values(), where, said=True)
            if len(classes) < 2:
                unlabelled = " besides -1 (unlabelled)" if -1 in labels else ""
                raise ConfigError(f"{self.path} has {len(classes)} label(s) in its training rows{unlabelled}; a "
                                  f"classifier needs 2.")  # fmt: skip
            index = {name: i for i, name in enumerate(classes)}
            return classes, {value: index[name] for value, name in names.items()} | {-1: -1}
        raise ConfigError(f"{self.path}: the label column {self.label_column!r} holds {dtype or feature} values, "
                          f"not class labels (ClassLabel, strings or integers); name another with "
                          f"--data.label_column.")  # fmt: skip

    def _name(self, value: Any, role: str, labels: list[Any]) -> str:
        """A label value's class name (`label_name`); else refused, naming its first row."""
        try:
            return label_name(value)
        except ValueError as err:
            raise ConfigError(f"{self.path} {role} row {labels.index(value)}: {err}; give every row a "
                              f"label.") from None  # fmt: skip

    def _labels(self, role: str, classes: list[str]) -> list[int]:
        """The class index of every row of a split (-1: unlabelled); a label training does not have is refused."""
        table = self._tables[role]
        labels, feature = table[self.label_column], table.features[self.label_column]
        named = {name: i for i, name in enumerate(classes)}
        # A split's own ClassLabel may name other classes, or the same in another order: its integers go by name.
        own = feature.names if isinstance(feature, _datasets().ClassLabel) and role != "train" else None
        lookup = {}
        by_name = (lambda v: isinstance(v, int) and 0 <= v < len(own)) if own is not None else lambda v: False
        for value in set(labels):  # each value once: a million rows hold a few labels
            if value is None and role == "test":  # a test file without the label column (datasets fills in None)
                lookup[value] = -1  # unlabelled, as the hub marks it: predict reads the split, test refuses it
                continue
            target = named.get(own[value]) if by_name(value) else self._index.get(value)
            if target is None and (value is None or isinstance(value, str)):  # "3 " is the class "3"
                target = named.get(self._name(value, role, labels))
            lookup[value] = target
        unknown = next(((row, v) for row, v in enumerate(labels) if lookup[v] is None), None)
        if unknown is not None:
            said = f"{own[unknown[1]]!r} (ClassLabel {unknown[1]})" if by_name(unknown[1]) else repr(unknown[1])
            raise ConfigError(f"{self.path} {role} row {unknown[0]}: label {said} is none of the "
                              f"{len(classes)} classes of the training rows.")  # fmt: skip
        return [lookup[v] for v in labels]

    # -- the contract ----------------------------------------------------------------------------------------------

    @property
    def description(self) -> str:
        """What the run card records as the data."""
        return f"Hugging Face data set {self.path} (splits {', '.join(sorted(self._tables))})"
