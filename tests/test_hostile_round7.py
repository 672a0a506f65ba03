"""Hostile round 7 (issue 64): what vitlit hands to its libraries and takes back from them, one test per class.

Each class is fixed where the data crosses the seam: LitData's reader (`vitlit.data.streaming.stream`: no item
format that carries code, no chunk outside its folder), one URL masker (`vitlit.text.redacted`), one backup rule
(scripts/upgrade_config.py: a new file, never a replaced one), the order ``prepare`` writes, the resume's settings.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import DIGITS_CONFIG, NO_WARMUP, ROOT, carries, refused, run_cli, vitlit_command
from PIL import Image

STREAM = ["--data", "vitlit.data.streaming.StreamingDataModule"]
SECRET = "Sup3rS3cretKey"  # the password or key of every URL form below
URLS = {
    "userinfo": f"s3://AKIAHOSTILE1:{SECRET}@bucket/x",
    "at in the password": f"postgresql://alice:p@{SECRET}@db.example/x",
    "presigned": f"https://b.s3.amazonaws.com/x.parquet?X-Amz-Credential=AKIAHOSTILE1%2F2026&X-Amz-Security-Token="
    f"{SECRET}&X-Amz-Signature={SECRET}0&X-Amz-Date=20261206",
    "signed GCS": f"https://storage.googleapis.com/b/x.parquet?X-Goog-Signature={SECRET}&X-Goog-Date=20261206",
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, digits_dir: Path) -> Path:
    """The digits class folders (class by class, as a folder lists them) written by vitlit prepare."""
    out = tmp_path_factory.mktemp("prepared") / "digits"
    run_cli("prepare", "--data", "ImageFolderDataModule", "--data.root", digits_dir, "--output", out)
    return out


def _copy(prepared: Path, out: Path) -> Path:
    shutil.copytree(prepared, out, symlinks=True)
    return out


class Payload:
    """What unpickling runs: it touches ``marker`` (a real payload would run a shell)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def _payload_item(marker: str, key: str, i: int) -> dict:
    return {key: Payload(Path(marker)), "label": 0, "index": i} if key == "image" else {key: Payload(Path(marker))}


def _plant(folder: Path, marker: Path, key: str) -> None:
    """Replace the LitData set in ``folder`` by one whose items LitData stores as pickles (its ``pickle`` format)."""
    import functools

    from vitlit.data.streaming import optimize  # LitData's, in a process of its own (its Ctrl-C handler stays there)

    shutil.rmtree(folder)
    optimize(fn=functools.partial(_payload_item, str(marker), key), inputs=[0, 1], output_dir=str(folder),
             chunk_bytes="1MB", num_workers=1, verbose=False)  # fmt: skip
    formats = json.loads((folder / "index.json").read_text())["config"]["data_format"]
    assert "pickle" in formats, formats  # what the attacker wrote: LitData would unpickle it


