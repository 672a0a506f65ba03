"""The core never imports an opt-in part, and trains without them; the code-size script reports every module."""

from __future__ import annotations

import ast
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import torch
from helpers.cli import DIGITS_CONFIG, ROOT

PACKAGE = ROOT / "src" / "vitlit"
PARTS = ("checks", "fast", "runs", "tools", "transfer")
sys.path.insert(0, str(ROOT / "scripts"))
import code_size  # noqa: E402


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function, relative imports resolved."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x: relative to the module's package
                base = ".".join(
                    ("vitlit", *path.relative_to(PACKAGE).parent.parts)[: None if node.level == 1 else 1 - node.level]
                )
                found.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                found.add(node.module)
    return found


def test_the_core_imports_no_opt_in_part() -> None:
    core = [p for p in PACKAGE.rglob("*.py") if code_size.part_of(p) == "core"]
    assert len(core) >= 15  # the walk found the package
    offending = {
        str(path.relative_to(PACKAGE)): sorted(
            m for m in _imports(path) if m.split(".")[:2][-1] in PARTS and m.startswith("vitlit.")
        )
        for path in core
    }
    assert not {k: v for k, v in offending.items() if v}, offending


@pytest.mark.slow  # a fresh process and a short fit: about 25 s
def test_the_core_alone_trains_the_digits_recipe(tmp_path: Path, digits_dir: Path) -> None:
    # A fork that deletes the opt-in parts: the package copied without them, run in a fresh process that imports it
    # from the copy (first on the path); the recipe names none of them, and nothing else may need them.
    copy = tmp_path / "pkg" / "vitlit"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", *PARTS))
    assert not any((copy / part).exists() for part in PARTS)
    assert "vitlit." + "fast" not in DIGITS_CONFIG.read_text() and "vitlit.runs" not in DIGITS_CONFIG.read_text()
    root = tmp_path / "runs"
    code = (
        "import sys, vitlit; from vitlit.cli import main\n"
        f"assert vitlit.__file__.startswith({str(copy)!r}), vitlit.__file__\n"
        f"cli = main(sys.argv[1:])\n"
        f"assert not [m for m in sys.modules if m.split('.')[:2] in [['vitlit', p] for p in {PARTS!r}]]\n"
        "print('VAL_ACC', float(cli.trainer.callback_metrics['val/acc']))\n"
    )
    args = ["fit", "--config", str(DIGITS_CONFIG), "--data.root", str(digits_dir), "--trainer.max_epochs", "2",
            "--trainer.default_root_dir", str(root), "--data.val_size", "200"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(copy.parent), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "VAL_ACC" in done.stdout
    # Lightning's own run folder and checkpoint, without vitlit's run operations: the core trained and saved.
    [ckpt] = list(root.rglob("last.ckpt"))
    state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    assert state and all(torch.isfinite(v).all() for v in state.values())
    assert "data path" not in done.stderr  # the fast part's line: the per-image DataLoader ran


def test_the_code_size_script_counts_every_module() -> None:
    table = code_size.sizes()
    assert set(table) == {"core", *PARTS}
    counted = {name for modules in table.values() for name in modules}
    assert counted == {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")}
    assert table["core"]["model.py"] > 100  # counts code, not nothing


def test_the_core_stays_within_the_sizes_a_reader_can_hold() -> None:
    core = code_size.sizes()["core"]
    assert sum(core.values()) <= 1600, "move the new code into an opt-in part, or make room in the core"
    assert core["model.py"] <= 250 and core["data/base.py"] <= 250 and core["cli.py"] <= 150, core


def test_the_hooks_skip_a_part_deleted_from_the_copy_but_not_a_broken_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from importlib.metadata import EntryPoint

    from vitlit.config import load_parts

    def parts(*values: str) -> tuple:
        return load_parts([EntryPoint(f"p{i}", value, "vitlit.hooks") for i, value in enumerate(values)])

    # A part deleted from a fork whose installed metadata still names it: skipped.
    checks = importlib.import_module("vitlit.checks.hooks")
    assert parts("vitlit.checks.hooks", "vitlit.deleted_part.hooks") == (checks,)
    # A part that is there but needs a package that is not: the error is the user's to see.
    (tmp_path / "part_with_a_missing_dependency.py").write_text("import a_package_nobody_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="a_package_nobody_installed"):
        parts("part_with_a_missing_dependency")


#: What rots in a comment or docstring: a measured speed or duration, a date, a library's version, a GPU's name.
_ROTS = re.compile(
    r"\d[\d,.]*\s*k?\s*(images?/s|img/s|it/s|images per second|ms\b|seconds?\b|minutes?\b|x faster|GB/s|MB/s)"
    r"|\b20\d\d-\d\d-\d\d\b"
    r"|\b(torch|lightning|timm|torchvision|jsonargparse|onnxruntime|PyTorch|Lightning)\s*(==|>=|<=|>|<)?\s*\(?\d+\.\d+"
    r"|\b(A100|H100|H200|V100|RTX|T4|L4)\b"
)
#: Where such words are the subject: the private-API module records the versions it was checked against (issue 23),
#: and the throughput monitor's table of chip peaks is keyed by chip.
_ROT_EXEMPT = {"private.py", "runs/monitor.py"}


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every comment and docstring of a module."""
    source = path.read_text(encoding="utf-8")
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.extend((node.body[0].lineno + i, line) for i, line in enumerate(doc.splitlines()))
    return found


def test_comments_and_docstrings_hold_no_figures_dates_versions_or_gpu_names() -> None:
    """Those belong in benchmarks/RESULTS.md and the README, which are dated; in the code they go stale unseen."""
    stale = [
        f"{path.relative_to(PACKAGE)}:{line}: {text.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in _ROT_EXEMPT
        for line, text in _comments_and_docstrings(path)
        if _ROTS.search(text)
    ]
    assert not stale, "\n".join(stale)
