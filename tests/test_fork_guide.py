"""Forking without guessing: the guide's worked example (a format vitlit does not ship), labels.csv data, and a
model subclass with its own loss and per-class metrics, each named in YAML or flags only."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli import DIGITS_CONFIG, ROOT, carries, refused, run_cli
from helpers.counting import lines_read
from helpers.learning import CASES, write_digits_npz
from torchmetrics.classification import MulticlassF1Score

from vitlit.data.csv_table import CSVImageDataModule
from vitlit.errors import ConfigError
from vitlit.model import ViTClassifier

sys.path.insert(0, str(ROOT / "scripts"))
import code_size

EXAMPLE, EXAMPLE_CONFIG = ROOT / "examples" / "npz_data.py", ROOT / "examples" / "npz.yaml"
GUIDE_CASE = CASES["fork-guide"]
GUIDE = (ROOT / "docs" / "your-data.md").read_text(encoding="utf-8").split("## Fork it for your data")[1]
QUICK = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2",
         "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]  # fmt: skip


class FocalLoss(torch.nn.Module):
    """A loss of a fork's own (focal loss, for hard classes), for class indices and Mixup's probabilities alike."""

    def __init__(self, gamma: float = 2.0) -> None:
        super().__init__()
        self.gamma = gamma
        self.calls = 0

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        soft = targets if targets.is_floating_point() else torch.nn.functional.one_hot(targets, logits.shape[-1])
        log_p = logits.log_softmax(-1)
        return -(soft * (1 - log_p.exp()) ** self.gamma * log_p).sum(-1).mean()


class F1ViT(ViTClassifier):
    """A model-side fork: per-class F1 in validation and test, through the documented hook."""

    def evaluation_metrics(self, num_classes: int) -> dict:
        return {**super().evaluation_metrics(num_classes), "f1": MulticlassF1Score(num_classes, average=None)}


@pytest.fixture(scope="module")
def digits_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_digits_npz(tmp_path_factory.mktemp("npz") / "digits.npz")


def test_the_guide_documents_every_hook_the_example_uses() -> None:
    tree = ast.parse(EXAMPLE.read_text(encoding="utf-8"))
    [module] = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    hooks = {node.name for node in module.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}
    hooks |= {t.attr for node in ast.walk(module) for t in getattr(node, "targets", []) if isinstance(t, ast.Attribute)}
    helpers = {alias.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.module.startswith("vitlit")
               for alias in node.names}  # fmt: skip
    used = (hooks - {"__init__", "arrays", "names"}) | helpers
    assert used >= {"class_names", "train_dataset", "ImageClassificationDataModule", "ConfigError"}
    assert "test_dataset" not in used  # issue 44: the base class holds out the test split
    assert not [name for name in used if f"`{name}" not in GUIDE], used
    assert code_size.code_lines(EXAMPLE) <= 60  # one short file: what a fork writes


@pytest.mark.slow  # the example's own recipe for 30 epochs: about 45 s
def test_the_guide_example_learns(digits_npz: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    fit = run_cli("fit", "--config", EXAMPLE_CONFIG, "--data.path", digits_npz, "--trainer.default_root_dir", tmp_path,
                  *GUIDE_CASE.flags)  # fmt: skip
    assert GUIDE_CASE.metric == "best_val_acc"
    assert float(fit.trainer.checkpoint_callback.best_model_score) > GUIDE_CASE.threshold


# One data path each in the default suite, the other with the slow tests: together both paths for both modules.
@pytest.mark.parametrize(
    "source", ["memory", pytest.param("workers", marks=pytest.mark.slow)], ids=["on-device", "per-image"]
)
def test_the_guide_example_trains_and_tests_from_its_yaml(
    source: str, digits_npz: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # what PYTHONPATH=examples does
    common = ["--config", EXAMPLE_CONFIG, "--data.path", digits_npz, "--trainer.default_root_dir", tmp_path]
    cli = run_cli("fit", *common, *QUICK, "--data.source", source)
    data = cli.datamodule
    assert data.class_names == [str(d) for d in range(10)] and cli.model.hparams.in_chans == 1
    # Issue 44: a file with no split; the base class holds out 10% for test, then carves 10% of the rest.
    assert (len(data.train_set), len(data.val_set)) == (1455, 162) and cli.trainer.global_step == 4
    run = Path(cli.trainer.log_dir)
    test = run_cli("test", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt", *QUICK)
    tested = test.datamodule.test_set
    assert len(tested) == 180 and not set(tested.indices) & {*data.train_set.indices, *data.val_set.indices}
    assert test.trainer.test_loop.batch_progress.total.completed == 2  # QUICK's limit: the carved split is tested
    assert 0.0 <= float(test.trainer.callback_metrics["test/acc"]) <= 1.0


def test_a_label_that_is_no_class_index_is_one_line(digits_npz: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """Issue 44: a label of 10 among 10 class names once surfaced as a traceback from inside the loss."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    bad = tmp_path / "bad.npz"
    with np.load(digits_npz) as arrays:
        labels = arrays["labels"].copy()
        labels[7] = 10
        np.savez(bad, images=arrays["images"], labels=labels)
    with pytest.raises(SystemExit) as exit_info:
        names = str([str(d) for d in range(10)])
        run_cli("fit", "--config", EXAMPLE_CONFIG, "--data.path", bad, "--data.class_names", names,
                "--trainer.default_root_dir", tmp_path / "runs", *QUICK)  # fmt: skip
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    carries(err.strip(), "label 10", "0 to 9", "class_names")
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


