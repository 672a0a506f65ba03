"""LitData streaming (issue 43): `vitlit prepare` writes any data module's splits as chunks; StreamingDataModule
trains from them through the one pipeline, sharded by LitData, resumable mid-epoch."""

from __future__ import annotations

import csv
import itertools
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from helpers.cli import DIGITS_CONFIG, FEW_TOKENS, NO_WARMUP, ROOT, refused, run_cli, vitlit_command
from helpers.shards import RecordBatches

pytest.importorskip("litdata")

STREAM = ["--data", "vitlit.data.streaming.StreamingDataModule"]
#: No random step in the pipeline: an image's normalised pixels name it (helpers.shards.RecordBatches).
PLAIN = ["--data.crop", "none", "--data.hflip", "false", "--data.augment", "none", "--data.num_workers", "0"]


@pytest.fixture(scope="module")
def chunks(tmp_path_factory: pytest.TempPathFactory, digits_dir: Path) -> Path:
    """The digits folder (train/ and test/, validation carved and seeded) written by vitlit prepare."""
    out = tmp_path_factory.mktemp("chunks") / "digits"
    run_cli("prepare", "--data", "ImageFolderDataModule", "--data.root", digits_dir, "--output", out)
    return out


def _fit(input_dir: Path, root: Path, *extra: object, callbacks=()):
    from vitlit.cli import main

    args = ["fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", input_dir, "--data.batch_size", "64",
            "--trainer.default_root_dir", root, *NO_WARMUP, *extra]  # fmt: skip
    return main([str(a) for a in args], callbacks=callbacks)


