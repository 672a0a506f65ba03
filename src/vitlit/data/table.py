"""One item table for every format of image files or encoded images: a format lists its rows, the table admits them.

A format (class folders, a labels.csv table, a Hugging Face data set, a fork's own) implements `scan` and nothing
else: each split's rows as ``(file, label name)`` pairs, the file relative to the data's ``root`` (a format whose
images are embedded bytes gives a dataset of them instead). `ItemTableDataModule` calls it once, the first time the
items are needed (the class names the CLI links to the model, or ``setup``), so a subclass sets its attributes
anywhere in its ``__init__``. Then, in one place, for every format: what `scan` returned (``{split: rows}`` or a
`Scan`, each row a pair), the split names (``train``, ``val``, ``test``), no split empty, each label a class name
(whitespace around it dropped; missing, empty or control characters refused), the class order (sorted, as numbers
where every label is an integer), each file inside ``root`` (links resolved) and listed once, the labels of
validation and test known to training, an error in the format's own code said in one line naming its file and line,
the test split held out where the data has none, the validation size, each image's start-up check with
``bad_images`` (stop at the first, naming it, or leave them out and list them in ``skipped``), and the validation and
test images that are byte copies of training images, counted in one line.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import numbers
import os
import re
import traceback
import unicodedata
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

from lightning.pytorch.utilities import rank_zero_info

from vitlit.data.base import ImageClassificationDataModule, carved_count
from vitlit.data.images import BadImage, ImageFiles, pil_mode
from vitlit.errors import NO_SPACE, PATH_REFUSED, ConfigError
from vitlit.text import quoted, say, shown

#: The splits a format may name: validation and test are only ever used as such.
SPLITS = ("train", "val", "test")
#: A row of a format: its image file (relative to the data's ``root``, or absolute inside it) and its label's name.
Row = tuple[str | os.PathLike, str]
#: From this many rows on, the table says what it checks before it checks them (a million take seconds).
MANY_ROWS = 100_000
#: The Unicode categories no class name holds: control characters (NUL, newline, escape), format characters
#: (zero-width, bidirectional overrides), surrogates, line and paragraph separators. Each makes two names that
#: look alike, or a line that is not one.
_CONTROL = {"Cc", "Cf", "Cs", "Zl", "Zp"}
#: A label that is an integer (COCO's category ids): such labels are ordered as numbers.
_INTEGER = re.compile(r"-?[0-9]+")


class Scan(NamedTuple):
    """What a format found, where a plain ``{split: rows}`` says too little.

    Args:
        splits: Each split's rows (``(file, label name)`` pairs), or a dataset of its items where the images are
            embedded bytes (`vitlit.data.hf.HFImages`: ``samples``, ``problem(i)``, ``keep(indices)``).
        classes: The class names in index order; ``None``: the training rows' labels, sorted (as numbers where
            every one is an integer).
        hold_out_test: Where the data has no test split: ``True`` (the default, as for a plain ``{split: rows}``)
            holds one out of training (``--data.test_size``), said in one line naming the class; a string does so
            naming the data in its words; ``None`` keeps ``test`` for a split of the data's own
            (`ItemTableDataModule.no_test_split`).
        classes_from: Where ``classes`` came from, as the refusals of a class name name it (a Hugging Face data
            set: its ``ClassLabel`` column).
    """

    splits: dict[str, Any]
    classes: list[str] | None = None
    hold_out_test: bool | str | None = True
    classes_from: str = "Scan's classes"


def label_name(label: object) -> str:
    """A row's label as its class name: its text without the whitespace around it (``"3 "`` is the class ``"3"``).

    Raises:
        ValueError: Saying why the label names no class: missing (``None``, a table's NaN), empty, neither text
            nor an integer, or holding a control character (`_CONTROL`).
    """
    if label is None or (isinstance(label, float) and math.isnan(label)):
        raise ValueError(f"the label is missing ({label})")
    if isinstance(label, bool) or not isinstance(label, str | numbers.Integral):
        kind = type(label).__name__
        raise ValueError(f"the label {shown(repr(label))[:60]} is a {kind}, and a label is text or an integer")
    text = str(label).strip()
    if not text:
        raise ValueError("the label is empty")
    if any(unicodedata.category(c) in _CONTROL for c in text):
        raise ValueError(f"the label '{shown(text)}' holds a control character")
    return text


def class_order(labels: Iterable[str], where: str, said: bool = False) -> list[str]:
    """The classes that ``labels`` name, sorted: as numbers where every label is an integer (1, 2, ..., 10).

    COCO's category ids as text would sort as '1', '10', '2'. The order is said in one line where the numbers change
    it, or always where ``said`` (a Hugging Face label column, whose labels the data module chose).
    """
    names = sorted(set(labels))
    numeric = bool(names) and all(_INTEGER.fullmatch(name) for name in names)
    ordered = sorted(names, key=lambda name: (int(name), name)) if numeric else names
    twins = next(((a, b) for a, b in itertools.pairwise(ordered) if numeric and int(a) == int(b)), None)
    if twins is not None:  # '1' and '01': two spellings of one class, or a typo; either way not two classes
        raise ConfigError(f"{where}: the labels '{shown(twins[0])}' and '{shown(twins[1])}' are one number but two "
                          f"classes; give each class one spelling in the data.")  # fmt: skip
    if (said or ordered != names) and len(ordered) > 1:  # fewer are refused
        first = ", ".join(shown(name) for name in ordered[:10]) + (" ..." if len(ordered) > 10 else "")
        rank_zero_info(f"vitlit: {where}: the {len(ordered)} labels are the classes, in "
                       f"{'numeric' if numeric else 'sorted'} order: {first}")  # fmt: skip
    return ordered


class _Root:
    """The folder every row's file must lie in, and the rule that admits a file: inside it, links resolved.

    Each row costs a few string operations: each folder's real path is resolved once, and its links listed once
    (`os.scandir`), not once per file, so a million rows take seconds.
    """

    def __init__(self, root: Path, resolve: bool, list_links: bool = True) -> None:
        self.path = os.path.abspath(os.path.expanduser(root))
        self._prefix = self.path.rstrip(os.sep) + os.sep
        real = os.path.realpath(self.path)
        self._real = (real, real.rstrip(os.sep) + os.sep) if resolve else None
        self._list_links = list_links  # for many files in a folder; one file asks for itself
        self._folders: dict[str, tuple[str, bool, set[str] | None]] = {}  # each folder: real path, inside?, links

    def inside(self, text: str) -> tuple[str, str] | None:
        """The row's file (``text``, relative to the root or absolute) as a normal path and its real path, if inside.

        The real path (links resolved) is what "listed once" compares: one file by two names is one file. Outside the
        root: ``None``.
        """
        path = os.path.normpath(os.path.join(self.path, text))
        if "\x00" in text or not (path.startswith(self._prefix) or path == self.path):
            return None
        folder, _, name = path.rpartition(os.sep)
        folder = folder or os.sep  # a file in /
        if folder not in self._folders:
            real = os.path.realpath(folder)
            links = _links(folder) if self._list_links else None
            self._folders[folder] = (real, self._real is None or self._within(real), links)
        real, inside, links = self._folders[folder]
        linked = name in links if links is not None else os.path.islink(path)
        real = _target(path) if linked else os.path.join(real, name)
        # A link may still lead out; found by walking the root (`found_in_root`), its links are the user's.
        if inside and linked and self._real is not None:
            inside = self._within(real)
        return (path, real or path) if inside else None  # a loop ("") is a bad image, named later

    def _within(self, real: str) -> bool:
        return real == self._real[0] or real.startswith(self._real[1])


def _target(link: str) -> str:
    """Where ``link`` leads (a dangling one: where it would); a loop leads nowhere (``""``)."""
    try:
        return os.path.realpath(link, strict=True)
    except FileNotFoundError:  # a dangling link: a bad image, named later, if it points inside
        return os.path.realpath(link)
    except OSError:  # a loop
        return ""


def lies_inside(root: Path, name: str | os.PathLike) -> bool:
    """Whether ``name`` (relative to ``root``, or absolute) lies inside ``root``, links resolved, existing or not."""
    return _Root(root, resolve=True, list_links=False).inside(os.fspath(name)) is not None


def file_inside(root: Path, name: str | os.PathLike | None) -> Path | None:
    """The file ``name`` (relative to ``root``, or absolute) if it is a file inside ``root``, links resolved, else None.

    The rows' rule (`_Root`) for a file a data set names outside the table's rows (a Hugging Face row's ``path``, a
    saved data set's metadata, a stream's index): a ``../``, an absolute path or a link that leads out of the data
    set's folder is never read, whatever the format. Unlike a row's, the file must exist (there is no bad image to
    report later).
    """
    if not name:
        return None
    place = _Root(root, resolve=True, list_links=False).inside(os.fspath(name))
    return Path(place[0]) if place is not None and os.path.isfile(place[0]) else None


def _listed_once(seen: dict[str, tuple[str, int, str]], real: str, split: str, i: int, path: str, name: str) -> None:
    """Note the file of ``split``'s row ``i`` in ``seen``; one listed before is refused, naming both rows.

    Files are compared by their real paths: one file by two names is one file.
    """
    if (first := seen.setdefault(real, (split, i, path)))[:2] != (split, i):
        alias = "" if first[2] == path else f" (as {shown(first[2])} too, a link to the same file)"
        raise ConfigError(f"{name}: {shown(path)} is listed twice{alias}, as the {first[0]} row {first[1]} and the "
                          f"{split} row {i}; list each image once, with one label and one split.")  # fmt: skip


def _links(folder: str) -> set[str] | None:
    """The names of the links in ``folder`` (none where it does not exist); ``None`` where it cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            return {entry.name for entry in entries if entry.is_symlink()}
    except FileNotFoundError:  # its files are missing: bad images, named later
        return set()
    except OSError:  # a folder that may be read but not listed: each file is asked
        return None


class ItemTableDataModule(ImageClassificationDataModule):
    """Base of the data modules whose images are files or encoded bytes that a format lists in `scan`.

    A subclass sets ``self.root`` (the folder its files must lie in) and implements `scan`; the table does the rest.

    Args:
        bad_images: What to do with images that cannot be read (missing, empty, truncated, not an image, a dangling
            link, over the size bound): ``error`` stops before training and names the first one; ``skip`` trains
            without them and lists them in ``skipped`` (the runs part writes them into the run's
            ``skipped_images.txt`` and logs their count as ``data/skipped_images``).
        **kwargs: The common options of `vitlit.data.ImageClassificationDataModule`.
    """

    #: The folder every file a row names must lie in (links resolved); a subclass sets it. ``None``: no files.
    root: Path | None = None
    #: Whether the rows' files were found by walking ``root`` (class folders), whose links the user put there: a
    #: folder of links to images elsewhere is a common subset. A table's rows only name files: theirs must resolve
    #: inside ``root``, so that a row (or a link beside it) never reads a file from elsewhere.
    found_in_root: bool = False

    def __init__(self, bad_images: Literal["error", "skip"] = "error", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if bad_images not in ("error", "skip"):
            raise ConfigError(f"bad_images={bad_images!r} is not one of 'error', 'skip'.")
        # The PIL mode the files are decoded in, and the largest side a split stores them at, on which an elongated
        # image's resize is bounded (`vitlit.data.images.MAX_PIXELS`).
        self.image_mode = pil_mode(self.in_chans, type(self).__name__)
        self.stored_side = max(self.stored_size(True), self.stored_size(False))
        self.bad_images, self.skipped = bad_images, []
        self._table: tuple[dict[str, Any], list[str]] | None = None  # the admitted items and classes (`_scanned`)
        self._checked: dict[str, Any] = {}  # the splits `_checked_split` checked

    @abstractmethod
    def scan(self) -> dict[str, list[Row]] | Scan:
        """List the data's rows per split: ``{"train": [(file, label name), ...], "val": [...], "test": [...]}``.

        ``train`` is needed, ``val`` and ``test`` where the data has them (without ``val``, validation is carved from
        training; without ``test``, a test split is held out of it); a split given has rows. Files are relative to
        ``self.root``, each listed once; labels are text or integers. Rows may be any iterable of pairs. Return a
        `Scan` to give the class order, or embedded images. Raise `ConfigError` for a layout that cannot work.
        """

    def _scanned(self) -> tuple[dict[str, Any], list[str]]:
        """The format's items and classes: `scan` called once, before any work starts, in three steps.

        1. `scan`'s splits are read into lists; whatever it raises (a ``SystemExit`` too; Ctrl-C aside) names the
           file and line of the format's code that raised it (a split given as a generator runs that code here). A
           path the system refused (permissions, a name too long) stays as it is, said as every such path is.
        2. The table admits the rows as items (`_admit`).
        3. What the data lacks: a test split held out of the training items (the base class's `held_out_split`,
           seeded), and the validation size checked (`carved_count`; `setup` carves it): a size the items
           cannot give is refused before the run folder exists.
        """
        if self._table is not None:
            return self._table
        name = type(self).__name__
        try:
            found = self.scan()
            scan = found if isinstance(found, Scan) else Scan(found)
            if not isinstance(scan.splits, Mapping):
                raise ConfigError(f"{name}.scan() returned a {type(scan.splits).__name__}; it returns {{split: "
                                  f"rows}} (e.g. {{'train': [(file, label), ...]}}) or a Scan "
                                  f"(vitlit.data.table).")  # fmt: skip
            splits = {}
            for split, rows in scan.splits.items():
                if rows is None or (hasattr(rows, "problem") and hasattr(rows, "keep") and hasattr(rows, "__len__")):
                    splits[split] = rows  # a dataset of items (embedded images): it checks and keeps its own items
                elif isinstance(rows, str | bytes | Mapping) or not isinstance(rows, Iterable):
                    raise ConfigError(f"{name}.scan() gave the split {shown(str(split)[:40])!r} as a "
                                      f"{type(rows).__name__}; give each split as a list of (file, label) "
                                      f"pairs.")  # fmt: skip
                else:
                    splits[split] = rows if isinstance(rows, list) else list(rows)
        except (ConfigError, KeyboardInterrupt):
            raise
        except BaseException as err:  # a bug in a format (SystemExit too): not the user's config, never silent
            if isinstance(err, OSError) and (err.errno in PATH_REFUSED or err.errno in NO_SPACE):
                raise  # a path the system refused: said as such
            method, frames = type(self).scan, traceback.extract_tb(err.__traceback__)
            at = next((f for f in reversed(frames) if f.filename == method.__code__.co_filename), frames[-1])
            raise ConfigError(
                f"{method.__qualname__}() raised {quoted(err)} at {at.filename}:{at.lineno}; that is "
                f"a bug in the data format's code (or a file it reads): fix it there."
            ) from None
        items, classes = self._admit(splits, scan.classes, scan.hold_out_test, scan.classes_from)
        # A test split held out where the format asks for one (said in its words, where it gives them); validation
        # is carved in `setup`, and its size checked here.
        if "test" not in items and scan.hold_out_test:
            said = scan.hold_out_test if isinstance(scan.hold_out_test, str) else None
            keep, held = self.held_out_split(len(items["train"]), said)
            items["test"], items["train"] = items["train"].keep(held), items["train"].keep(keep)
        if "val" not in items:
            carved_count(len(items["train"]), self.val_size)
        self._table = items, classes
        return self._table

    def _admit(
        self,
        listed: dict[str, Any],
        given: list[str] | None,
        hold_out_test: bool | str | None,
        given_from: str,
    ) -> tuple[dict[str, Any], list[str]]:
        """Each split's rows as items, after the rules every format shares: split names, rows, labels, files, classes.

        Args:
            listed: Each split's rows as a list, or a dataset of its items (embedded images), as `_scanned` read them.
            given: The class order a `Scan` gives, or ``None`` (the training labels, sorted).
            hold_out_test: `Scan.hold_out_test`, for the words of an empty test split's refusal.
            given_from: `Scan.classes_from`, for the words of a refused class name.
        """
        name, splits = type(self).__name__, {split: rows for split, rows in listed.items() if rows is not None}
        unknown = next((split for split in splits if split not in SPLITS), None)
        if unknown is not None:
            raise ConfigError(f"{name} has the split {shown(str(unknown)[:40])!r}; splits are {', '.join(SPLITS)} (a "
                              f"data set's validation split is val): rename it in the data.")  # fmt: skip
        if not splits.get("train"):
            raise ConfigError(f"{name} found no training images; give data with a train split.")
        for split in ("val", "test"):
            if split in splits and len(splits[split]) == 0:
                instead = ("validation is then carved from training (--data.val_size)" if split == "val" else
                           "a test split is then held out of training (--data.test_size)" if hold_out_test else
                           "test and predict then need one")  # fmt: skip
                raise ConfigError(f"{name}: scan() gave an empty {split} split; give it rows, or leave the key out "
                                  f"({instead}).")  # fmt: skip
        rows = {split: given for split, given in splits.items() if isinstance(given, list)}  # else a dataset
        total = sum(len(split_rows) for split_rows in rows.values())
        if total >= MANY_ROWS:  # seconds of work: said before it starts
            say(f"vitlit: {name}: checking {total:,} rows (labels, files inside {self.root}, each listed once)")
        files, labels, first_rows = self._rows(rows)
        # A dataset's items may name files too, where they embed no image (a Hugging Face row's path): once as well.
        for split, dataset in splits.items():
            for i, path in enumerate(dataset.files() if split not in rows and hasattr(dataset, "files") else ()):
                if path is not None:
                    _listed_once(first_rows, os.path.realpath(path), split, i, str(path), name)
        # The classes in index order: a `Scan`'s (checked as labels are), else the training labels', sorted.
        train = labels.get("train", [])
        if given is None:
            classes = class_order(train, f"{name}: the training rows")
        else:
            try:
                classes = [label_name(c) for c in given]
            except ValueError as err:
                raise ConfigError(f"{name}: in {given_from}, {err}; give each class a name.") from None
            seen: set[str] = set()
            twice = next((c for c in classes if c in seen or seen.add(c)), None)  # the first named again
            if twice is not None:
                raise ConfigError(f"{name}: {given_from} name '{shown(twice)}' twice (whitespace around a name "
                                  f"is dropped); name each class once.")  # fmt: skip
            unnamed = sorted(set(train) - set(classes))
            if unnamed:
                raise ConfigError(f"{name}: the train rows have labels that {given_from} do not name: "
                                  f"{', '.join(shown(s) for s in unnamed[:5])}; add them to classes (or leave classes "
                                  f"out: the training labels, sorted).")  # fmt: skip
        if len(classes) < 2:
            raise ConfigError(f"{name} has {len(classes)} class(es) in its training rows; a classifier needs 2 or "
                              f"more.")  # fmt: skip
        forms: dict[
            str, str
        ] = {}  # each class by its NFC form, spaces as one: 'café' in two encodings, a no-break space
        for c in classes:
            if (other := forms.setdefault(unicodedata.normalize("NFC", " ".join(c.split())), c)) != c:
                raise ConfigError(f"{name}: the classes '{shown(other)}' and '{shown(c)}' ({other!a} and {c!a}) "
                                  f"differ only in their Unicode encoding or spaces; give them one spelling in the "
                                  f"data.")  # fmt: skip
        for split, dataset in splits.items():
            if split not in rows and split != "test":  # -1: an item with no label (the hub's mark), never trained
                unlabelled = next((i for i, t in enumerate(getattr(dataset, "targets", ())) if t == -1), None)
                if unlabelled is not None:
                    raise ConfigError(f"{name}: {shown(dataset.samples[unlabelled][0])} has no label (-1); {split} "
                                      f"rows need labels: label it or leave it out of the split.")  # fmt: skip
        # Each split's class names: its rows' labels, or its dataset's targets (a Hugging Face split).
        split_classes = {split: set(labels.get(split, [])) if split in rows or split not in splits else
                 {classes[t] for t in set(getattr(splits[split], "targets", ())) if 0 <= t < len(classes)}
                 for split in SPLITS}  # fmt: skip
        for split in ("val", "test"):
            strange = sorted(split_classes[split] - split_classes["train"])
            if strange:
                raise ConfigError(f"{name}: {split} rows have labels no training row has: "
                                  f"{', '.join(shown(s) for s in strange[:5])}; correct them or add training rows of "
                                  f"those classes.")  # fmt: skip
        index = {label: i for i, label in enumerate(classes)}
        items = {split: dataset for split, dataset in splits.items() if split not in rows}
        for split in rows:
            pairs = list(zip(files[split], [index[label] for label in labels[split]], strict=True))
            items[split] = ImageFiles(pairs, classes, self.image_mode, self.stored_side, f"the {split} split")
        return items, classes

    def _rows(
        self, rows: dict[str, list[Any]]
    ) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, tuple[str, int, str]]]:
        """Each split's files (inside ``root``, each once over all splits) and class names, in one pass per row.

        Also each file's first row (split, index, path) by its real path, for the files datasets' items name.
        """
        name, files, labels = type(self).__name__, {}, {}
        if rows and self.root is None:
            raise ConfigError(f"{name} lists files but sets no root; its __init__ sets self.root to the folder they "
                              f"lie in.")  # fmt: skip
        root = _Root(self.root, not self.found_in_root) if rows else None
        names: dict[tuple[Any, type], str] = {}  # each label's class name, checked once (True is no 1: by type too)
        seen: dict[str, tuple[str, int, str]] = {}  # each file's first row, by its real path
        for split, split_rows in rows.items():
            files[split], labels[split] = [], []
            for i, row in enumerate(split_rows):
                try:
                    if isinstance(row, str | bytes):
                        raise ValueError
                    file, label = row
                except (TypeError, ValueError):
                    raise ConfigError(f"{name}: the {split} row {i} is {shown(repr(row))[:80]}, not a (file, label) "
                                      f"pair; scan() gives each row as (file, label name).") from None  # fmt: skip
                try:
                    text = os.fspath(file)
                    place = root.inside(text) if isinstance(text, str) else None
                except (TypeError, OSError, ValueError):  # no path; a name the system refuses
                    text, place = repr(file), None
                if place is None:
                    raise ConfigError(f"{name}: the {split} row '{shown(text)}' is not a file inside {root.path} "
                                      f"(row {i}); rows may only name the data's own files.")  # fmt: skip
                path, real = place
                _listed_once(seen, real, split, i, path, name)
                try:
                    class_name = names[label, type(label)]
                except (KeyError, TypeError):  # a label value not seen before, checked once (a list: no label)
                    try:
                        class_name = names[label, type(label)] = label_name(label)
                    except ValueError as err:
                        raise ConfigError(f"{name}: the {split} row {i} ('{shown(text)}'): {err}; give every row a "
                                          f"class name.") from None  # fmt: skip
                files[split].append(path)
                labels[split].append(class_name)
        return files, labels, seen

    def no_test_split(self) -> str:
        """The refusal of ``test`` and ``predict`` where the data has no test split (and none is held out)."""
        return f"{type(self).__name__} has no test split; test and predict need one."

    @property
    def class_names(self) -> list[str]:
        """The classes the format found, in index order."""
        return list(self._scanned()[1])

    def _checked_split(self, name: str) -> Any:
        """A split's items after the start-up check of each image (bad ones stop the run, or are left out)."""
        items_by_split = self._scanned()[0]
        if name in items_by_split and name not in self._checked:
            items = items_by_split[name]
            bad = {i: problem for i in range(len(items)) if (problem := items.problem(i)) is not None}
            if bad and self.bad_images == "error":  # the first one named
                (i, problem), more = next(iter(bad.items())), f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
                raise ConfigError(f"{items.ITEM.format(items.samples[i][0])} is {problem}{more}; remove or replace "
                                  f"it, or pass --data.bad_images skip to train without such images.")  # fmt: skip
            if bad and len(bad) == len(items):  # nothing left to train or score on
                raise ConfigError(f"every image of {items.where} is unreadable ({len(bad)}, the first: "
                                  f"{items.ITEM.format(items.samples[next(iter(bad))][0])}), so --data.bad_images "
                                  f"skip would leave the split empty; replace or remove them.")  # fmt: skip
            if bad:  # left out, and listed in the run's skipped_images.txt (`vitlit.runs.records.SkippedImages`)
                # A log line, not a Python warning: a warning would print vitlit's own source line under it.
                rank_zero_info(f"vitlit: skipping {len(bad)} unreadable image(s) of {items.where} "
                               f"(--data.bad_images skip)")  # fmt: skip
                self.skipped += [BadImage(Path(items.samples[i][0]), problem) for i, problem in bad.items()]
                items = items.keep([i for i in range(len(items)) if i not in bad])
            self._checked[name] = items
            if name != "train":  # a validation or test split of the data's own
                copies_of_training(self._checked[name], self._checked_split("train"), name)
        return self._checked.get(name)

    def train_dataset(self) -> Any:
        """The training items."""
        return self._checked_split("train")

    def val_dataset(self) -> Any:
        """The validation items, or ``None``: validation is then carved from training (``val_size``)."""
        return self._checked_split("val")

    @property
    def has_test_split(self) -> bool:
        """Whether the data has a test split (its own, or one held out)."""
        return "test" in self._scanned()[0]

    @property
    def description(self) -> str:
        """The format and the folder its files lie in (what the run card records as the data)."""
        return type(self).__name__ if self.root is None else f"{type(self).__name__} at {Path(self.root).resolve()}"

    def test_dataset(self) -> Any:
        """The test items: the data's own, or those held out of training."""
        if not self.has_test_split:
            raise ConfigError(self.no_test_split())
        return self._checked_split("test")


