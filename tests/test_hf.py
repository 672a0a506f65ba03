"""Hugging Face data sets as users keep them (issue 43): Parquet shards and save_to_disk folders, offline."""

from __future__ import annotations

import csv
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from helpers.cli import DIGITS_CONFIG, FEW_TOKENS, carries, refused, run_cli, said_with, vitlit_command
from helpers.counting import calls_to
from helpers.hf import write_hub_cache, write_parquet, write_saved

pytest.importorskip("datasets")

HF = ["--data", "vitlit.data.hf.HFDataModule"]
#: The hub's shard names of a training and a test split.
HUB = {"train-00000-of-00001.parquet": "train", "test-00000-of-00001.parquet": "test"}
SHORT = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2"]


def _fit(path: Path, root: Path, *extra: object):
    return run_cli("fit", "--config", DIGITS_CONFIG, *HF, "--data.path", path, *SHORT, "--trainer.default_root_dir",
                   root, *extra)  # fmt: skip


def test_parquet_shards_train_test_and_predict_with_their_class_labels(tmp_path: Path) -> None:
    folder = write_parquet(tmp_path / "pq")
    fit = _fit(folder, tmp_path / "runs", "--data.augment", "randaugment", *FEW_TOKENS)
    data = fit.datamodule
    assert data.class_names == [f"digit {d}" for d in range(10)]  # the ClassLabel's names
    assert len(data.train_set) + len(data.val_set) == 1347 and fit.trainer.global_step == 8  # 75% of 1,797
    run = Path(fit.trainer.log_dir)
    ckpt = run / "checkpoints" / "last.ckpt"
    test = run_cli("test", "--config", run / "config.yaml", "--ckpt_path", ckpt)
    assert len(test.datamodule.test_set) == 450  # the data set's own test split
    predict = run_cli("predict", "--config", run / "config.yaml", "--ckpt_path", ckpt)
    rows = list(csv.DictReader((Path(predict.trainer.log_dir) / "predictions.csv").open()))
    assert len(rows) == 450 and rows[0]["source"] == f"{folder} test row 0" and rows[0]["predicted"].startswith("digit")
    card = (run / "run_card.json").read_text()
    assert "Hugging Face data set" in card and str(folder) in card  # the run card names the source