@pytest.mark.parametrize("where", ["vitlit", "train"])
def test_no_item_of_a_prepared_set_is_unpickled(
    where: str, prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 1a: a doctored description (or split) whose items are pickles ran their code before the refusal."""
    from vitlit.data.streaming import read_meta, write_meta
    from vitlit.owned import digest

    data, marker = _copy(prepared, tmp_path / "data"), tmp_path / "pwned"
    meta = read_meta(str(data))
    _plant(data / where, marker, "json" if where == "vitlit" else "image")
    if where == "train":  # the description vouches for the planted split, as a doctored one would
        meta["indexes"]["train"] = digest(data / "train" / "index.json")
        shutil.rmtree(data / "vitlit")
        write_meta(str(data), meta)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", data,
                   "--data.num_workers", "0", "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "declares the item format 'pickle'" in line and f"{data}/{where}" in line, line
    assert not marker.exists() and not (tmp_path / "runs").exists()


def test_litdata_itself_refuses_a_pickled_item_where_the_index_check_is_passed(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second lock: the serializers vitlit gives LitData refuse the format before its bytes are decoded."""
    from vitlit.data import streaming
    from vitlit.errors import ConfigError

    data, marker = _copy(prepared, tmp_path / "data"), tmp_path / "pwned"
    _plant(data / "vitlit", marker, "json")
    monkeypatch.setattr(streaming, "check_index", lambda *args, **kwargs: None)
    with pytest.raises(ConfigError, match="declares the item format 'pickle', which vitlit never reads"):
        streaming.stream(str(data / "vitlit"))[0]
    assert not marker.exists()


@pytest.mark.parametrize("where", ["vitlit", "val"])
def test_a_chunk_named_outside_its_folder_is_refused(
    where: str, prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 1b: a doctored ``vitlit/index.json`` naming ``../../x`` read a file outside the set."""
    data = _copy(prepared, tmp_path / "data")
    outside = tmp_path / "outside.bin"
    shutil.copy(data / where / "chunk-0-0.bin", outside)  # a file LitData would read as the chunk, were it asked
    index = json.loads((data / where / "index.json").read_text())
    index["chunks"][0]["filename"] = "../../outside.bin"
    (data / where / "index.json").write_text(json.dumps(index))
    if where == "val":  # the description vouches for the doctored index
        from vitlit.data.streaming import write_meta
        from vitlit.owned import digest

        meta = _meta_without_check(data)
        meta["indexes"]["val"] = digest(data / "val" / "index.json")
        shutil.rmtree(data / "vitlit")
        write_meta(str(data), meta)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", data,
                   "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert "names the chunk '../../outside.bin', which is no file of its folder" in line, line


def _meta_without_check(data: Path) -> dict:
    """The description as prepare wrote it (read from the untouched copy's chunk as a string item)."""
    import litdata

    return json.loads(litdata.StreamingDataset(str(data / "vitlit"))[0]["json"])


@pytest.mark.parametrize("form", list(URLS))
def test_no_secret_of_a_url_reaches_a_line_or_a_saved_config(
    form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 1c: presigned parameters were printed whole, a password with an @ masked only to its first @."""
    from vitlit.text import clean, redacted

    url = URLS[form]
    for text in (clean(f"cannot read {url} (403)"), redacted(f"url: {url}\n")):
        assert SECRET not in text and "***" in text, text
    # --print_config writes what a run saves as its config.yaml (`VitLitArgumentParser.dump`).
    with pytest.raises(SystemExit):
        run_cli("fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", url, "--print_config")
    printed = capsys.readouterr().out
    assert "input_dir:" in printed and SECRET not in printed and "AKIAHOSTILE1" not in printed, printed


def test_a_storage_clients_traceback_is_one_line_without_the_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 1c: prepare --output 's3://KEY:SECRET@bucket/x' ended in botocore's 23-line traceback quoting both."""
    pytest.importorskip("botocore")
    line = refused(capsys, "prepare", "--data", "DigitsDataModule", "--data.val_size", "100", "--output",
                   f"s3://AKIAHOSTILE1:{SECRET}@bucket/x")  # fmt: skip
    assert "LitData could not write" in line and SECRET not in line and "AKIAHOSTILE1" not in line, line


def test_the_model_card_names_a_bucket_without_its_credentials(tmp_path: Path) -> None:
    """Class 1c: export --format timm copied the run config's s3://KEY:SECRET@... into README.md, meant for upload."""
    import yaml

    from vitlit.tools.hf_folder import model_card
    from vitlit.trained import ModelCard

    run = tmp_path / "run"
    run.mkdir()
    config = {"data": {"class_path": "vitlit.data.streaming.StreamingDataModule",
                       "init_args": {"input_dir": f"s3://AKIAHOSTILE1:{SECRET}@bucket"}}}  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    card = ModelCard("test_vit", ["a", "b"], 32, 3, [0.5] * 3, [0.5] * 3)
    text = model_card(card, run, "mit", "exported")
    assert "- data: s3://\\*\\*\\*@bucket" in text and SECRET not in text and "AKIAHOSTILE1" not in text


def test_a_backup_never_replaces_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Class 2: upgrade_config.py replaced an existing old.yaml.old without a word."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import upgrade_config

    config = tmp_path / "old.yaml"
    old = (ROOT / "tests" / "data" / "config_v0.2.yaml").read_text()
    config.write_text(old)
    (tmp_path / "old.yaml.old").write_text("the user's own notes")
    upgrade_config.main([str(config)])
    assert (tmp_path / "old.yaml.old").read_text() == "the user's own notes"
    assert (tmp_path / "old.yaml.old.1").read_text() == old
    assert "the old file is old.yaml.old.1" in capsys.readouterr().out


def test_streamed_batches_mix_the_classes_as_in_memory_ones_do(digits_dir: Path, tmp_path: Path) -> None:
    """Class 3a: a class-ordered folder, written in order, streamed batches of 16 holding 2.2 of its 10 classes.

    With a val/ of its own, the training split is the folder's files class by class (a carved validation split
    happens to shuffle them); LitData shuffles within a window of a chunk, and the digits are one chunk.
    """
    from vitlit.data.streaming import StreamingDataModule

    folder = tmp_path / "digits"
    shutil.copytree(digits_dir, folder)
    for klass in sorted((folder / "train").iterdir()):
        (folder / "val" / klass.name).mkdir(parents=True)
        for file in sorted(klass.iterdir())[:12]:
            file.rename(folder / "val" / klass.name / file.name)
    run_cli("prepare", "--data", "ImageFolderDataModule", "--data.root", folder, "--output", tmp_path / "out")
    data = StreamingDataModule(str(tmp_path / "out"), batch_size=16, num_workers=0)
    data.setup("fit")
    batches = [targets for _, targets in data.train_dataloader()]
    mix = np.mean([len(set(targets.tolist())) for targets in batches])
    assert len(batches) == (1348 - 120) // 16 and mix >= 6, mix  # 2.5 before, about 8 for a true shuffle


def test_a_resume_with_another_learning_rate_is_refused(
    few_digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 3b: --ckpt_path auto with a new rate continued the old run with the old one, the new one recorded.

    A resume of the run's checkpoint with another rate is refused; ``last`` and ``auto`` take only a run of this rate
    (fifteenth session: ``auto`` chose the other rate's run and refused it, so that job could never start), and
    ``auto`` starts afresh, said in one line.
    """
    common = ["--config", DIGITS_CONFIG, "--data.root", few_digits_dir, "--trainer.default_root_dir", tmp_path,
              "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
              *NO_WARMUP]  # fmt: skip
    run_cli("fit", *common)
    run = tmp_path / "lightning_logs" / "version_0"
    before = sorted(p.name for p in run.iterdir())
    # Layer decay sets the optimizer's groups and their rates, which a resume restores too (a new value was ignored,
    # and layer decay turned on was a traceback: the saved optimizer had other groups).
    for flags in (["--model.optimizer.init_args.lr", "0.5"], ["--model.scheduler.init_args.warmup_steps", "3"],
                  ["--model.layer_decay", "0.75"]):  # fmt: skip
        key = flags[0].removeprefix("--model.")
        last = run / "checkpoints" / "last.ckpt"
        line = refused(capsys, "fit", *common, "--trainer.max_epochs", "2", "--ckpt_path", last, *flags)
        assert f"model.init_args.{key}" in line and "--ckpt_path none" in line, line
        line = refused(capsys, "fit", *common, "--trainer.max_epochs", "2", "--ckpt_path", "last", *flags)
        assert f"differs in model.init_args.{key}" in line, line
    assert sorted(p.name for p in run.iterdir()) == before  # no config.resume-1.yaml, nothing continued
    resumed = run_cli("fit", *common, "--trainer.max_epochs", "2", "--ckpt_path", "auto")  # the same settings
    assert resumed.trainer.current_epoch == 2 and (run / "config.resume-1.yaml").is_file()
    fresh = run_cli("fit", *common, "--ckpt_path", "auto", "--model.optimizer.init_args.lr", "0.5")
    assert fresh.trainer.ckpt_path is None and Path(fresh.trainer.log_dir).name == "version_1"
    assert "a fresh start" in capsys.readouterr().err


def test_a_label_column_beside_another_classlabel_is_chosen_or_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Class 3c: an int ``label`` beside one ClassLabel ``camera``: the model trained on camera, without a word."""
    from datasets import ClassLabel, Dataset, Features, Value
    from datasets import Image as HFImage
    from helpers.hf import digits_rows

    images, targets = digits_rows(60)
    features = Features({"image": HFImage(), "label": Value("int64"), "camera": ClassLabel(names=["front", "back"])})
    rows = {"image": images, "label": targets, "camera": [i % 2 for i in range(60)]}
    (folder := tmp_path / "pq").mkdir()
    Dataset.from_dict(rows, features=features).to_parquet(str(folder / "train-00000-of-00001.parquet"))
    hf = ["--data", "vitlit.data.hf.HFDataModule", "--data.path", folder, "--data.val_size", "10"]
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *hf, "--trainer.default_root_dir", tmp_path / "r")
    assert "'camera' and a column named 'label'" in line and "--data.label_column label" in line, line
    with caplog.at_level("INFO"):
        run_cli("fit", "--config", DIGITS_CONFIG, *hf, "--data.label_column", "label", "--trainer.default_root_dir",
                tmp_path / "r", "--trainer.max_steps", "1", "--trainer.limit_val_batches", "1", *NO_WARMUP)  # fmt: skip
    assert any("labels from column 'label' (10 classes)" in r.getMessage() for r in caplog.records)


def test_validation_images_that_copy_training_images_are_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Class 3d: byte copies of training images in val/ were scored as unseen images without a word."""
    from vitlit.data import ImageFolderDataModule

    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("val", 3)):
        for name in ("a", "b"):
            (tmp_path / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(tmp_path / split / name / f"{i}.png")
    shutil.copy(tmp_path / "train" / "a" / "0.png", tmp_path / "val" / "a" / "copy.png")
    shutil.copy(tmp_path / "train" / "b" / "5.png", tmp_path / "val" / "b" / "copy.png")
    data = ImageFolderDataModule(root=tmp_path, img_size=8, num_workers=0)
    with caplog.at_level("INFO"):
        data.setup("fit")
    said = [r.getMessage() for r in caplog.records if "byte copies" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("vitlit: 2 of the 8 val images are byte copies"), said


def test_nested_aliases_and_odd_files_are_one_line_for_upgrade_config(tmp_path: Path) -> None:
    """Classes 4 and 5: a 416-byte alias bomb ran for minutes; a tag, a list, an empty, non-UTF-8 or missing file
    ended in tracebacks."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    files = {"bomb.yaml": bomb.encode(), "tag.yaml": b"model: !!python/object/apply:os.system [echo pwned]\n",
             "list.yaml": b"- model\n- data\n", "empty.yaml": b"", "latin.yaml": b"model: caf\xe9\n"}  # fmt: skip
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    for name in [*files, "missing.yaml"]:
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "upgrade_config.py"), str(tmp_path / name)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip # a hang guard: 1 s idle
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("upgrade_config: error:"), (name, done)
        assert name in lines[0] and "pwned" not in done.stdout
    assert not list(tmp_path.glob("*.old"))  # nothing backed up, nothing rewritten


def test_a_parquet_folder_with_a_link_to_itself_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Class 4: links ``a -> .`` in a Parquet folder looped silently."""
    from helpers.hf import write_parquet

    folder = write_parquet(tmp_path / "pq", splits=("train",), n=40)
    (folder / "a").symlink_to(".")
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data", "vitlit.data.hf.HFDataModule",
                   "--data.path", folder, "--trainer.default_root_dir", tmp_path / "runs")  # fmt: skip
    assert f"{folder / 'a'}, a link to a folder" in line, line


@pytest.mark.posix  # SIGKILL
def test_a_killed_litdata_writer_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Class 5: prepare whose forked writer the OOM killer ended finished in a traceback."""
    from vitlit.data import streaming

    monkeypatch.setattr(streaming, "_optimize_and_tell", lambda *args: os.kill(os.getpid(), signal.SIGKILL))
    with pytest.raises(SystemExit) as stop:
        run_cli("prepare", "--data", "DigitsDataModule", "--output", tmp_path / "out")
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitlit: error:")]
    assert stop.value.code == 1 and len(lines) == 1 and "Traceback" not in err, err
    carries(lines[0], "SIGKILL")
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.*"))


@pytest.mark.slow  # a signalled run in a process of its own
@pytest.mark.posix  # SIGTERM to another process
def test_sigterm_to_prepare_leaves_no_copy_and_a_killed_ones_is_removed_later(digits_dir: Path, tmp_path: Path) -> None:
    """Class 6: SIGTERM exited 143 and left the hidden ``.X.<random>.partial`` copy forever."""
    import time

    command = vitlit_command("prepare", "--data", "ImageFolderDataModule", "--data.root", digits_dir, "--output",
                             tmp_path / "out")  # fmt: skip
    prepare = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120  # a hang guard: LitData starts writing within seconds on an idle machine
    while not any(tmp_path.glob(".out.*.partial/train")) and prepare.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # LitData has begun writing the training split
    prepare.send_signal(signal.SIGTERM)
    said, _ = prepare.communicate(timeout=60)
    assert prepare.returncode == 143 and "vitlit: prepare stopped by SIGTERM; nothing was kept" in said, said
    assert not list(tmp_path.glob(".out.*")) and not (tmp_path / "out").exists()
    # A copy whose writer was killed outright (no handler runs on SIGKILL) is removed by the next run, which says so.
    from vitlit.owned import remove_stale

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its process id is gone
    stale, alive = tmp_path / f".out.{dead.pid}.x1y2.partial", tmp_path / f".out.{os.getpid()}.x1y2.partial"
    for folder in (stale, alive):
        (folder / "train").mkdir(parents=True)
    remove_stale(tmp_path / "out")
    assert not stale.exists() and alive.is_dir()  # a live writer's copy is left alone


def test_a_truncated_checkpoint_is_named_truncated_not_unreadable(tmp_path: Path) -> None:
    """Class 6: a truncated last.ckpt "cannot be read (Invalid argument); check its permissions"."""
    import torch

    from vitlit.checkpoints import read_checkpoint
    from vitlit.errors import ConfigError

    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(4000)}, "pytorch-lightning_version": "2.6"}, ckpt)
    ckpt.write_bytes(ckpt.read_bytes()[:5000])
    with pytest.raises(ConfigError) as err:
        read_checkpoint(ckpt)
    assert "truncated or not a PyTorch checkpoint" in str(err.value) and "permissions" not in str(err.value)