def _content(items: Any, i: int) -> bytes:
    """Item ``i``'s bytes as stored: a data set's embedded bytes (``encoded``), else its file's."""
    data = items.encoded(i) if hasattr(items, "encoded") else Path(items.samples[i][0])
    return data if isinstance(data, bytes) else data.read_bytes() if data is not None else b""


def _size(items: Any, i: int) -> int:
    """Item ``i``'s size in bytes, its file's read from the file system (-1: unknown)."""
    if hasattr(items, "encoded"):
        return len(_content(items, i))
    try:
        return os.stat(items.samples[i][0]).st_size
    except OSError:
        return -1


def copies_of_training(items: Any, train: Any, split: str) -> None:
    """Say in one line how many images of a validation or test split are byte copies of training images.

    Such a copy is scored as an image the model has seen, so the split's accuracy overstates what it learned. Files
    are compared by size first (``os.stat``, nothing read), and only those whose size some image of the other split
    shares are read and hashed.
    """
    theirs: dict[int, list[int]] = {}
    for i in range(len(train)):
        if (size := _size(train, i)) >= 0:
            theirs.setdefault(size, []).append(i)
    ours = {i: size for i in range(len(items)) if (size := _size(items, i)) in theirs}  # each size read once
    digest = lambda of, i: hashlib.blake2b(_content(of, i)).digest()  # noqa: E731
    hashes = {digest(train, j): j for size in set(ours.values()) for j in theirs[size]}
    copies = [(i, hashes[h]) for i in ours if (h := digest(items, i)) in hashes]
    if copies:
        i, j = copies[0]
        rank_zero_info(f"vitlit: {len(copies)} of the {len(items)} {split} images are byte copies of training images "
                       f"(e.g. {shown(items.samples[i][0])} = {shown(train.samples[j][0])}); their accuracy "
                       f"overstates what the model learned: remove them from one of the splits")  # fmt: skip
