"""From checkpoint to use outside vitlit: export (ONNX, int8, torch.export) and an HTTP server (LitServe)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from helpers.cli import DIGITS_CONFIG, run_cli
from helpers.http import free_port, post_file, post_json, wait_for

from vitlit.data.digits import write_digits_folder
from vitlit.data.images import image_files
from vitlit.export import export, load_classifier

# The digits recipe, long enough to be confident (about 0.9 test accuracy): int8 agreement means little on a model
# whose logits are all alike.
# Patch 16 (4 tokens + the class token): half the time of the recipe's patch 8, and on these upsampled 8x8 digits
# it learns as well (test accuracy 0.87 vs 0.85 after 30 epochs, measured 2026-11-30).
LEARN = ["--trainer.max_epochs", "30", "--data.batch_size", "128", "--data.on_device", "true",
         "--model.patch_size", "16", "--model.optimizer.init_args.lr", "4e-3",
         "--model.scheduler.init_args.warmup_steps", "20"]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the last checkpoint of a short digits run, the digits test folder)."""
    root = tmp_path_factory.mktemp("deploy")
    data = write_digits_folder(root / "digits")
    fit = run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", data, "--trainer.default_root_dir", root, *LEARN)
    return Path(fit.trainer.log_dir) / "checkpoints" / "last.ckpt", data / "test"


def _test_batch(card, folder: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The digits test split through the model card's transform, and its labels."""
    files = list(image_files(folder))
    return card.batch(files), torch.tensor([int(p.parent.name) for p in files])


def test_onnx_export_runs_in_onnx_runtime_with_any_batch_and_carries_its_card(trained, tmp_path: Path) -> None:
    ckpt, test_dir = trained
    output = tmp_path / "vit.onnx"
    report = export(ckpt, output, "onnx", images=test_dir)
    assert report["max_abs_diff"] < 1e-3 and report["top1_agreement"] == 1.0
    net, card = load_classifier(ckpt)
    images, _ = _test_batch(card, test_dir)
    session = ort.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    for n in (1, 5, 33):  # the batch dimension is dynamic
        logits = session.run(None, {"images": images[:n].numpy()})[0]
        np.testing.assert_allclose(logits, net(images[:n]).detach().numpy(), atol=1e-3)
    metadata = {p.key: json.loads(p.value) for p in onnx.load(str(output)).metadata_props}
    sidecar = json.loads(Path(f"{output}.json").read_text())
    for card_of_file in (metadata, sidecar):
        assert card_of_file["class_names"] == [str(d) for d in range(10)]
        assert card_of_file["img_size"] == 32 and card_of_file["mean"] == [0.485, 0.456, 0.406]


def test_int8_is_smaller_and_agrees_with_fp32_on_the_digits_test_split(trained, tmp_path: Path) -> None:
    ckpt, test_dir = trained
    fp32, int8 = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    export(ckpt, fp32, "onnx")
    export(ckpt, int8, "int8")
    _, card = load_classifier(ckpt)
    images, labels = _test_batch(card, test_dir)
    predicted = {}
    for name, path in (("fp32", fp32), ("int8", int8)):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        predicted[name] = torch.from_numpy(session.run(None, {"images": images.numpy()})[0]).argmax(1)
    agreement = float((predicted["int8"] == predicted["fp32"]).float().mean())
    accuracy = float((predicted["fp32"] == labels).float().mean())
    assert accuracy > 0.8, "the fixture's model did not learn"
    assert agreement >= 0.99, f"int8 agrees with fp32 on {agreement:.1%} of the test images"
    assert int8.stat().st_size < 0.5 * fp32.stat().st_size


def test_pt2_export_loads_with_torch_export(trained, tmp_path: Path) -> None:
    ckpt, _ = trained
    output = tmp_path / "vit.pt2"
    report = export(ckpt, output, "pt2")
    program = torch.export.load(str(output)).module()
    net, card = load_classifier(ckpt)
    x = torch.randn(3, card.in_chans, card.img_size, card.img_size)
    torch.testing.assert_close(program(x), net(x), atol=1e-4, rtol=0)
    assert report["max_abs_diff"] < 1e-4


@pytest.mark.parametrize("command", ["export", "serve"])
@pytest.mark.parametrize("case", ["missing", "plain-weights"])
def test_a_missing_or_foreign_checkpoint_is_one_line(
    command: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "w.ckpt"
    if case == "plain-weights":
        torch.save({"weight": torch.zeros(2)}, ckpt)
    extra = ["--output", tmp_path / "out.onnx"] if command == "export" else ["--port", str(free_port())]
    with pytest.raises(SystemExit) as exit_info:
        run_cli(command, "--ckpt_path", ckpt, *extra)
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("vitlit: error:") and "w.ckpt" in line
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.slow
def test_the_server_answers_predictions_and_refuses_bad_uploads(trained, tmp_path: Path) -> None:
    ckpt, test_dir = trained
    port = free_port()
    command = [sys.executable, "-m", "vitlit", "serve", "--ckpt_path", str(ckpt), "--port", str(port),
               "--max_upload_mb", "1", "--accelerator", "cpu"]  # fmt: skip
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{url}/health", timeout=180, alive=lambda: server.poll() is None)
        image = next(p for p in image_files(test_dir / "3"))
        status, answer = post_file(f"{url}/predict", "image", image.name, image.read_bytes())
        assert status == 200, answer
        top = answer["predictions"]
        assert len(top) == 3 and all(p["class"] in [str(d) for d in range(10)] for p in top)
        assert top[0]["probability"] >= top[1]["probability"] >= top[2]["probability"]
        encoded = base64.b64encode(image.read_bytes()).decode()
        assert post_json(f"{url}/predict", {"image": encoded}) == (200, answer)  # the same image, the same answer
        bad = [
            post_file(f"{url}/predict", "image", "fake.png", b"not an image at all"),
            post_file(f"{url}/predict", "image", "cut.png", image.read_bytes()[:100]),
            post_json(f"{url}/predict", {"image": "***"}),
            post_json(f"{url}/predict", {"picture": encoded}),
            post_json(f"{url}/predict", b"{not json"),
        ]
        assert [status for status, _ in bad] == [400] * 5, bad
        assert all(detail["detail"] for _, detail in bad)
        assert post_file(f"{url}/predict", "image", "big.png", b"0" * (2 * 2**20))[0] == 413
        assert post_file(f"{url}/predict", "image", image.name, image.read_bytes()) == (200, answer)  # still up
    finally:
        server.terminate()  # SIGTERM: vitlit serve shuts LitServe down as on Ctrl-C, worker processes included
        server.wait(timeout=60)
        log.close()
    assert "Traceback" not in (tmp_path / "server.log").read_text()
    assert not _alive(server.pid), "a process of the server outlived it"


def _alive(group: int, grace: float = 20.0) -> bool:
    """Whether a process of the group ``group`` (the server and the workers it started) outlives ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.5)
    os.killpg(group, signal.SIGKILL)  # leave nothing behind for the next tests
    return True
