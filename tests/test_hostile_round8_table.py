"""Hostile round 8 (issue 73), the fork contract's second half: what the item table admits for every format.

Each class is fixed once, in `vitlit.data.table.ItemTableDataModule`'s admission (`_scanned`, `_admit`), so class
folders, labels.csv, Hugging Face data sets and a fork's own `scan()` get it alike: labels as class names (whitespace,
control characters, None), files listed twice, the order of number-like labels, -1 as no label, whatever `scan()`
raises, empty splits, the shape of what it returns, a million rows, and one default for the test split.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import DIGITS_CONFIG, carries, refused, said_with
from helpers.counting import python_calls

from vitlit.data import table
from vitlit.data.folder import ImageFolderDataModule
from vitlit.data.table import ItemTableDataModule, Scan
from vitlit.errors import ConfigError

FORK = ["--data", "test_hostile_round8_table.HostileFork"]


def _pairs(files: list[str], labels: list[Any]) -> list[tuple[str, Any]]:
    return list(zip(files, labels, strict=False))


def _two(files: list[str]) -> list[tuple[str, str]]:
    """Rows of two classes, ``cat`` and ``dog``, one image each."""
    return _pairs(files, ["cat", "dog"] * (len(files) // 2))


#: What each hostile `scan()` returns, from the image files of its root (``img/0.png`` ...).
CASES: dict[str, Callable[[list[str]], Any]] = {
    "two classes": lambda f: {"train": _two(f)},
    "spaced labels": lambda f: {"train": _pairs(f, ["3", "3 ", " 3", "4", "\t4\n"] * 4)},
    "a NUL in a label": lambda f: {"train": _pairs(f, ["3", "4", "3\x00evil"] + ["3", "4"] * 8)},
    "a None label": lambda f: {"train": _pairs(f, ["3", "4", None] + ["3", "4"] * 8)},
    "twice in training": lambda f: {"train": [*_two(f), (f[0], "cat")]},
    "twice with two labels": lambda f: {"train": [*_two(f), (f[0], "dog")]},
    "in training and test": lambda f: {"train": _two(f[2:]), "test": [(f[0], "cat"), (f[2], "cat")]},
    "in training and validation": lambda f: {"train": _two(f[2:]), "val": [(f[5], "dog")]},
    "twice, spelt apart": lambda f: {"train": [*_two(f), ("./" + f[3], "dog")]},
    "COCO ids": lambda f: {"train": _pairs(f, [str(i % 10 + 1) for i in range(len(f))])},
    "exit 0": lambda f: exec("raise SystemExit(0)"),
    "empty val": lambda f: {"train": _two(f), "val": []},
    "empty test": lambda f: {"train": _two(f), "test": []},
    "a 3-item row": lambda f: {"train": [(*row, "extra") if i == 4 else row for i, row in enumerate(_two(f))]},
    "a generator": lambda f: {"train": (row for row in _two(f))},
    "tuples": lambda f: {"train": tuple(_two(f))},
    "a list": lambda f: _two(f) * 50,
    "a class missing from classes": lambda f: Scan({"train": _pairs(f, [str(i % 10) for i in range(len(f))])},
                                                   classes=[str(i) for i in range(9)]),
    "a class twice in classes": lambda f: Scan({"train": _two(f)}, classes=["cat", "dog", "cat"]),
    "a Scan": lambda f: Scan({"train": _two(f)}),
    "a Scan keeping test for the data": lambda f: Scan({"train": _two(f)}, hold_out_test=None),
}  # fmt: skip


class HostileFork(ItemTableDataModule):
    """A fork from the guide whose `scan()` returns one of round 8's hostile shapes (``case``), with no checks.

    Args:
        root: The folder of ``img/<n>.png``.
        case: The name of the `CASES` entry `scan()` returns.
        **kwargs: The options of `vitlit.data.table.ItemTableDataModule`.
    """

    def __init__(self, root: str | Path, case: str = "two classes", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root, self.case = Path(root).expanduser(), case

    def scan(self) -> Any:
        files = sorted(f"img/{p.name}" for p in (self.root / "img").glob("*.png"))
        return CASES[self.case](sorted(files, key=lambda f: int(f[4:-4])))


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory, digits_dir: Path) -> Path:
    """20 digit images as ``img/0.png`` ... ``img/19.png``."""
    root = tmp_path_factory.mktemp("fork")
    (root / "img").mkdir()
    for i, file in enumerate(sorted((digits_dir / "train").glob("*/*.png"))[:20]):
        shutil.copy(file, root / "img" / f"{i}.png")
    return root


def _refused(root: Path, case: str, **options: Any) -> str:
    """The admission's refusal of a case, asserted to be one line."""
    with pytest.raises(ConfigError) as refusal:
        _ = HostileFork(root, case, **options).class_names  # read as the CLI reads it, to link it to the model
    line = str(refusal.value)
    assert "\n" not in line and len(line) < 400, line
    return line


