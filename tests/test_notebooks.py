"""Every notebook in notebooks/ runs top to bottom (the README points users at them) and draws real pictures.

The quick start trains and must learn; the inspection notebook is pointed at a short digits run made here. Each
picture a notebook draws is saved as a PNG file and must not be blank.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import DIGITS_CONFIG, ROOT, run_cli
from helpers.learning import CASES as LEARNING
from PIL import Image

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PICTURES = {"quickstart": 2, "inspect_run": 4}  # curves, confusion matrix; + misclassified grid, attention maps


@pytest.fixture
def short_run(tmp_path: Path, digits_dir: Path) -> Path:
    fit = run_cli(
        "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.source", "memory",
        "--trainer.max_epochs", "3", "--trainer.limit_train_batches", "6", "--trainer.log_every_n_steps", "2",
        "--trainer.default_root_dir", tmp_path / "runs",
    )  # fmt: skip
    return Path(fit.trainer.log_dir)


def _save_pictures(outputs: list[dict], folder: Path, stem: str) -> list[Path]:
    paths = []
    for i, output in enumerate(o for o in outputs if "image/png" in o.get("data", {})):
        path = folder / f"{stem}_{i}.png"
        path.write_bytes(base64.b64decode(output["data"]["image/png"]))
        paths.append(path)
    return paths


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.part("tools")) if p.stem == "inspect_run" else p for p in NOTEBOOKS],
    ids=[p.stem for p in NOTEBOOKS],
)  # inspect_run draws attention maps with vitlit.tools.attention
def test_notebook_executes(
    path: Path, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    if path.stem == "inspect_run":
        monkeypatch.setenv("VITLIT_RUN", str(request.getfixturevalue("short_run")))  # the kernel inherits it
    notebook = nbformat.read(path, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells), "store notebooks without outputs"
    # Raises CellExecutionError, with the failing cell and its traceback, if any cell fails.
    nbclient.NotebookClient(
        notebook, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    pictures = _save_pictures(outputs, tmp_path, path.stem)
    assert len(pictures) >= PICTURES.get(path.stem, 1), "a figure was not drawn"
    for picture in pictures:
        pixels = np.asarray(Image.open(io.BytesIO(picture.read_bytes())).convert("L"), dtype=np.float32)
        assert pixels.std() > 10 and len(np.unique(pixels)) > 16, f"{picture.name} is blank"
    if path.stem == "quickstart":
        # The learning check: real 8x8 digits at 32 px, the best checkpoint on validation data, tested once.
        text = "".join(o.get("text", "") for o in outputs)
        accuracy = float(re.search(r"'test/acc': ([0-9.]+)", text).group(1))
        case = LEARNING["quickstart"]  # the notebook's run; its spread over seeds, threads and kernels is there
        assert case.metric == "test_acc" and accuracy > case.threshold, text[-2000:]
