"""Print vitlit's code lines (without blanks, comments and docstrings) per module and per part.

The core is what a fork reads (model, data contract and data sets, the CLI); the opt-in parts are the subpackages
checks/, fast/, runs/, tools/ and transfer/. The README states these counts; tests/test_layout.py keeps them within
bounds.

    python scripts/code_size.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vitlit"
PARTS = ("checks", "fast", "runs", "tools", "transfer")


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


def main() -> None:
    """Print the table."""
    table = sizes()
    for part in ("core", *PARTS):
        modules = table.get(part, {})
        print(f"{part}: {sum(modules.values())} code lines in {len(modules)} modules")
        for name, count in sorted(modules.items(), key=lambda item: -item[1]):
            print(f"  {count:5d}  {name}")
    print(f"total: {sum(sum(m.values()) for m in table.values())}", file=sys.stdout)


if __name__ == "__main__":
    main()