def test_runs_inside_the_data_root_and_an_output_file_are_refused(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Class 6: a run folder inside a flat data root worked once, then became a class; --output <file> "a folder"."""
    flat = tmp_path / "flat"
    shutil.copytree(digits_dir / "train", flat)
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", flat, "--trainer.default_root_dir", flat)
    assert "is inside --data.root" in line and not (flat / "lightning_logs").exists()
    (tmp_path / "file").write_text("mine")
    line = refused(capsys, "prepare", "--data", "DigitsDataModule", "--output", tmp_path / "file")
    assert "is a file, not a folder" in line and (tmp_path / "file").read_text() == "mine"


def test_an_interrupt_between_the_two_renames_puts_the_old_folder_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only OSError put the replaced folder back: a Ctrl-C there left it hidden in ``.NAME.*.replaced/old``."""
    from vitlit.owned import staged_folder

    output = tmp_path / "vit"
    output.mkdir()
    (output / "model.safetensors").write_text("the earlier export")
    renames, rename = [], os.rename

    def interrupted(source: object, target: object) -> None:
        renames.append(target)
        if len(renames) == 2:  # the staged folder taking the output's name
            raise KeyboardInterrupt
        rename(source, target)

    monkeypatch.setattr(os, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt), staged_folder(output) as staged:
        (staged / "model.safetensors").write_text("the new export")
    monkeypatch.setattr(os, "rename", rename)
    assert (output / "model.safetensors").read_text() == "the earlier export" and len(renames) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vit"]
