"""Print vitlit's code lines (without blanks, comments and docstrings): per module, per part, and what a run loads.

The size that matters is what a run loads: the modules of vitlit in ``sys.modules`` after a default digits fit (one
short epoch, with validation and checkpoints; the same modules as the full recipe). The folders say where code
lives: the core (model, data, CLI, run folders) and the opt-in parts regularize/, runs/, tools/ and transfer/.

    python scripts/code_size.py          # per part and module, then the default run's modules and total
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "vitlit"
PARTS = ("regularize", "runs", "tools", "transfer")
#: A default digits fit, cut to one short epoch: what it loads is what the recipe loads.
DEFAULT_FIT = ["fit", "--config", str(ROOT / "configs" / "digits.yaml"), "--trainer.max_epochs", "1",
               "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2",
               "--model.scheduler.init_args.warmup_steps", "1"]  # fmt: skip
_LOADED = """
import json, sys
from vitlit.cli import main
main(sys.argv[1:])
print("LOADED " + json.dumps({m: getattr(sys.modules[m], "__file__", None) for m in sys.modules
                              if m == "vitlit" or m.startswith("vitlit.")}))
"""


def code_lines(path: Path) -> int:
    """Lines of ``path`` that hold code: not blank, not only a comment, not part of a docstring."""
    source = path.read_text(encoding="utf-8")
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines = enumerate(source.splitlines(), 1)
    return sum(1 for i, line in lines if line.strip() and not line.strip().startswith("#") and i not in docstrings)


def part_of(path: Path) -> str:
    """``core`` or the name of the opt-in part that holds ``path``."""
    first = path.relative_to(PACKAGE).parts[0]
    return first if first in PARTS else "core"


def sizes() -> dict[str, dict[str, int]]:
    """Code lines by part, then by module path relative to the package."""
    table: dict[str, dict[str, int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        table.setdefault(part_of(path), {})[str(path.relative_to(PACKAGE))] = code_lines(path)
    return table


def loaded_by(args: list[str], env: dict[str, str] | None = None) -> dict[str, int]:
    """Code lines of every vitlit module a run of ``args`` loads (in a fresh process), by module name."""
    with tempfile.TemporaryDirectory() as root:
        command = [sys.executable, "-c", _LOADED, *args, "--trainer.default_root_dir", root]
        done = subprocess.run(
            command, capture_output=True, text=True, env=env or {**os.environ, "OMP_NUM_THREADS": "1"}
        )
    line = next((x for x in done.stdout.splitlines() if x.startswith("LOADED ")), None)
    if line is None:
        raise RuntimeError(f"the run failed:\n{done.stderr[-3000:]}")
    files = json.loads(line[len("LOADED ") :])
    return {name: code_lines(Path(file)) for name, file in sorted(files.items()) if file}


def main() -> None:
    """Print the tables."""
    table = sizes()
    for part in ("core", *PARTS):
        modules = table.get(part, {})
        print(f"{part}: {sum(modules.values())} code lines in {len(modules)} modules")
        for name, count in sorted(modules.items(), key=lambda item: -item[1]):
            print(f"  {count:5d}  {name}")
    print(f"total: {sum(sum(m.values()) for m in table.values())}")
    run = loaded_by(DEFAULT_FIT)
    print(f"a default digits fit loads {len(run)} modules:")
    for name, count in sorted(run.items(), key=lambda item: -item[1]):
        print(f"  {count:5d}  {name}")
    print(f"default run: {sum(run.values())} code lines in {len(run)} modules")


if __name__ == "__main__":
    main()