def _fit_refused(capsys: pytest.CaptureFixture[str], root: Path, case: str, runs: Path, *extra: object) -> str:
    """The one line (exit status 2) of a ``fit`` of the fork, which leaves no run folder."""
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *FORK, "--data.root", root, "--data.case", case,
                   "--data.val_size", "4", "--trainer.default_root_dir", runs, *extra)  # fmt: skip
    assert not runs.exists(), line
    return line


# -- class 1: labels are class names: whitespace around them dropped, control characters and None refused


def test_a_label_and_the_same_label_with_spaces_are_one_class(images: Path) -> None:
    """Issue 73: "3" and "3 " were two classes (20 classes for 10)."""
    data = HostileFork(images, "spaced labels")
    assert data.class_names == ["3", "4"]
    assert sorted(set(data.train_dataset().targets)) == [0, 1]


@pytest.mark.parametrize(
    ("case", "parts"),
    [("a NUL in a label", ["train row 2", "img/2.png", "3\\x00evil", "control character"]),
     ("a None label", ["train row 2", "img/2.png", "missing (None)"])],
)  # fmt: skip
def test_a_label_with_a_control_character_or_none_is_refused_naming_its_row(
    case: str, parts: list[str], images: Path
) -> None:
    """Issue 73: "3\\x00evil" was an eleventh class of one image, None a class named "None"."""
    carries(_refused(images, case), *parts)


# -- class 2: a file listed twice, in any splits, is one line naming it and its rows, at admission


@pytest.mark.parametrize(
    ("case", "rows"),
    [("twice in training", ["train row 0", "train row 20"]),
     ("twice with two labels", ["train row 0", "train row 20"]),
     ("in training and test", ["train row 0", "test row 1"]),
     ("in training and validation", ["train row 3", "val row 0"]),
     ("twice, spelt apart", ["train row 3", "train row 20"])],
)  # fmt: skip
def test_a_file_listed_twice_is_refused_naming_its_rows(case: str, rows: list[str], images: Path) -> None:
    """Issue 73: a file listed twice trained silently; in training and test it was a "byte copy" at test only."""
    file = {"in training and test": "2", "in training and validation": "5", "twice, spelt apart": "3"}.get(case, "0")
    carries(_refused(images, case), f"{images / 'img' / file}.png", "listed twice", *rows)