def test_a_saved_data_set_with_string_labels_and_no_test_split_is_carved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = write_saved(tmp_path / "saved", labels="string", n=600)
    with caplog.at_level("INFO"):
        fit = _fit(folder, tmp_path / "runs", "--data.test_size", "0.2")
    data = fit.datamodule
    assert data.class_names == [f"d{d}" for d in range(10)]  # strings, in sorted order, and said so
    said_with(caplog.text, "10 labels", "'label'", "d0, d1")
    said_with(caplog.text, "120 of 600", "test", "--data.test_size 0.2", "seed 42")
    data.setup("test")
    held, trained = set(data.test_set.dataset.rows), set(data.train_set.dataset.rows)
    assert len(held) == 120 and not held & trained  # the carved test split never trains
    again = _fit(folder, tmp_path / "again", "--data.test_size", "0.2").datamodule
    again.setup("test")
    assert set(again.test_set.dataset.rows) == held  # seeded: the same rows every run
    run = Path(fit.trainer.log_dir)
    predict = run_cli("predict", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt")
    rows = list(csv.DictReader((Path(predict.trainer.log_dir) / "predictions.csv").open()))
    assert len(rows) == 120 and {row["predicted"] for row in rows} <= {f"d{d}" for d in range(10)}


def test_a_bad_row_is_named_and_skip_trains_without_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43's hostile pass: a Parquet row whose bytes are PostScript never reaches a decoder."""
    folder = write_parquet(tmp_path / "pq", n=400, bad_row=7)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", folder,
                    "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "train row" in line and "not an image of the formats vitlit reads" in line and "bad_images skip" in line
    assert not (tmp_path / "runs").exists()
    fit = _fit(folder, tmp_path / "runs", "--data.bad_images", "skip")
    assert len(fit.datamodule.skipped) == 1 and fit.trainer.global_step == 8


@pytest.mark.parametrize(
    ("case", "said"),
    [("float", "holds float32 values, not class labels"), ("column", "has no column 'picture'"),
     ("hub", "a hub name needs the network (HF_HUB_OFFLINE is set)"), ("missing", "matches no file")],
)  # fmt: skip
def test_what_cannot_be_a_data_set_is_one_line_before_anything_runs(
    case: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, extra = str(tmp_path / "nothing*.parquet"), []
    if case == "float":
        path = str(write_parquet(tmp_path / "pq", labels="float", splits=("train",), n=50))
    elif case == "column":
        path, extra = str(write_parquet(tmp_path / "pq", splits=("train",), n=50)), ["--data.image_column", "picture"]
    elif case == "hub":
        path = "someone/some-digits"
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", path, *extra,
                    "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    # A hang guard, ten times the 1-3 s this takes on an idle machine: datasets' own retries took half a minute.
    assert said in line and time.monotonic() - started < 30
    assert not (tmp_path / "runs").exists()


def test_an_unreachable_hub_is_said_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    from vitlit.hub import hub_unreachable

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with socket.socket() as closed:  # a port of this machine where nothing listens
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    endpoints = {f"https://127.0.0.1:{port}": ("127.0.0.1", port), "https://127.0.0.1": ("127.0.0.1", 443),
                 "http://127.0.0.1": ("127.0.0.1", 80)}  # fmt: skip
    for endpoint, address in endpoints.items():
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        with calls_to(monkeypatch, socket, "create_connection") as attempts:
            assert f"{address[0]}:{address[1]} cannot be reached" in hub_unreachable(timeout=2)
        # One try, bounded, at the endpoint's own port (hostile round 7: another port was still probed on 443).
        assert attempts == [((address,), {"timeout": 2})], attempts


@pytest.mark.slow
def test_a_hub_data_set_in_the_local_cache_trains_offline(tmp_path: Path) -> None:
    """Issue 53: without the network, a hub name that an earlier load cached trains from the cache, at once."""
    write_hub_cache(tmp_path / "hf" / "datasets", "someone/some-digits", n=400)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "https://127.0.0.1"}  # no hub answers here
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        env.pop(name, None)
    started = time.monotonic()
    done = subprocess.run(vitlit_command("fit", "--config", DIGITS_CONFIG, *HF, "--data.path", "someone/some-digits",
                                         "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
                                         "--trainer.default_root_dir", tmp_path / "runs"),
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # A hang guard, about ten times the fit's 12 s on an idle machine: no half minute of hub retries per call.
    assert time.monotonic() - started < 120 and (tmp_path / "runs").exists()
    done = subprocess.run(vitlit_command("fit", "--config", DIGITS_CONFIG, *HF, "--data.path", "someone/other",
                                         "--trainer.default_root_dir", tmp_path / "other"),
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "needs the network (127.0.0.1:443 cannot be reached" in done.stderr.splitlines()[-1]


def _hub_layout(folder: Path, labels: dict[str, int]) -> Path:
    """The digits in the hub's CIFAR layout: the image in ``img``, ClassLabel columns of the given class counts."""
    from datasets import ClassLabel, Dataset, Features
    from datasets import Image as HFImage
    from helpers.hf import digits_rows

    images, targets = digits_rows(300)
    columns = {"img": images, **{name: [t % k for t in targets] for name, k in labels.items()}}
    features = {"img": HFImage(), **{name: ClassLabel(names=[f"c{i}" for i in range(k)]) for name, k in labels.items()}}
    folder.mkdir(parents=True)
    Dataset.from_dict(columns, features=Features(features)).to_parquet(str(folder / "train-00000-of-00001.parquet"))
    return folder


@pytest.mark.parametrize(
    ("labels", "column"), [({"label": 10}, "label"), ({"fine_label": 100, "coarse_label": 20}, "fine_label")],
    ids=["cifar10", "cifar100"],
)  # fmt: skip
def test_the_hubs_cifar_layouts_load_with_only_the_path(
    labels: dict[str, int], column: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 55, 2: `img` and `fine_label` were found after a full start-up, each needing a flag."""
    folder = _hub_layout(tmp_path / "hub", labels)
    with caplog.at_level("INFO"):
        fit = _fit(folder, tmp_path / "runs")
    assert fit.datamodule.image_column == "img" and fit.datamodule.label_column == column
    assert fit.datamodule.num_classes == labels[column]
    assert ("labels from column 'fine_label' (100 classes)" in caplog.text) == (column == "fine_label")
    said_with(caplog.text, "27 of 270", "--data.val_size 0.1")


def test_two_label_columns_of_one_size_are_refused_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _hub_layout(tmp_path / "hub", {"a": 10, "b": 10})
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", folder,
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    carries(line, "ClassLabel", "a, b", "--data.label_column")


def _rows(folder: Path, labels: list, splits: tuple[str, ...] = ("train",)) -> Path:
    """A save_to_disk data set of ``labels`` (ints: a ClassLabel of 10 names; else strings) in each of ``splits``."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
    from datasets import Image as HFImage
    from helpers.hf import digits_rows

    images, _ = digits_rows(max(len(labels), 1))
    kind = ClassLabel(names=[str(d) for d in range(10)]) if all(isinstance(v, int) for v in labels) else Value("string")
    data = Dataset.from_dict({"image": images[: len(labels)], "label": labels},
                             features=Features({"image": HFImage(), "label": kind}))  # fmt: skip
    DatasetDict(dict.fromkeys(splits, data)).save_to_disk(str(folder))
    return folder


@pytest.mark.parametrize(
    ("case", "said"),
    [("empty", "has no training rows"), ("one row", "a classifier needs rows of at least 2"),
     ("one class", "every training row has the label '0'; a classifier needs rows of at least 2 of its 10 classes"),
     ("missing label", "train row 3: the label is missing (None)"),
     ("two validation splits", "has the splits val, validation, all names of a val split; keep one of them")],
)  # fmt: skip
def test_hostile_round_6_hugging_face_shapes_are_one_line(
    case: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hostile round 6, classes 6 and 7: an IndexError, "between 1 and 0", a silent one-class run, an 81-line
    traceback, and a validation split taken without a word."""
    folder = tmp_path / "pq"
    if case == "empty":
        _rows(folder, [])
    elif case == "one row":
        _rows(folder, [3])
    elif case == "one class":
        _rows(folder, [0] * 40)
    elif case == "missing label":
        _rows(folder, ["a", "b", "a", None, "b"] * 8)
    else:
        _rows(folder, [d % 10 for d in range(60)], splits=("train", "val", "validation"))
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", folder,
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert said in line and not (tmp_path / "runs").exists()


def test_a_glob_over_other_files_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Hostile round 6, class 7: a glob over Parquet and other files was datasets' DatasetGenerationError."""
    folder = write_parquet(tmp_path / "pq", splits=("train",), n=50)
    (folder / "notes.txt").write_text("mine")
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", f"{folder}/*",
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "notes.txt, which is no Parquet file" in line


def test_a_glob_over_a_test_splits_shards_is_refused_not_trained_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """datasets reads a glob as one training split: the hub's test-*.parquet were trained on, and a test split held
    out of the mix, without a word. The folder of the same files reads each split by its files' names."""
    folder = write_parquet(tmp_path / "pq", splits=("train", "test"), n=60)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", f"{folder}/*.parquet",
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    carries(line, "test-00000-of-00001.parquet, a test split's file by its name", "give the folder")
    assert not (tmp_path / "runs").exists()
    from vitlit.data.hf import HFDataModule

    train_only = HFDataModule(f"{folder}/train-*.parquet", img_size=16, num_workers=0)
    assert len(train_only.class_names) == 10  # a glob of the training files alone is read
    named = HFDataModule(str(next(folder.glob("test-*.parquet"))), img_size=16, num_workers=0)
    assert len(named.class_names) == 10  # a file given by its name is read as given, whatever the name says


@pytest.mark.parametrize(
    ("layout", "given", "said"),
    [
        ({"Train.parquet": "train", "Test.parquet": "test"}, "", None),  # datasets' search is case-sensitive
        ({"train/0.parquet": "train", "test/0.parquet": "test"}, "", None),  # split folders
        ({"train.parquet": "train", "holdout.parquet": "test"}, "", "holdout.parquet, whose name says no split"),
        ({"train/0.parquet": "train", "test/0.parquet": "test"}, "*/*.parquet", "test/0.parquet, a test split's"),
        ({"shards/train-0.parquet": "train", "test-0.parquet": "test"}, "**/*.parquet", "test-0.parquet, a test"),
        ({**HUB, ".old/train-00000-of-00001.parquet": "train"}, "", None),  # hidden, as datasets' search leaves it
        ({**HUB, "._train-00000-of-00001.parquet": "junk", "__MACOSX/._test-00000-of-00001.parquet": "junk"}, "", None),
        ({**HUB, "extra-00000-of-00001.parquet": "train"}, "", None),  # the hub's SVHN: extra is a split, left out
        ({f"a[1]/{name}": split for name, split in HUB.items()}, "", None),  # a pattern's character in a folder's name
        ({"train/data-00000-of-00001.parquet": "train", "test/data-00000-of-00001.parquet": "test"}, "", None),
        ({"train_data-00000-of-00001.parquet": "train", "test_data-00000-of-00001.parquet": "test"}, "", None),
        (
            {"train/data-00000-of-00001.parquet": "train", "test/data-00000-of-00001.parquet": "test"},
            "**/*.parquet",
            "test/data-00000-of-00001.parquet, a test split's",
        ),
        (  # the hub's camelyon17: data/ shards name their splits by their whole word, none of them train
            {"data/id_train-00000-of-00001.parquet": "train", "data/ood_test-00000-of-00001.parquet": "test"},
            "",
            "has the splits id_train, ood_test but none named train",
        ),
        ({**HUB, "test-dev.parquet": "test"}, "", "test-dev.parquet, whose name says both a val and a test split"),
    ],
    ids=[
        "capitalised",
        "split-folders",
        "unnamed-beside-named",
        "glob-of-split-folders",
        "recursive-glob",
        "hidden",
        "macos-leftovers",
        "svhn-extra",
        "bracket",
        "shards-in-split-folders",
        "split-words-in-shard-names",
        "glob-of-shards-in-split-folders",
        "hub-splits-of-other-names",
        "two-splits-in-one-name",
    ],
)
def test_parquet_files_are_tested_as_their_names_say_or_refused(
    layout: dict[str, str], given: str, said: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 74's data read: ``Test.parquet``, a glob over ``train/`` and ``test/`` and a ``**`` glob trained on the
    test rows without a word, and a ``holdout.parquet`` beside ``train.parquet`` was left out. Hidden files stay out,
    a hub shard names its own split, and a folder's name is no pattern."""
    from vitlit.data.hf import HFDataModule

    shards = write_parquet(tmp_path / "shards", splits=("train", "test"), n=60)  # 45 training rows, 15 test rows
    for name, split in layout.items():
        (tmp_path / "pq" / name).parent.mkdir(parents=True, exist_ok=True)
        if split == "junk":  # what a copy from macOS leaves: no Parquet file
            (tmp_path / "pq" / name).write_bytes(b"\x00\x05\x16\x07 Mac OS X")
        else:
            shutil.copy(shards / f"{split}-00000-of-00001.parquet", tmp_path / "pq" / name)
    path = str(tmp_path / "pq" / given) if given else str(tmp_path / "pq")
    if said is not None:
        runs = ["--trainer.default_root_dir", tmp_path / "runs"]
        carries(refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", path, *runs), said)
        return
    data = HFDataModule(path, img_size=16, num_workers=0, val_size=5)
    data.setup("fit")
    data.setup("test")
    assert (len(data.train_set) + len(data.val_set), len(data.test_set)) == (45, 15)


@pytest.mark.parametrize("fields", [("bytes",), ("path",)])
def test_an_image_struct_of_one_field_is_read(fields: tuple[str, ...], tmp_path: Path) -> None:
    """A hand-made image column of ``struct<bytes>`` (or of paths only) crashed the start-up's "listed once" rule."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from helpers.hf import digits_rows

    from vitlit.data.hf import HFDataModule

    images, targets = digits_rows(30)
    for i, image in enumerate(images):
        (tmp_path / f"{i}.png").write_bytes(image["bytes"])
    rows = [
        {"bytes": image["bytes"]} if fields == ("bytes",) else {"path": f"{i}.png"} for i, image in enumerate(images)
    ]
    column = pa.array(rows, pa.struct([(field, pa.binary() if field == "bytes" else pa.string()) for field in fields]))
    pq.write_table(pa.table({"image": column, "label": pa.array(targets, pa.int64())}), tmp_path / "train.parquet")
    data = HFDataModule(str(tmp_path / "train.parquet"), img_size=16, num_workers=0, val_size=3, test_size=3)
    data.setup("fit")
    assert len(data.train_set) == 24 and data.train_set[0][0].shape == (3, 16, 16)


@pytest.mark.parametrize(
    ("names", "said"), [(["cat", "cat ", "dog"], "name 'cat' twice"), (["cat", "", "dog"], "the label is empty")]
)
def test_class_label_names_that_name_no_class_once_are_refused_naming_the_column(
    names: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal spoke of a "Scan's classes" the user never wrote, not of the data set's ClassLabel column."""
    from datasets import ClassLabel, Dataset, Features
    from datasets import Image as HFImage
    from helpers.hf import digits_rows

    images, targets = digits_rows(40)
    features = Features({"image": HFImage(), "label": ClassLabel(names=names)})
    Dataset.from_dict({"image": images, "label": [t % 3 for t in targets]}, features=features).to_parquet(
        str(tmp_path / "pq" / "train-00000-of-00001.parquet")
    )
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *HF, "--data.path", tmp_path / "pq",
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    carries(line, "pq's class names (column 'label')", said)


def test_large_string_labels_and_an_unknown_split_are_read_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Polars writes text as large_string, which was refused as "not class labels"; a split named eval was dropped
    # without a word (datasets' own file-name rule reads eval as test).
    import pyarrow as pa
    import pyarrow.parquet as pq
    from helpers.hf import digits_rows

    from vitlit.data.hf import HFDataModule

    images, targets = digits_rows(40)
    table = pa.table({"image": pa.array([im["bytes"] for im in images], pa.large_binary()),
                      "label": pa.array([f"d{t}" for t in targets], pa.large_string())})  # fmt: skip
    pq.write_table(table, tmp_path / "polars.parquet")
    assert HFDataModule(str(tmp_path / "polars.parquet"), img_size=16).class_names == [f"d{d}" for d in range(10)]
    with caplog.at_level("INFO"):
        data = HFDataModule(str(_rows(tmp_path / "saved", [d % 10 for d in range(40)], ("train", "eval"))))
        assert data.class_names == [str(d) for d in range(10)]
    assert "the split(s) 'eval' left out" in caplog.text


def test_an_image_column_of_file_paths_is_one_line_about_the_column(tmp_path: Path) -> None:
    # Every row was called "no image", with the advice --data.bad_images skip, which then refused every image.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vitlit.data.hf import HFDataModule
    from vitlit.errors import ConfigError

    table = pa.table({"image": [f"img/{i}.png" for i in range(20)], "label": [i % 2 for i in range(20)]})
    pq.write_table(table, tmp_path / "paths.parquet")
    with pytest.raises(ConfigError, match=r"the image column 'image' holds text \(file paths\?\), not images"):
        _ = HFDataModule(str(tmp_path / "paths.parquet")).class_names


def test_a_test_file_without_the_label_column_is_unlabelled_for_predict_and_refused_by_test(tmp_path: Path) -> None:
    """A Kaggle-style test file of images only: datasets fills the missing label column with None, which fit refused
    as a missing label (the data review); it is an unlabelled test split, as -1 is."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from helpers.hf import digits_rows

    from vitlit.data.hf import HFDataModule
    from vitlit.errors import ConfigError

    images, targets = digits_rows(40)
    labelled = pa.table({"image": [im["bytes"] for im in images[:30]], "label": [f"d{t % 2}" for t in targets[:30]]})
    pq.write_table(labelled, tmp_path / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"image": [im["bytes"] for im in images[30:]]}), tmp_path / "test-00000-of-00001.parquet")
    data = HFDataModule(str(tmp_path), img_size=16, num_workers=0, val_size=4)
    assert data.class_names == ["d0", "d1"]
    data.setup("fit")
    assert len(data.train_set) + len(data.val_set) == 30  # the test file is not carved from, nor trained on
    data.setup("predict")
    assert len(data.predict_set) == 10
    with pytest.raises(ConfigError, match=r"the test split has no labels \(its 10 rows are unlabelled"):
        data.setup("test")
