"""Every notebook in notebooks/ runs top to bottom (the README points users at them); the quick start learns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.cli import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path: Path) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    # Raises CellExecutionError, with the failing cell and its traceback, if any cell fails.
    nbclient.NotebookClient(
        notebook, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, "the curves and the confusion matrix were not drawn"
    if path.stem == "quickstart":
        # The learning check: real 8x8 digits at 32 px, the best checkpoint on validation data, tested once.
        text = "".join(o.get("text", "") for o in outputs)
        accuracy = float(re.search(r"'test/acc': ([0-9.]+)", text).group(1))
        assert accuracy >= 0.90, text[-2000:]