def test_a_file_in_training_and_test_is_refused_before_a_fit_starts(
    images: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carries(_fit_refused(capsys, images, "in training and test", tmp_path / "runs"), "listed twice", "test row 1")


# -- class 3: number-like labels in numeric order, for every format, said in one line


def test_number_like_labels_are_ordered_as_numbers_and_said(
    images: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 73: COCO's category ids gave the class order '1', '10', '2', ... without a word."""
    numbers = [str(i) for i in range(1, 11)]
    with caplog.at_level("INFO"):
        assert HostileFork(images, "COCO ids").class_names == numbers
    said_with(caplog.text, "HostileFork", "10 labels", "numeric order", "1, 2, 3")
    for i, file in enumerate(sorted((images / "img").glob("*.png"))):  # class folders named by number
        (tmp_path / "folders" / str(i % 10 + 1)).mkdir(parents=True, exist_ok=True)
        shutil.copy(file, tmp_path / "folders" / str(i % 10 + 1))
    assert ImageFolderDataModule(root=tmp_path / "folders").class_names == numbers
    caplog.clear()
    with caplog.at_level("INFO"):
        assert HostileFork(images).class_names == ["cat", "dog"]  # text: sorted, as before, and nothing said
    assert "order" not in caplog.text
    # '1' and '01' were two classes, ordered side by side: one number, refused naming both.
    (tmp_path / "folders" / "01").mkdir()
    shutil.copy(next((tmp_path / "folders" / "1").iterdir()), tmp_path / "folders" / "01")
    with pytest.raises(ConfigError, match="the labels '01' and '1' are one number but two classes"):
        _ = ImageFolderDataModule(root=tmp_path / "folders").class_names


# -- class 5: whatever scan() raises is one line naming the format's code


def test_a_scan_that_exits_with_status_0_is_one_line(
    images: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 73: a scan() raising SystemExit(0) made fit print nothing and exit 0."""
    line = _fit_refused(capsys, images, "exit 0", tmp_path / "runs")
    carries(line, "HostileFork.scan() raised SystemExit: 0", __file__)


# -- class 6: an empty split is refused, naming what to do


@pytest.mark.parametrize(("case", "parts"), [("empty val", ["empty val split", "--data.val_size"]),
                                             ("empty test", ["empty test split", "--data.test_size"])])  # fmt: skip
def test_an_empty_split_is_refused_before_the_run_folder_exists(
    case: str, parts: list[str], images: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 73: val: [] failed after the run folder existed (memory), trained without validation (workers); test:
    [] passed silently."""
    carries(_fit_refused(capsys, images, case, tmp_path / "runs", "--data.source", "memory"), *parts)


# -- class 7: scan()'s return shape


@pytest.mark.parametrize(
    ("case", "parts"),
    [("a 3-item row", ["train row 4", "'extra'", "(file, label)"]),
     ("a list", ["returned a list", "{split: rows}", "Scan"]),
     ("a class missing from classes", ["labels that Scan's classes do not name: 9"]),
     ("a class twice in classes", ["'cat' twice"])],
)  # fmt: skip
def test_what_scan_returns_is_checked_in_one_line(case: str, parts: list[str], images: Path) -> None:
    """Issue 73: a 3-item row's ValueError escaped the wrapper, a list was quoted as a 2,000-character split name, a
    duplicate class was never named."""
    carries(_refused(images, case), *parts)


@pytest.mark.parametrize("case", ["a generator", "tuples"])
def test_rows_may_come_as_any_iterable(case: str, images: Path) -> None:
    """Issue 73: rows as a generator or a tuple said "0 class(es)"."""
    data = HostileFork(images, case)
    assert data.class_names == ["cat", "dog"] and len(data.train_dataset()) + len(data.test_dataset()) == 20


# -- class 9 (issue 74, item 6): a Scan holds the test split out as a dict does


def test_a_scan_and_a_dict_hold_out_the_same_test_split(images: Path) -> None:
    """Issue 74, 6: switching from a dict to a Scan (to give the class order) dropped the held-out test split."""
    as_dict, as_scan = HostileFork(images), HostileFork(images, "a Scan")
    assert as_dict.has_test_split and as_scan.has_test_split
    assert as_dict.test_dataset().samples == as_scan.test_dataset().samples
    kept = HostileFork(images, "a Scan keeping test for the data")  # the documented way to keep test for the data
    assert not kept.has_test_split
    with pytest.raises(ConfigError, match="has no test split"):
        kept.test_dataset()


# -- class 8: a million rows: said first, and checked in work linear in the rows


def test_many_rows_are_announced_and_checked_in_linear_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 73: a scan() of 1,000,000 rows printed nothing for over 120 s (each row resolved its root again)."""

    class Many(ItemTableDataModule):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.root, self.n = tmp_path, n

        def scan(self) -> dict:
            return {"train": [(f"{i % 10}/{i}.png", str(i % 7)) for i in range(self.n)]}

    for folder in range(10):
        (tmp_path / str(folder)).mkdir()
    (tmp_path / "3" / "0.png").symlink_to(tmp_path / "1" / "1.png")  # a link inside: resolved, once
    monkeypatch.setattr(table, "MANY_ROWS", 2_000, raising=False)
    resolved = []
    real = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda path, **kw: resolved.append(path) or real(path, **kw))
    small = python_calls(lambda: Many(1_000).class_names)
    assert "rows" not in capsys.readouterr().out  # a thousand rows: nothing to announce
    resolved.clear()
    large = python_calls(lambda: Many(4_000).class_names)
    said_with(capsys.readouterr().out, "Many", "4,000 rows")
    assert len(resolved) <= 1 + 10 + 1  # the root, each folder once, the link: not once per row
    assert large < 4.5 * small, (small, large)  # four times the rows, four times the work


# -- class 4: -1, the Hugging Face hub's mark of an unlabelled row, is no class in any label column


def _hub_set(folder: Path, train: list[Any], test: list[Any] | None = None, kind: str = "int") -> str:
    """A save_to_disk data set of digit images whose label column (``int``, ``classlabel`` or ``string``) holds
    ``train`` (and a test split holding ``test``)."""
    datasets = pytest.importorskip("datasets")
    from helpers.hf import digits_rows

    images, _ = digits_rows(len(train) + len(test or []))
    label = {"int": datasets.Value("int64"), "string": datasets.Value("string"),
             "classlabel": datasets.ClassLabel(names=[f"digit {d}" for d in range(10)])}[kind]  # fmt: skip
    features = datasets.Features({"image": datasets.Image(), "label": label})
    splits = {"train": train, **({"test": test} if test is not None else {})}
    datasets.DatasetDict({
        split: datasets.Dataset.from_dict({"image": images[len(train) if split == "test" else 0:][: len(labels)],
                                           "label": labels}, features=features)
        for split, labels in splits.items()
    }).save_to_disk(str(folder))  # fmt: skip
    return str(folder)


@pytest.mark.parametrize("kind", ["int", "classlabel"])
def test_minus_one_in_training_is_no_class_in_either_label_column(kind: str, tmp_path: Path) -> None:
    """Issue 73: a plain int column's -1 trained "-1" as a class, while a ClassLabel's -1 was refused."""
    from vitlit.data.hf import HFDataModule

    path = _hub_set(tmp_path / "hub", [d % 10 if d != 5 else -1 for d in range(40)], kind=kind)
    with pytest.raises(ConfigError) as refusal:
        _ = HFDataModule(path).class_names
    carries(str(refusal.value), f"{path} train row 5", "no label (-1)")


def test_an_unlabelled_test_split_leaves_fit_alone_and_test_names_predict(tmp_path: Path) -> None:
    """Issue 73: an unlabelled test split (all -1) blocked fit, which never reads it, and named no way out."""
    from vitlit.data.hf import HFDataModule
    from vitlit.runs.prediction_table import _true_labels

    path = _hub_set(tmp_path / "hub", [d % 10 for d in range(40)], [-1] * 12)
    data = HFDataModule(path, val_size=8, num_workers=0)
    assert data.class_names == [str(d) for d in range(10)]
    data.setup("fit")  # what fit reads: training and validation
    assert len(data.train_set) == 32 and len(data.val_set) == 8
    with pytest.raises(ConfigError) as refusal:
        data.setup("test")
    carries(str(refusal.value), "test split has no labels", "12", "predict")
    data.setup("predict")  # predict classifies it, without a label column
    assert len(data.predict_set) == 12 and _true_labels(data) is None


def test_hugging_face_text_labels_follow_the_tables_rule(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 73: one rule for labels in every format: "3 " is "3", and integers as text sort as numbers."""
    from vitlit.data.hf import HFDataModule

    path = _hub_set(tmp_path / "hub", ["3", "3 ", "10", "2", " 10"] * 8, kind="string")
    with caplog.at_level("INFO"):
        assert HFDataModule(path).class_names == ["2", "3", "10"]
    said_with(caplog.text, "3 labels", "'label'", "numeric order", "2, 3, 10")


def test_the_fork_guide_lists_every_rule_of_the_admission() -> None:
    """Issue 73's acceptance: the guide's list of what the base class checks names each rule of this round."""
    from helpers.cli import ROOT

    guide = (ROOT / "docs" / "your-data.md").read_text(encoding="utf-8").split("## Fork it for your data")[1]
    checks = guide[guide.index("what no format should repeat") : guide.index("Return a `Scan`")]
    for rule in ("`val: []`", "listed once over all splits", "whitespace", "control character",
                 "as numbers where every label is an integer", "`SystemExit`", "iterable of `(file, label)` pairs",
                 "whether `scan()` returns a dict or a `Scan`", "1,000,000 rows"):  # fmt: skip
        assert rule in checks, rule


def test_class_folders_beside_a_test_folder_name_what_stopped_the_flat_layout(tmp_path: Path) -> None:
    # root/{cat,dog,test}: a forker's class folders and a held-back test/: the layout is a split one without train/.
    from vitlit.data.folder import class_folders
    from vitlit.errors import ConfigError

    for name in ("cat", "dog", "test/cat"):
        (tmp_path / name).mkdir(parents=True)
    with pytest.raises(ConfigError) as refused:
        class_folders(tmp_path)
    assert "has test/ but no train/" in str(refused.value) and str(tmp_path / "train") in str(refused.value)