def test_prepare_writes_every_split_and_a_fit_trains_tests_and_predicts_from_it(chunks: Path, tmp_path: Path) -> None:
    from vitlit.data.streaming import read_meta

    described = read_meta(str(chunks))  # vitlit's description, itself a one-item LitData set beside the splits
    assert described["splits"] == {"train": 1213, "val": 135, "test": 449} and described["format"] == "raw"
    assert described["class_names"] == [str(d) for d in range(10)] and described["size"] == 32
    fit = _fit(chunks, tmp_path / "runs", *FEW_TOKENS, "--trainer.max_epochs", "2", "--seed_everything", "3",
               "--data.seed", "7")  # fmt: skip
    assert fit.trainer.global_step == 2 * (1213 // 64)  # full batches of every epoch
    run = Path(fit.trainer.log_dir)
    assert "LitData chunks at" in (run / "run_card.json").read_text()
    ckpt = run / "checkpoints" / "last.ckpt"
    assert 0.0 <= float(run_cli("test", "--config", run / "config.yaml", "--ckpt_path", ckpt)
                        .trainer.callback_metrics["test/acc"]) <= 1.0  # fmt: skip
    predict = run_cli("predict", "--config", run / "config.yaml", "--ckpt_path", ckpt)
    rows = list(csv.DictReader((Path(predict.trainer.log_dir) / "predictions.csv").open()))
    assert len(rows) == 449
    # A stream keeps no file names: each row names its image's stored position, in the split's order.
    assert [row["source"] for row in rows] == [str(i) for i in range(449)]
    # Its test split is labelled: each row says its image's class and whether the prediction was it (they had none).
    labels = [str(predict.datamodule.predict_set[i][1]) for i in range(449)]
    assert [row["label"] for row in rows] == labels and len(set(labels)) == 10
    assert [row["correct"] for row in rows] == [str(r["label"] == r["predicted"]).lower() for r in rows]
    # Issue 53, 3: the stream shuffles with the run's seed, as every other source's order does (not data.seed).
    assert (fit.datamodule.train_set.seed, fit.datamodule.seed) == (3, 7)


def test_raw_chunks_hold_evaluation_splits_at_evaluation_size_so_they_crop_what_the_folder_does(
    digits_dir: Path, tmp_path: Path
) -> None:
    # Every split was written at training's 32 px: a streamed evaluation at crop_pct 0.8 resized 32 px up to 40 and
    # cropped, where the folder's evaluation stores the images at 40 px and crops. Now both crop the same pixels.
    import torch

    from vitlit import ImageFolderDataModule
    from vitlit.data.streaming import StreamingDataModule, read_meta, write_meta
    from vitlit.errors import ConfigError

    out = tmp_path / "crop"
    run_cli("prepare", "--data", "ImageFolderDataModule", "--data.root", digits_dir, "--data.crop_pct", "0.8",
            "--output", out)  # fmt: skip
    described = read_meta(str(out))
    assert (described["size"], described["eval_size"]) == (32, 40)
    stream = StreamingDataModule(str(out), crop_pct=0.8, batch_size=16, num_workers=0)
    folder = ImageFolderDataModule(digits_dir, crop_pct=0.8, batch_size=16, num_workers=0, source="workers")
    stream.setup("fit")
    folder.setup("fit")
    (images, targets), (images_f, targets_f) = next(iter(stream.val_dataloader())), next(iter(folder.val_dataloader()))
    assert images.shape[-1] == 40 and torch.equal(targets, targets_f) and torch.equal(images, images_f)
    assert stream.stored_size(True) == 32 and stream.stored_size(False) == 40
    # Evaluated at another geometry, those images would be resampled twice (unlike export's and serve's one resize).
    with pytest.raises(ConfigError, match=r"resized to 40 px \(bilinear\), but this run evaluates at .* = 32 px"):
        StreamingDataModule(str(out))  # crop_pct 1.0
    # A description written before (one size for every split) reads as it did.
    for key in ("eval_size", "native_size", "interpolation"):
        del described[key]
    write_meta(str(out), described)
    assert StreamingDataModule(str(out), crop_pct=0.8).stored_size(False) == 32


def test_encoded_chunks_keep_the_files_and_decode_in_training(digits_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "encoded"
    run_cli("prepare", "--data", "ImageFolderDataModule", "--data.root", digits_dir, "--output", out,
            "--format", "encoded", "--data.val_size", "0.5")  # fmt: skip
    fit = _fit(out, tmp_path / "runs", "--trainer.max_epochs", "1", "--data.crop", "resized")
    assert fit.trainer.global_step == 674 // 64 and fit.datamodule.native_size is None
    assert fit.datamodule.device_transform(train=True).crop == "resized"  # the device crops, as in memory (issue 53)
    # The chunks hold the PNG files as they are, smaller than uint8 pixels.
    raw = sum(p.stat().st_size for p in (tmp_path / "encoded" / "train").glob("*.bin"))
    assert raw < 674 * 3 * 32 * 32


def test_a_mid_epoch_stop_resumes_at_the_sample_it_stopped_at(chunks: Path, tmp_path: Path) -> None:
    """A SIGTERM in the middle of epoch 1; the resumed run's batches are the unbroken run's, sample for sample."""
    from helpers.kill import SignalOneRank

    whole = RecordBatches()
    _fit(chunks, tmp_path / "whole", *PLAIN, *FEW_TOKENS, "--trainer.max_epochs", "2", callbacks=[whole])
    stopped = RecordBatches()
    os.environ["VITLIT_TEST_KILL"] = "1"
    try:
        with pytest.raises(SystemExit) as stop:
            _fit(chunks, tmp_path / "cut", *PLAIN, *FEW_TOKENS, "--trainer.max_epochs", "2",
                 callbacks=[stopped, SignalOneRank(15, rank=0, epoch=1, batch=5)])  # fmt: skip
    finally:
        del os.environ["VITLIT_TEST_KILL"]
    assert stop.value.code == 143
    run = next((tmp_path / "cut" / "lightning_logs").iterdir())
    resumed = RecordBatches()
    from vitlit.cli import main

    main(["fit", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt")],
         callbacks=[resumed])  # fmt: skip
    done = len(stopped.batches)
    assert 18 < done < 2 * 18 and resumed.batches[0][1] == done  # stopped within epoch 1, resumed at its step
    assert [b[2] for b in resumed.batches] == [b[2] for b in whole.batches[done:]]
    assert [b[2] for b in stopped.batches] == [b[2] for b in whole.batches[:done]]


@pytest.mark.parametrize("case", ["truncated", "postscript", "not-prepared", "existing-output"])
def test_damaged_or_foreign_chunks_are_one_line(
    case: str, chunks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 43's hostile pass: a chunk cut short mid-file, an image that is PostScript, a folder not prepare's."""
    import shutil

    from vitlit.data.streaming import write_meta

    copy = tmp_path / "copy"
    shutil.copytree(chunks, copy)
    if case == "truncated":
        chunk = next((copy / "train").glob("*.bin"))
        chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
        said = "bytes, not the"
    elif case == "postscript":
        from vitlit.data.streaming import optimize

        for split in ("train", "val"):
            shutil.rmtree(copy / split)
            optimize(fn=_postscript_item, inputs=list(range(8)), output_dir=str(copy / split), chunk_bytes="1MB",
                     num_workers=1, verbose=False)  # fmt: skip
        meta = json.loads(json.dumps({**_meta(chunks), "format": "encoded", "splits": {"train": 8, "val": 8}}))
        del meta["indexes"]  # written by hand: no index hashes, as an earlier vitlit's description has none
        shutil.rmtree(copy / "vitlit")
        write_meta(str(copy), meta)
        said = "sample 3: the image cannot be decoded (not an image of the formats vitlit reads"
    elif case == "not-prepared":
        shutil.rmtree(copy / "vitlit")
        said = "holds no data set written by vitlit prepare"
    if case == "existing-output":
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "notes.txt").write_text("mine")
        line = refused(capsys, "prepare", "--data", "DigitsDataModule", "--output", tmp_path / "mine",
                        "--overwrite", "true")  # fmt: skip
        assert "which no vitlit prepare wrote" in line and (tmp_path / "mine" / "notes.txt").read_text() == "mine"
        return
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, *STREAM, "--data.input_dir", copy,
                    "--data.batch_size", "4", "--trainer.max_epochs", "1", "--trainer.default_root_dir",
                    tmp_path / "runs")  # fmt: skip
    assert said in line, line


def _meta(chunks: Path) -> dict:
    from vitlit.data.streaming import read_meta

    return read_meta(str(chunks))


def _postscript_item(i: int) -> dict:
    from helpers.hf import POSTSCRIPT, digits_rows

    images, labels = digits_rows(8)
    return {"image": POSTSCRIPT if i == 3 else images[i]["bytes"], "label": labels[i], "index": i}


@pytest.mark.slow  # two processes (gloo), about 40 s
def test_two_processes_share_each_epoch_without_repeats(chunks: Path, tmp_path: Path) -> None:
    root = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    command = vitlit_command("fit", "--config", DIGITS_CONFIG, "--config", ROOT / "configs" / "scale" / "ddp.yaml",
                             "--trainer.devices", "2", "--model.patch_size", "16", *STREAM, "--data.input_dir", chunks,
                             "--data.batch_size", "32", *PLAIN, "--trainer.max_epochs", "2",
                             "--trainer.callbacks+=helpers.shards.RecordBatches",
                             "--trainer.default_root_dir", root)  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((root / f"batches-{r}.json").read_text()) for r in (0, 1)]
    # Every image of the training split, by fingerprint, as one process sees it in one epoch.
    alone = RecordBatches()
    _fit(chunks, tmp_path / "alone", *PLAIN, "--trainer.max_epochs", "1", "--data.batch_size", "1",
         callbacks=[alone])  # fmt: skip
    everything = Counter(p for _, _, prints in alone.batches for p in prints)
    assert sum(everything.values()) == 1213
    for epoch in (0, 1):
        seen = Counter(p for rank in ranks for e, _, prints in rank for p in prints if e == epoch)
        per_rank = [sum(len(prints) for e, _, prints in rank if e == epoch) for rank in ranks]
        assert per_rank[0] == per_rank[1] and 1213 - 2 * 32 < sum(per_rank) <= 1213, per_rank  # as many steps each
        assert not seen - everything  # no image twice: LitData's shards are disjoint


@pytest.mark.slow  # three streamed fits, one stopped by SIGINT: about 45 s
def test_a_stop_in_the_first_epoch_resumes_every_remaining_epoch(chunks: Path, tmp_path: Path) -> None:
    """Hostile round 6, class 5: stopped in epoch 0 of 4, the resumed run trains epochs 0 (its rest), 1, 2 and 3.

    Every epoch has its full steps and its samples (each image of the split at most once an epoch, as the unbroken
    run's epochs have them); none is skipped.
    """
    from helpers.kill import SignalOneRank

    from vitlit.cli import main

    whole = RecordBatches()
    _fit(chunks, tmp_path / "whole", *PLAIN, "--trainer.max_epochs", "4", callbacks=[whole])
    stopped = RecordBatches()
    os.environ["VITLIT_TEST_KILL"] = "1"
    try:
        with pytest.raises(SystemExit):
            _fit(chunks, tmp_path / "cut", *PLAIN, "--trainer.max_epochs", "4",
                 callbacks=[stopped, SignalOneRank(2, rank=0, epoch=0, batch=8)])  # fmt: skip
    finally:
        del os.environ["VITLIT_TEST_KILL"]
    run = next((tmp_path / "cut" / "lightning_logs").iterdir())
    resumed = RecordBatches()
    fit = main(["fit", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt")],
               callbacks=[resumed])  # fmt: skip
    steps = 1213 // 64
    assert fit.trainer.global_step == 4 * steps
    epochs = Counter(epoch for epoch, _, _ in stopped.batches + resumed.batches)
    assert epochs == {0: steps, 1: steps, 2: steps, 3: steps}
    for epoch in range(4):
        got = [p for e, _, b in stopped.batches + resumed.batches if e == epoch for p in b]
        assert len(got) == len(set(got)) == steps * 64  # no sample twice within an epoch
    assert [b[2] for b in stopped.batches + resumed.batches] == [b[2] for b in whole.batches]


def _tiny_folder(root: Path, per_class: int = 8, test: int = 8, size: tuple[int, int] = (24, 20)) -> Path:
    """``root/train/<class>/<i>.png`` and ``root/test/...``: random RGB images of ``size`` (width, height)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in (("train", per_class), ("test", test)):
        for name in ("cat", "dog", "emu"):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def tiny_chunks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny image folder (24 training images, 24 test images of 3 classes) written by vitlit prepare at 16 px."""
    from vitlit import ImageFolderDataModule
    from vitlit.data.prepare import prepare

    root = _tiny_folder(tmp_path_factory.mktemp("tiny") / "images")
    out = tmp_path_factory.mktemp("tiny_chunks") / "chunks"
    prepare(ImageFolderDataModule(root, img_size=16, num_workers=0), str(out))
    return out


def _prints(batch: tuple) -> list[bytes]:
    """Each image of a batch by its bytes: the same image, the same bytes."""
    return [image.numpy().tobytes() for image in batch[0]]


@pytest.mark.parametrize("saved_after", [2, 1], ids=["epoch-end", "mid-epoch"])
def test_a_resume_under_a_batch_limit_goes_on_as_the_unbroken_run(tiny_chunks: Path, saved_after: int) -> None:
    """Under ``--trainer.limit_train_batches 2`` an epoch ends before the stream does: a checkpoint at its end
    resumes with the next epoch afresh (not the stream's leftovers), and one mid-epoch finishes its epoch, then
    starts the next afresh, as the unbroken run does."""
    from types import SimpleNamespace

    from vitlit.data.streaming import StreamingDataModule

    limit = 2
    trainer = SimpleNamespace(num_training_batches=limit)  # what Lightning asks of each epoch

    def module(saved: dict | None = None) -> StreamingDataModule:
        data = StreamingDataModule(str(tiny_chunks), img_size=16, batch_size=4, num_workers=0)
        data.trainer = trainer
        if saved is not None:
            data.load_state_dict(saved)
        data.setup("fit")
        return data

    def batches(loader, count: int) -> list[list[bytes]]:
        # Lightning stops asking after the limit, without running the stream out.
        return [_prints(batch) for batch in itertools.islice(loader, count)]

    unbroken = module()
    loader = unbroken.train_dataloader()
    assert len(loader) > limit
    epoch = iter(loader)
    first = batches(epoch, saved_after)
    saved = unbroken.state_dict()  # the checkpoint, taken as the epoch's batches go by
    rest = batches(epoch, limit - saved_after)
    following = [batches(loader, limit) for _ in range(2)]

    resumed = module(saved).train_dataloader()
    again = batches(resumed, limit - saved_after) if saved_after < limit else []
    assert len(first + rest) == limit and again == rest
    assert [batches(resumed, limit) for _ in range(2)] == following


def test_streamed_predictions_are_in_the_splits_order_with_two_workers(tiny_chunks: Path) -> None:
    """LitData hands a stream's batches out worker by worker: the rows go back in order by each item's stored
    position, which a stream (no file names) writes as the row's source."""
    from vitlit.data.streaming import StreamingDataModule
    from vitlit.runs.prediction_table import _stored_indices, in_stored_order

    data = StreamingDataModule(str(tiny_chunks), img_size=16, batch_size=4, num_workers=2)
    data.setup("predict")
    split = [data.predict_set[i][0].numpy().tobytes() for i in range(len(data.predict_set))]
    rows = []  # a stand-in for each image's prediction: its position in the split, read off its pixels
    for batch in data.predict_dataloader():
        images, _ = data.on_before_batch_transfer(batch, 0)
        rows += [split.index(image.numpy().tobytes()) for image in images]
    assert rows != sorted(rows)  # the workers' order, not the split's
    positions, labels = _stored_indices(data, len(rows))
    probs, stored = in_stored_order([torch_tensor(rows)], [positions])
    assert probs.squeeze(1).tolist() == stored == list(range(24))
    # Each row's label goes with it: the split's own, in the split's order.
    ordered = in_stored_order([labels.unsqueeze(1)], [positions])[0].squeeze(1).tolist()
    assert ordered == [data.predict_set[i][1] for i in range(24)] and len(set(ordered)) > 1


def test_an_odd_batch_under_mixup_is_refused_for_a_stream_too(tiny_chunks: Path) -> None:
    """The stream's own loader skipped the base class's check: timm's AssertionError at the first step (a review's)."""
    from vitlit.data.streaming import StreamingDataModule
    from vitlit.errors import ConfigError
    from vitlit.regularize.batch_augment import BatchAugment

    data = StreamingDataModule(str(tiny_chunks), img_size=16, batch_size=3, num_workers=0,
                               batch_augment=BatchAugment(mixup_alpha=0.8))  # fmt: skip
    data.setup("fit")
    with pytest.raises(ConfigError, match="batch_size=3 is odd, but Mixup/CutMix mix training images in pairs"):
        data.train_dataloader()


def test_predictions_of_processes_given_blocks_of_a_stream_are_put_in_stored_order() -> None:
    """Under DDP LitData gives each process a block of the split (10 and 14 items here), not every other item;
    an item repeated to even out the processes is written once."""
    import torch

    from vitlit.runs.prediction_table import in_stored_order

    blocks = [list(range(10)), [*range(10, 24), 23]]
    probs = [torch.tensor(block, dtype=torch.float).unsqueeze(1) * 10 for block in blocks]
    rows, stored = in_stored_order(probs, [torch.tensor(block) for block in blocks])
    assert stored == list(range(24)) and rows.squeeze(1).tolist() == [10.0 * i for i in range(24)]


def torch_tensor(values: list[int]):
    """``values`` as a one-column tensor, a row per image."""
    import torch

    return torch.tensor(values, dtype=torch.float).unsqueeze(1)


class _Native:
    """A data module of 30 random 16 px RGB images of 3 classes, all one size (``native_size``), as CIFAR's."""

    @staticmethod
    def make(**options: object):
        import torch
        from torch.utils.data import TensorDataset

        from vitlit.data.base import ImageClassificationDataModule

        images = torch.randint(0, 256, (30, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))

        class Native(ImageClassificationDataModule):
            native_size = 16

            @property
            def class_names(self) -> list[str]:
                return ["a", "b", "c"]

            def train_dataset(self):
                return TensorDataset(images, torch.arange(30) % 3)

        return Native(num_workers=0, **options), images


def test_encoded_chunks_of_one_size_are_kept_at_it_as_in_memory(tmp_path: Path) -> None:
    """CIFAR's encoded chunks were decoded at img_size: a random resized crop then cut other pixels than in memory."""
    from vitlit.data.prepare import prepare
    from vitlit.data.streaming import StreamingDataModule

    native, images = _Native.make(img_size=32)
    prepare(native, str(tmp_path / "chunks"), format="encoded")
    stream = StreamingDataModule(str(tmp_path / "chunks"), img_size=32, num_workers=0)
    stream.setup("fit")
    assert stream.native_size == 16 and stream.stored_size(True) == native.stored_size(True) == 16
    held = {image.numpy().tobytes() for image in images}
    streamed = [stream.train_set[i][0] for i in range(len(stream.train_set))]
    assert sum(image.numpy().tobytes() in held for image in streamed) == len(streamed) == 24  # as stored, not resized


@pytest.mark.parametrize("options", [{"store_size": 24}, {"img_size": 14, "crop_pct": 0.875}], ids=str)
def test_raw_chunks_refuse_another_training_size_in_one_line(tiny_chunks: Path, options: dict) -> None:
    """Raw training images stored at 16 px would be resampled again for another stored size (with the same
    evaluation size, 14 / 0.875 = 16, too): refused as another evaluation geometry is."""
    from vitlit.data.streaming import StreamingDataModule
    from vitlit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"training images resized to 16 px, but this run stores them at .* = "):
        StreamingDataModule(str(tiny_chunks), **{"img_size": 16, **options})


def test_a_place_in_chunks_prepared_again_since_is_refused(tiny_chunks: Path) -> None:
    """A checkpoint's place in the training stream, resumed after `prepare --overwrite` on changed data, went on in
    the other data and said the rest of the epoch had the samples the stopped run would have had."""
    from types import SimpleNamespace

    from vitlit.data.streaming import StreamingDataModule
    from vitlit.errors import ConfigError

    data = StreamingDataModule(str(tiny_chunks), img_size=16, num_workers=0)
    prepared, other = data.meta["indexes"]["train"], "0" * 64
    data.trainer = SimpleNamespace(state=SimpleNamespace(fn="test"))  # an evaluation takes the weights only
    data.load_state_dict({"train_stream": None, "epoch_done": False, "prepared": other})
    data.trainer.state.fn = "fit"
    data.load_state_dict({"train_stream": None, "epoch_done": False, "prepared": prepared})  # the same chunks
    data.load_state_dict({"train_stream": None, "epoch_done": False})  # a checkpoint from before: taken
    with pytest.raises(ConfigError, match="was prepared again since this checkpoint was saved"):
        data.load_state_dict({"train_stream": None, "epoch_done": False, "prepared": other})
