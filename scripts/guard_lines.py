"""Count the core's guard lines: code that refuses input rather than doing the run's work (issue 54's measure).

A guard line is a code line (as `scripts/code_size.py` counts them: no blanks, comments or docstrings) of a construct
that refuses, whatever its function is called: an ``if`` block that ends in ``raise`` (without an ``else``), an
``assert``, a ``raise`` statement, an ``except`` handler that raises, and a ``return`` of an exception built for the
caller to raise (``return ConfigError(...)``, as `vitlit.exits` builds its one lines). A check's other lines (the
model a check builds, the numbers it compares) are the run's work and are not counted. The core is ``src/vitlit``
without its opt-in parts (regularize/, runs/, tools/, transfer/). An AST count, so it is the same on any machine.

    python scripts/guard_lines.py                 # this checkout: the core's total, then the main path's files
    python scripts/guard_lines.py <other checkout> # e.g. a git worktree of an older commit, to compare
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from code_size import PARTS, code_lines

#: The files a forker reads first: the run's main path, and the data formats.
MAIN_PATH = ("cli.py", "model.py", "data/base.py", "data/table.py", "data/folder.py", "data/csv_table.py",
             "data/hf.py")  # fmt: skip


def _code_line_numbers(source: str, tree: ast.Module) -> set[int]:
    """The numbers of ``source``'s code lines (`code_lines`'s rule)."""
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = getattr(first, "value", None)
            if isinstance(first, ast.Expr) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines = enumerate(source.splitlines(), 1)
    return {i for i, line in lines if line.strip() and not line.strip().startswith("#") and i not in docstrings}


def _returns_an_error(node: ast.AST) -> bool:
    """Whether ``node`` is ``return SomeError(...)``: an exception built for the caller to raise."""
    value = getattr(node, "value", None) if isinstance(node, ast.Return) else None
    name = getattr(getattr(value, "func", None), "id", "") if isinstance(value, ast.Call) else ""
    return name.endswith(("Error", "Exception", "Failed", "Halted"))


def guard_lines(path: Path) -> tuple[int, int]:
    """``(guard lines, code lines)`` of one module."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    guards: set[int] = set()
    for node in ast.walk(tree):
        refuses = isinstance(node, ast.If) and not node.orelse and isinstance(node.body[-1], ast.Raise)
        handler = isinstance(node, ast.ExceptHandler) and any(isinstance(n, ast.Raise) for n in ast.walk(node))
        if refuses or handler or isinstance(node, (ast.Raise, ast.Assert)) or _returns_an_error(node):
            guards.update(range(node.lineno, node.end_lineno + 1))
    code = _code_line_numbers(source, tree)
    assert len(code) == code_lines(path)  # the same rule as code_size.py
    return len(code & guards), len(code)


def main() -> None:
    """Print the core's guard lines, and those of each file of the main path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    package = Path(parser.parse_args().checkout) / "src" / "vitlit"
    counts = {f: guard_lines(f) for f in sorted(package.rglob("*.py")) if f.relative_to(package).parts[0] not in PARTS}
    guards, code = sum(g for g, _ in counts.values()), sum(c for _, c in counts.values())
    print(f"core: {guards} guard lines of {code} code lines ({guards / code:.0%})")
    for name in MAIN_PATH:
        if (package / name).is_file():
            g, c = counts[package / name]
            print(f"  {name}: {g} of {c}")


if __name__ == "__main__":
    main()