def test_a_fractional_label_in_the_file_is_one_line(digits_npz: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    # The example's .long() made a label of 1.7 the class 1 without a word; the base's rule refuses it.
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    bad = tmp_path / "bad.npz"
    with np.load(digits_npz) as arrays:
        labels = arrays["labels"].astype(np.float32)
        labels[3] = 1.7
        np.savez(bad, images=arrays["images"], labels=labels)
    err = refused(capsys, "fit", "--config", EXAMPLE_CONFIG, "--data.path", bad,
                  "--trainer.default_root_dir", tmp_path / "runs", *QUICK)  # fmt: skip
    carries(err, "item 3", "label 1.7", "give it integer targets")
    assert not (tmp_path / "runs").exists()


def _write_csv_data(root: Path, rows: list[tuple[str, str, str]]) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, _, _ in rows:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(root / name)
    lines = ["filename,label,split", *(",".join(row) for row in rows)]
    (root / "labels.csv").write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.parametrize(
    "source", [pytest.param("memory", marks=pytest.mark.slow), "workers"], ids=["on-device", "per-image"]
)
def test_labels_csv_data_trains_on_both_paths(source: str, tmp_path: Path) -> None:
    rows = [(f"img/{i}.png", ["cat", "dog", "owl"][i % 3], "test" if i >= 40 else "") for i in range(48)]
    root = _write_csv_data(tmp_path / "data", rows)
    csv_data = "vitlit.data.csv_table.CSVImageDataModule"
    cli = run_cli("fit", "--config", DIGITS_CONFIG, "--data", csv_data, "--data.root", root,
                  "--data.batch_size", "8", "--data.source", source,
                  "--trainer.default_root_dir", tmp_path / "runs", *QUICK)  # fmt: skip
    data = cli.datamodule
    assert data.class_names == ["cat", "dog", "owl"] and cli.model.hparams.class_names == ["cat", "dog", "owl"]
    assert len(data.train_set) + len(data.val_set) == 40 and len(data.val_set) == 4  # val_size: 10% of the 40
    assert data.split_targets(data.train_set) == [
        ["cat", "dog", "owl"].index(rows[i][1]) for i in data.train_set.indices
    ]
    assert len(data.test_dataset()) == 8


@pytest.mark.parametrize(
    ("table", "carried"),
    [
        ("filename,label\nimg/0.png,cat\n", ["1 class", "2"]),
        ("file,label\nimg/0.png,cat\n", ["filename", "label", "--data.filename_column"]),
        ("filename,label,split\nimg/0.png,cat,holdout\nimg/1.png,dog,\n", ["'holdout'", "train, val, test"]),
        ("filename,label\n../outside.png,cat\nimg/1.png,dog\n", ["'../outside.png'", "inside"]),
        ("filename,label,split\nimg/0.png,cat,\nimg/1.png,dog,\nimg/2.png,emu,test\n", ["test", "emu"]),
        ("filename,label\n" + "x" * 200_000 + ",cat\n", ["labels.csv", "CSV", "UTF-8"]),
        (b"\xff\xfe\x00garbage".decode("latin-1"), ["labels.csv", "CSV", "UTF-8"]),
        (
            "filename,label,split\nimg/0.png,cat,\nimg/1.png,dog,\nimg/0.png,cat,test\n",
            ["line 4", "'img/0.png'", "line 2"],
        ),
        ("filename,label\nimg/0.png,cat\nimg/1.png,dog\n./img/0.png,dog\n", ["line 4", "'./img/0.png'", "line 2"]),
        ("filename,label\nimg/0.png,cat\nimg/1.png,\nimg/2.png,dog\n", ["line 3", "label"]),
        ("filename,label\nimg/0.png,cat\nimg/loop.png,dog\n", ["'img/loop.png'", "inside"]),
        ("image,class\nimg/0.png,cat\n", ["--data.filename_column", "--data.label_column"]),
        # The optional column spelt otherwise: its test and val rows trained without a word (the data review).
        ("filename,label,Split\nimg/0.png,cat,test\nimg/1.png,dog,\n", ["'split'", "'Split'", "--data.split_column"]),
    ],
    ids=[
        "one-class",
        "no-filename-column",
        "unknown-split",
        "outside-root",
        "unknown-test-label",
        "huge-field",
        "not-utf8",
        "train-test-leak",
        "two-labels",
        "empty-label",
        "symlink-loop",
        "other-column-names",
        "split-column-spelt-otherwise",
    ],
)
def test_a_bad_labels_csv_is_one_line(table: str, carried: list[str], tmp_path: Path) -> None:
    """What each refusal must carry (the bad value, where it is, the flag that fixes it), not its wording."""
    root = _write_csv_data(tmp_path / "data", [(f"img/{i}.png", "x", "") for i in range(3)])
    (tmp_path / "outside.png").write_bytes((root / "img" / "0.png").read_bytes())
    (root / "img" / "loop.png").symlink_to(root / "img" / "loop.png")
    (root / "labels.csv").write_bytes(table.encode("latin-1"))
    with pytest.raises(ConfigError) as refused:
        _ = CSVImageDataModule(root=root).class_names  # read as the CLI reads it, to link it to the model
    line = str(refused.value)
    assert "\n" not in line and all(part in line for part in carried), line


def test_a_labels_csv_is_checked_row_by_row_and_columns_can_be_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36, classes 7 and 12: a bad line 2 of a huge table is found without reading the rest; own columns."""
    root = _write_csv_data(tmp_path / "data", [(f"img/{i}.png", "x", "") for i in range(3)])
    rows = "".join(f"img/{i % 3}.png,cat\n" for i in range(1_000_000))  # 15 MB after a bad line 2
    (root / "labels.csv").write_text("filename,label\nimg/0.png,\n" + rows)
    with lines_read(monkeypatch, root / "labels.csv") as read, pytest.raises(ConfigError, match="line 2: the label"):
        _ = CSVImageDataModule(root=root).class_names
    assert 0 < read.count <= 3, read.count  # the header, the bad line and at most one more: not the table's million
    (root / "labels.csv").write_text("image,class\nimg/0.png,cat\nimg/1.png,dog\nimg/2.png,dog\n")
    data = CSVImageDataModule(root=root, filename_column="image", label_column="class", val_size=1)
    assert data.class_names == ["cat", "dog"]
    with pytest.raises(ConfigError, match=r"no column 'fold' \(--data.split_column\)"):  # named, so it is needed
        _ = CSVImageDataModule(
            root=root, filename_column="image", label_column="class", split_column="fold"
        ).class_names
    # A spreadsheet's empty cell may hold a space: the split is then train, as for an empty one (was the split '').
    (root / "labels.csv").write_text("filename,label,split\nimg/0.png,cat, \nimg/1.png,dog,\nimg/2.png,dog,val\n")
    assert CSVImageDataModule(root=root).class_names == ["cat", "dog"]
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "labels.csv")  # opening it would wait for a writer forever
    with pytest.raises(ConfigError, match=r"labels\.csv is not a regular file"):
        _ = CSVImageDataModule(root=fifo).class_names


def test_a_model_subclass_and_a_loss_named_on_the_command_line(digits_dir: Path, tmp_path: Path) -> None:
    cli = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.default_root_dir", tmp_path,
                  "--model", "test_fork_guide.F1ViT", "--model.loss", "test_fork_guide.FocalLoss",
                  "--model.loss.gamma", "1.5", "--model.label_smoothing", "null", *QUICK)  # fmt: skip
    model = cli.model
    assert type(model) is F1ViT and isinstance(model.criterion, FocalLoss) and model.criterion.gamma == 1.5
    assert model.criterion.calls >= 4 + 2  # the training steps and the validation batches
    assert model.hparams.loss == "test_fork_guide.FocalLoss"
    logged = cli.trainer.callback_metrics
    assert {f"val/f1/{d}" for d in range(10)} <= set(logged) and "val/acc" in logged  # one F1 per class name
    saved = (Path(cli.trainer.log_dir) / "config.yaml").read_text()
    assert "class_path: test_fork_guide.F1ViT" in saved and "test_fork_guide.FocalLoss" in saved


def test_label_smoothing_with_another_loss_is_refused(digits_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--trainer.default_root_dir", tmp_path,
                "--model.loss", "test_fork_guide.FocalLoss", *QUICK)  # fmt: skip
    assert not (tmp_path / "lightning_logs").exists()


# -- the item table's contract, through the guide's example (examples/jsonl_data.py), which has no checks of its own


def _jsonl(root: Path, digits_dir: Path, rows: list[dict] | None = None) -> Path:
    """``root/labels.jsonl`` over a copy of the digits' training files, one line per image (or ``rows`` as given)."""
    import json
    import shutil

    if rows is None:
        rows = []
        for i, file in enumerate(sorted((digits_dir / "train").glob("*/*.png"))[::3]):
            (root / "img").mkdir(parents=True, exist_ok=True)
            shutil.copy(file, root / "img" / f"{i}.png")
            rows.append({"file": f"img/{i}.png", "label": file.parent.name, "split": "val" if i % 10 == 0 else "train"})
    root.mkdir(parents=True, exist_ok=True)
    (root / "labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return root


def test_the_guide_shows_the_shipped_table_example_whole() -> None:
    """The guide's code is examples/jsonl_data.py's class as shipped: they cannot drift apart."""
    source = (ROOT / "examples" / "jsonl_data.py").read_text(encoding="utf-8")
    shipped = source[source.index("class JSONLinesDataModule") :].rstrip()
    assert f"```python\n{shipped}\n```" in GUIDE
    assert code_size.code_lines(ROOT / "examples" / "jsonl_data.py") <= 25  # the whole format


def test_the_guides_table_example_trains_tests_and_predicts(
    digits_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    root = _jsonl(tmp_path / "data", digits_dir)
    flags = ["--config", DIGITS_CONFIG, "--data", "jsonl_data.JSONLinesDataModule", "--data.root", root]
    fit = run_cli("fit", *flags, "--trainer.default_root_dir", tmp_path / "runs", *QUICK)
    data = fit.datamodule
    assert data.class_names == [str(d) for d in range(10)] and fit.trainer.global_step == 4
    assert len(data.val_set) == 45 and len(data.test_set or data._checked_split("test")) > 0  # its val; test held out
    last = Path(fit.trainer.log_dir) / "checkpoints" / "last.ckpt"
    assert 0 <= run_cli("test", *flags, "--ckpt_path", last).trainer.callback_metrics["test/acc"] <= 1


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("unknown split", "has the split 'valid'; splits are train, val, test"),
        ("parent folder", "the train row '../elsewhere.png' is not a file inside"),
        ("absolute path", "is not a file inside"),
        ("link out", "the train row 'img/link.png' is not a file inside"),
        ("label unknown to training", "val rows have labels no training row has: bird"),
        ("error in the fork's code", "JSONLinesDataModule.scan() raised KeyError: 'file' at "),
        # The guide's example made every label text: null was a class "None", 3.0 one beside "3".
        ("missing label", "the label is missing (None)"),
        ("float label", "is a float, and a label is text or an integer"),
    ],
)
def test_a_fork_without_checks_of_its_own_gets_every_rule_of_the_base(
    case: str, said: str, digits_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Issue 65, 1: a labels.jsonl fork from the guide dropped "valid" rows, trained on files outside its root, and
    ended a KeyError in its scan() in a 91-line jsonargparse traceback."""
    from helpers.cli import refused

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    root = tmp_path / "data"
    (root / "img").mkdir(parents=True)
    files = sorted((digits_dir / "train").glob("*/*.png"))[:8]
    for i, file in enumerate(files):
        (root / "img" / f"{i}.png").write_bytes(file.read_bytes())
    rows = [{"file": f"img/{i}.png", "label": "cat" if i % 2 else "dog"} for i in range(8)]
    (tmp_path / "elsewhere.png").write_bytes(files[0].read_bytes())
    (root / "img" / "link.png").symlink_to(tmp_path / "elsewhere.png")
    bad = {"unknown split": {"file": "img/0.png", "label": "dog", "split": "valid"},
           "parent folder": {"file": "../elsewhere.png", "label": "dog"},
           "absolute path": {"file": str(tmp_path / "elsewhere.png"), "label": "dog"},
           "link out": {"file": "img/link.png", "label": "dog"},
           "label unknown to training": {"file": "img/7.png", "label": "bird", "split": "val"},
           "error in the fork's code": {"path": "img/7.png", "label": "cat"},
           "missing label": {"file": "img/7.png", "label": None},
           "float label": {"file": "img/7.png", "label": 3.0}}[case]  # fmt: skip
    _jsonl(root, digits_dir, [*rows[:7], bad])
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data", "jsonl_data.JSONLinesDataModule",
                   "--data.root", root, "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert said in line, line
    if case == "error in the fork's code":  # the file and line of the fork's code that raised it
        assert f"{ROOT / 'examples' / 'jsonl_data.py'}:" in line, line
    assert not (tmp_path / "runs").exists()


def test_a_missing_file_is_a_bad_image_that_skip_leaves_out(
    digits_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hostile round 7, class 6: a row naming a missing file read "not a file inside <root>", and skip did not skip."""
    from helpers.cli import refused

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    root = _jsonl(tmp_path / "data", digits_dir)
    rows = (root / "labels.jsonl").read_text()
    (root / "labels.jsonl").write_text(rows + '{"file": "img/gone.png", "label": "3"}\n')
    flags = ["fit", "--config", DIGITS_CONFIG, "--data", "jsonl_data.JSONLinesDataModule", "--data.root", root]
    line = refused(capsys, *flags, "--trainer.default_root_dir", tmp_path / "a")
    assert f"image {root / 'img' / 'gone.png'} is missing" in line, line
    fit = run_cli(*flags, "--data.bad_images", "skip", "--trainer.default_root_dir", tmp_path / "b", *QUICK)
    assert [str(bad.path) for bad in fit.datamodule.skipped] == [str(root / "img" / "gone.png")]
