"""Image folders as users have them: 16-bit images, symlink loops, unreadable files, renamed classes, empty splits."""

from __future__ import annotations

import logging
import os
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli import run_cli, said_with, tiny_folder_fit, tree_digest
from PIL import Image, ImageOps
from torchvision.transforms.v2.functional import resize

from vitlit import ImageFolderDataModule
from vitlit.data.images import image_problem, open_image, size_problem
from vitlit.data.pipeline import ToStoredImage
from vitlit.errors import ConfigError
from vitlit.runs.curves import read_scalars


def _folder(root: Path, per_class: int = 12, classes: tuple[str, ...] = ("a", "b"), splits=("train",)) -> Path:
    rng = np.random.default_rng(0)
    for split in splits:
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitlit: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path: Path) -> None:
    grey = np.linspace(0, 65535, 64 * 64).reshape(64, 64).astype(np.uint16)
    Image.fromarray(grey).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode == "I;16"
    pixels = np.asarray(open_image(tmp_path / "g16.png"))
    assert pixels.shape == (64, 64, 3) and (pixels == 255).mean() < 0.01  # clipping made 99.6% of them 255
    np.testing.assert_allclose(pixels[..., 0], grey / 257, atol=0.51)
    for name in ("a", "b"):  # and so does the data module that reads them
        (tmp_path / "train" / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(grey).save(tmp_path / "train" / name / f"{i}.png")
    data = ImageFolderDataModule(tmp_path, img_size=64, num_workers=0, val_size=2)
    data.setup("fit")
    image, _ = data.train_set.dataset[0]
    assert (np.asarray(image) == 255).mean() < 0.01


def test_a_photo_taken_sideways_is_decoded_upright_and_a_damaged_tag_leaves_it_as_it_is(tmp_path: Path) -> None:
    """A phone's JPEG stores its pixels as the sensor saw them and says in EXIF how to turn them (as ``datasets``
    and browsers do); vitlit's one decoder turns them, for training, predict, export and serve alike."""
    pixels = np.zeros((20, 40, 3), dtype=np.uint8)
    pixels[:, :20] = 255  # the left half white: after a turn of 90 degrees it is the top or the bottom half
    for orientation, expected in ((1, (40, 20)), (6, (20, 40)), (8, (20, 40)), (3, (40, 20))):
        exif = Image.Exif()
        exif[0x0112] = orientation
        Image.fromarray(pixels).save(tmp_path / f"{orientation}.jpg", exif=exif.tobytes(), quality=95)
        image = open_image(tmp_path / f"{orientation}.jpg")
        assert image.size == expected, orientation
        with Image.open(tmp_path / f"{orientation}.jpg") as raw:
            assert np.array_equal(np.asarray(image), np.asarray(ImageOps.exif_transpose(raw).convert("RGB")))
    assert np.asarray(open_image(tmp_path / "6.jpg"))[:10].mean() > 200  # turned clockwise: white is on top
    damaged = bytearray((tmp_path / "6.jpg").read_bytes())
    start = damaged.index(b"MM\x00*") if b"MM\x00*" in damaged else damaged.index(b"II*\x00")
    damaged[start + 4 : start + 8] = b"\xff\xff\xff\xff"  # the first directory's offset points past the file
    (tmp_path / "damaged.jpg").write_bytes(bytes(damaged))
    assert open_image(tmp_path / "damaged.jpg").size == (40, 20)  # the pixels as they are, no error


def test_a_datasets_sixteen_bit_images_are_scaled_as_files_are_on_both_sources() -> None:
    # A fork's dataset may hand over 16-bit PIL images: the in-memory and the workers' source store them with the
    # same conversion as a decoded file (and an encoded LitData chunk), not PIL's clipping one.
    grey = np.array([[0, 1000, 20000, 40000, 60000, 65535]], dtype=np.uint16)
    stored = ToStoredImage(1, None)(Image.fromarray(grey))
    assert stored.flatten().tolist() == [0, 4, 78, 156, 233, 255]  # PIL's convert: [0, 255, 255, 255, 255, 255]
    with pytest.raises(ValueError, match="float pixels of unknown range"):  # PIL would clip them to 0 and 255
        ToStoredImage(1, None)(Image.fromarray(np.full((4, 4), 0.5, dtype=np.float32)))


def test_the_resize_bound_counts_the_pixels_torchvision_makes() -> None:
    # torchvision's resize truncates the longer side: 100 x 30 at a shorter side of 32 is 106 x 32 = 3,392 pixels.
    assert resize(torch.zeros(1, 30, 100), [32], antialias=True).shape[-2:] == (32, 106)
    assert size_problem(100, 30, 32, max_pixels=3392) is None
    assert "gives 3,392 pixels" in size_problem(100, 30, 32, max_pixels=3391)


def test_every_sixteen_bit_value_is_rounded_as_the_model_card_says(tmp_path: Path) -> None:
    """Issue 46, class 6: the float64 scaling took 2 s and 1.5 GB for a 77 KB PNG; the integer one gives the same."""
    values = np.arange(65536, dtype=np.uint16).reshape(256, 256)
    Image.fromarray(values).save(tmp_path / "all.png")
    expected = (values.astype(np.float64) * (255 / 65535)).round().astype(np.uint8)  # the card's open_as_trained
    np.testing.assert_array_equal(np.asarray(open_image(tmp_path / "all.png", "L")), expected)
    wide = np.array([[-5, 0, 70000, 65535]], dtype=np.int32)  # 32-bit grey: clipped to 0-65535 first
    Image.fromarray(wide).save(tmp_path / "wide.tif")
    np.testing.assert_array_equal(np.asarray(open_image(tmp_path / "wide.tif", "L")), [[0, 0, 255, 255]])


@pytest.mark.parametrize("fmt", ["BMP", "GIF", "TIFF", "PPM", "WEBP", "PNG", "JPEG"])
def test_damage_past_the_header_is_found_in_every_format(fmt: str, tmp_path: Path) -> None:
    """Issue 46, class 9: BMP, GIF, TIFF and PPM files cut short passed the check and stopped training mid-run."""
    from vitlit.data.images import image_problem

    pixels = (np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8)
    whole = tmp_path / f"whole.{fmt.lower()}"
    Image.fromarray(pixels).save(whole, format=fmt)
    cut = tmp_path / f"cut.{fmt.lower()}"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 2 // 3])
    assert image_problem(whole) is None and image_problem(cut) is not None


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_bytes_after_a_whole_images_end_marker_pass_and_a_cut_image_does_not(fmt: str, tmp_path: Path) -> None:
    """A phone's JPEG may carry bytes after its end marker (Samsung's trailer, a motion photo's video); the check read
    only the last 64 bytes and refused such photos as truncated, though PIL decodes them whole."""
    from vitlit.data.images import image_problem

    pixels = (np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8)
    whole = tmp_path / f"whole.{fmt.lower()}"
    Image.fromarray(pixels).save(whole, format=fmt)
    trailer = tmp_path / f"trailer.{fmt.lower()}"
    trailer.write_bytes(whole.read_bytes() + b"\x00\x00SEFH" + bytes(120) + b"SEFT")
    cut = tmp_path / f"cut.{fmt.lower()}"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 2 // 3] + bytes(200))  # cut, then anything
    assert image_problem(trailer) is None and image_problem(trailer.read_bytes()) is None
    assert image_problem(cut) == image_problem(cut.read_bytes()) == f"a truncated {fmt} file"


BAD_FILES = {
    "truncated.png": ("a truncated PNG file", lambda p, good: p.write_bytes(good.read_bytes()[:-40])),
    "empty.png": ("empty (0 bytes)", lambda p, good: p.write_bytes(b"")),
    "fake.png": ("not an image of the formats vitlit reads", lambda p, good: p.write_text("<html>not an image</html>")),
    "dangling.png": ("a dangling symbolic link", lambda p, good: p.symlink_to(p.parent / "gone.png")),
    # 20 KB of PNG holding 144 million pixels: refused from its header, before decoding (seconds and gigabytes).
    "huge.png": (
        "too large to decode safely (12000 x 12000 pixels",
        lambda p, good: Image.new("1", (12_000, 12_000)).save(p),
    ),
    # A few KB holding one row of 4 million pixels: small to decode, but the resize of its shorter side to the
    # model's size would make 128 million.
    "streak.png": ("so elongated that resizing", lambda p, good: Image.new("L", (4_000_000, 1)).save(p)),
    "pipe.png": ("not a regular file", lambda p, good: os.mkfifo(p)),  # opening it would wait forever
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_each_kind_of_unreadable_file_is_named(name: str, tmp_path: Path) -> None:
    good = _folder(tmp_path, per_class=1) / "train" / "a" / "0.png"
    problem, make = BAD_FILES[name]
    make(tmp_path / name, good)
    assert problem in image_problem(tmp_path / name, stored_side=32)
    assert image_problem(good, stored_side=32) is None


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root reads every file")
def test_an_image_without_read_permission_is_named_not_raised(tmp_path: Path) -> None:
    good = _folder(tmp_path, per_class=1) / "train" / "a" / "0.png"
    good.chmod(0)
    assert "not readable (Permission denied)" in image_problem(good)


def test_an_image_without_read_permission_is_named_even_as_root(tmp_path: Path, monkeypatch) -> None:
    good = _folder(tmp_path, per_class=1) / "train" / "a" / "0.png"
    real_open = Path.open

    def refuse(self, *args, **kwargs):  # what a file of another user gives: open() fails, stat() works
        if self == good:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    assert image_problem(good) == "not readable (Permission denied)"


def test_only_a_full_decode_finds_damage_inside_the_pixels(tmp_path: Path) -> None:
    good = _folder(tmp_path, per_class=1) / "train" / "a" / "0.png"
    data = bytearray(good.read_bytes())
    data[60:200] = bytes(140)  # the compressed pixels; the header and the end are intact
    good.write_bytes(bytes(data))
    assert image_problem(good) is None  # the cheap check of training sets cannot see it
    assert image_problem(good, decode=True).startswith("damaged: PIL cannot decode it")


def _with_bad_files(root: Path) -> Path:
    _folder(root)
    good = root / "train" / "a" / "0.png"
    for name, (_, make) in BAD_FILES.items():
        make(root / "train" / "b" / name, good)
    return root


def test_unreadable_images_stop_the_run_before_it_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _with_bad_files(tmp_path / "data")
    with pytest.raises(SystemExit) as exit_info:
        tiny_folder_fit(root, tmp_path / "out")
    assert exit_info.value.code == 2
    line = _one_error_line(capsys)
    assert (
        "vitlit: error: image " in line
        and f"(and {len(BAD_FILES) - 1} more)" in line
        and "--data.bad_images skip" in line
    )
    assert not list((tmp_path / "out").rglob("*.*")), "a refused run left files behind"


def test_skip_trains_without_them_and_lists_them(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _with_bad_files(tmp_path / "data")
    with warnings.catch_warnings(record=True) as caught:  # a log line: a warning would print its source line too
        warnings.simplefilter("always")
        cli = tiny_folder_fit(root, tmp_path / "out", "--data.bad_images", "skip")
    assert not [w for w in caught if "unreadable" in str(w.message)]
    said = [line for line in caplog.text.splitlines() if "vitlit: skipping" in line]
    assert len(said) == 1 and f"skipping {len(BAD_FILES)} unreadable image" in said[0] and "train" in said[0], said
    run = Path(cli.trainer.log_dir)
    listed = (run / "skipped_images.txt").read_text().splitlines()
    assert sorted(Path(line.split("\t")[0]).name for line in listed) == sorted(BAD_FILES)
    scalars = read_scalars(run)
    assert scalars["data/skipped_images"] == [(0, float(len(BAD_FILES)))]
    assert "hp_metric" not in scalars  # issue 36, stumble 15: TensorBoard's placeholder -1 is not logged
    assert len(cli.datamodule.train_set) + len(cli.datamodule.val_set) == 24
    # Its resume, a new process whose count starts afresh, lists none of them again (the runs review's: twice).
    run_cli("fit", "--config", run / "config.yaml", "--ckpt_path", run / "checkpoints" / "last.ckpt",
            "--trainer.max_epochs", "2")  # fmt: skip
    assert (run / "skipped_images.txt").read_text().splitlines() == listed


def test_a_symlink_loop_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _folder(tmp_path / "data")
    os.symlink("..", root / "train" / "b" / "loop")
    with pytest.raises(SystemExit) as exit_info:
        tiny_folder_fit(root, tmp_path / "out")
    assert exit_info.value.code == 2
    assert f"{root / 'train' / 'b' / 'loop'} is a symbolic link to {root / 'train'}" in _one_error_line(capsys)


def test_a_link_to_the_file_systems_root_is_blamed_on_the_link(tmp_path: Path) -> None:
    """Issue 46, class 9: the scan walked into / and blamed /bin/X11 (a loop found there) instead."""
    from vitlit.data.images import image_files
    from vitlit.errors import ConfigError

    root = _folder(tmp_path / "data")
    link = root / "train" / "b" / "everything"
    os.symlink("/", link)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(link))} is a symbolic link to /,"):
        list(image_files(root / "train"))


def test_a_symlinked_folder_elsewhere_is_followed(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data")
    extra = _folder(tmp_path / "extra", per_class=3)
    os.symlink(extra / "train" / "a", root / "train" / "a" / "more")
    data = ImageFolderDataModule(root, img_size=16, num_workers=0, val_size=2)
    data.setup("fit")
    assert len(data.train_set) + len(data.val_set) == 12 + 3 + 12


@pytest.mark.parametrize("reader", ["ImageFolderDataModule", "predict_dir"])
def test_a_channel_count_no_image_file_holds_is_refused_in_the_readers_words(reader: str, tmp_path: Path) -> None:
    # One rule for every reader of image files (`vitlit.data.images.pil_mode`): grey, RGB or RGBA.
    root = _folder(tmp_path / "data")
    predict = {"predict_dir": root / "train" / "a"} if reader == "predict_dir" else {}
    with pytest.raises(ConfigError) as refused:
        ImageFolderDataModule(root, in_chans=2, **predict)
    assert str(refused.value).startswith(f"{reader} reads image files, which hold 1 (grey), 3 (RGB) or 4 (RGBA) ")
    assert "not in_chans=2; give one of those" in str(refused.value)
    assert ImageFolderDataModule(root, in_chans=4, **predict).image_mode == "RGBA"


def test_an_elongated_image_is_bounded_at_the_side_the_split_stores_it_at(tmp_path: Path) -> None:
    # Evaluation stores images at floor(img_size / crop_pct): 64 px here, where the model sees 32. A 20,000 x 1 image
    # resized to 32 px high would be 20 M pixels (under the bound), to 64 px high 82 M (over it).
    root = _folder(tmp_path / "data")
    Image.fromarray(np.zeros((1, 20_000, 3), dtype=np.uint8)).save(root / "train" / "a" / "long.png")
    data = ImageFolderDataModule(root, img_size=32, crop_pct=0.5, val_size=2)
    assert data.stored_side == 64
    with pytest.raises(ConfigError, match="so elongated that resizing its shorter side to 64 gives 81,920,000 pixels"):
        data.setup("fit")


@pytest.mark.parametrize("split", ["val", "test"])
def test_an_empty_split_folder_is_refused(split: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _folder(tmp_path / "data")
    (root / split).mkdir()
    with pytest.raises(SystemExit) as exit_info:
        tiny_folder_fit(root, tmp_path / "out")
    assert exit_info.value.code == 2
    assert f"{root / split} holds no class folder with images" in _one_error_line(capsys)


def test_checkpoints_keep_class_names_and_refuse_other_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _folder(tmp_path / "data", classes=("cat", "dog"), splits=("train", "test"))
    fit = tiny_folder_fit(root, tmp_path / "out")
    run = Path(fit.trainer.log_dir)
    last = run / "checkpoints" / "last.ckpt"
    renamed = tmp_path / "renamed"
    shutil.copytree(root, renamed)
    for split in ("train", "test"):
        (renamed / split / "dog").rename(renamed / split / "wolf")
    before = tree_digest(tmp_path / "out")
    with pytest.raises(SystemExit) as exit_info:
        run_cli("test", "--config", run / "config.yaml", "--data.root", renamed, "--ckpt_path", last)
    assert exit_info.value.code == 2
    line = _one_error_line(capsys)
    assert "the checkpoint's class 1 is 'dog' but this data's class 1 is 'wolf'" in line
    assert line.endswith(f"use the options it was trained with (--config {run / 'config.yaml'}).")
    assert tree_digest(tmp_path / "out") == before
    test = run_cli("test", "--config", run / "config.yaml", "--ckpt_path", last)  # the same classes: fine
    assert test.model.hparams.class_names == ["cat", "dog"]


def test_an_image_that_fails_to_decode_in_a_worker_is_named_and_leaves_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _folder(tmp_path / "data", per_class=16)
    broken = root / "train" / "b" / "3.png"
    data = bytearray(broken.read_bytes())
    data[60:200] = bytes(140)  # the compressed pixels, not the header or the end: only decoding can tell
    broken.write_bytes(bytes(data))
    assert image_problem(broken) is None
    with pytest.raises(SystemExit) as exit_info:
        tiny_folder_fit(root, tmp_path / "out", "--data.num_workers", "1", "--data.persistent_workers", "false",
             "--data.val_size", "2", "--trainer.limit_train_batches", "8")  # fmt: skip
    assert exit_info.value.code == 2
    assert f"vitlit: error: image {broken} cannot be decoded" in _one_error_line(capsys)
    assert not list((tmp_path / "out").rglob("*.ckpt"))  # no half-trained run for --ckpt_path last to prefer


def test_class_folders_without_train_are_split_seeded_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 36, stumble 9: mydata/<class>/*.jpg, the layout most people have (HF's imagefolder takes it)."""
    flat = _folder(tmp_path / "data", per_class=20) / "train"  # its class folders are all there is
    with caplog.at_level(logging.INFO):
        data = ImageFolderDataModule(flat, img_size=16, num_workers=0, val_size=4, test_size=0.2)
    assert data.class_names == ["a", "b"]
    said_with(caplog.text, "2 classes", "8 of 40", "--data.test_size 0.2", "seed 42")
    data.setup("fit")
    train = {path for path, _ in data.train_dataset().samples}
    test = {path for path, _ in data.test_dataset().samples}
    assert len(train) == 32 and len(test) == 8 and not train & test and len(data.test_dataset()) == 8
    assert len(data.train_set) + len(data.val_set) == 32 and len(data.val_set) == 4
    again = ImageFolderDataModule(flat, img_size=16, num_workers=0, val_size=4, test_size=0.2)
    assert again.test_dataset().samples == data.test_dataset().samples  # seeded: the same split every time


def test_a_deep_image_gets_fewer_pixels_to_decode_than_an_8_bit_one(tmp_path: Path) -> None:
    """Issue 46, class 6: a 77 KB 16-bit PNG within the pixel bound took 426 MB to decode, an int32 one 511 MB.

    The bound is on what decoding costs (`DECODE_BYTES`), read from the header: the 8-bit modes keep ``max_pixels``.
    """
    from vitlit.data.images import ImageTooLarge, open_image

    sizes = {"RGB": np.uint8, "I;16": np.uint16, "I": np.int32}
    files = {}
    for mode, dtype in sizes.items():
        files[mode] = tmp_path / f"{mode.replace(';', '')}.{'tif' if mode == 'I' else 'png'}"
        shape = (30, 30, 3) if mode == "RGB" else (30, 30)
        Image.fromarray(np.zeros(shape, dtype)).save(files[mode])
    assert open_image(files["RGB"], "RGB", max_pixels=900).size == (30, 30)  # 900 pixels: at the bound
    for mode in ("I;16", "I"):
        with pytest.raises(ImageTooLarge, match=f"30 x 30 pixels of mode {mode}, which costs more to decode"):
            open_image(files[mode], "RGB", max_pixels=900)
        assert open_image(files[mode], "RGB", max_pixels=900 * 16 // 7 + 1).size == (30, 30)
