"""Forking without guessing: the guide's worked example (a format vitlit does not ship), labels.csv data, and a
model subclass with its own loss and per-class metrics, each named in YAML or flags only."""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli import DIGITS_CONFIG, ROOT, run_cli
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
    assert "has the label 10, but its 10 class_names take the indices 0 to 9" in err
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


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
    assert data.targets(data.train_set) == [["cat", "dog", "owl"].index(rows[i][1]) for i in data.train_set.indices]
    assert len(data.test_dataset()) == 8


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("filename,label\nimg/0.png,cat\n", "1 label(s)"),
        ("file,label\nimg/0.png,cat\n", "needs filename and label"),
        ("filename,label,split\nimg/0.png,cat,holdout\nimg/1.png,dog,\n", "line 2: split 'holdout'"),
        ("filename,label\n../outside.png,cat\nimg/1.png,dog\n", "line 2: '../outside.png' is not a file inside"),
        (
            "filename,label,split\nimg/0.png,cat,\nimg/1.png,dog,\nimg/2.png,emu,test\n",
            "labels no training row has: emu",
        ),
        ("filename,label\n" + "x" * 200_000 + ",cat\n", "not a readable UTF-8 CSV table"),
        (b"\xff\xfe\x00garbage".decode("latin-1"), "not a readable UTF-8 CSV table"),
        (
            "filename,label,split\nimg/0.png,cat,\nimg/1.png,dog,\nimg/0.png,cat,test\n",
            "line 4: 'img/0.png' is also on line 2",
        ),
        ("filename,label\nimg/0.png,cat\nimg/1.png,dog\n./img/0.png,dog\n", "line 4: './img/0.png' is also on line 2"),
        ("filename,label\nimg/0.png,cat\nimg/1.png,\nimg/2.png,dog\n", "line 3: the label is empty"),
        ("filename,label\nimg/0.png,cat\nimg/loop.png,dog\n", "line 3: 'img/loop.png' is not a file inside"),
        ("image,class\nimg/0.png,cat\n", "or name yours with --data.filename_column and --data.label_column"),
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
    ],
)
def test_a_bad_labels_csv_is_one_line(table: str, message: str, tmp_path: Path) -> None:
    root = _write_csv_data(tmp_path / "data", [(f"img/{i}.png", "x", "") for i in range(3)])
    (tmp_path / "outside.png").write_bytes((root / "img" / "0.png").read_bytes())
    (root / "img" / "loop.png").symlink_to(root / "img" / "loop.png")
    (root / "labels.csv").write_bytes(table.encode("latin-1"))
    with pytest.raises(Exception, match=re.escape(message)):
        CSVImageDataModule(root=root)


def test_a_labels_csv_is_checked_row_by_row_and_columns_can_be_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36, classes 7 and 12: a bad line 2 of a huge table is found without reading the rest; own columns."""
    root = _write_csv_data(tmp_path / "data", [(f"img/{i}.png", "x", "") for i in range(3)])
    rows = "".join(f"img/{i % 3}.png,cat\n" for i in range(1_000_000))  # 15 MB after a bad line 2
    (root / "labels.csv").write_text("filename,label\nimg/0.png,\n" + rows)
    with lines_read(monkeypatch, root / "labels.csv") as read, pytest.raises(ConfigError, match="line 2: the label"):
        CSVImageDataModule(root=root)
    assert 0 < read.count <= 3, read.count  # the header, the bad line and at most one more: not the table's million
    (root / "labels.csv").write_text("image,class\nimg/0.png,cat\nimg/1.png,dog\nimg/2.png,dog\n")
    data = CSVImageDataModule(root=root, filename_column="image", label_column="class", val_size=1)
    assert data.class_names == ["cat", "dog"]
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "labels.csv")  # opening it would wait for a writer forever
    with pytest.raises(ConfigError, match=r"labels\.csv is not a regular file"):
        CSVImageDataModule(root=fifo)


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
