"""Print the path a reader walks: the vitlit files and functions a digits fit calls, in two windows.

``start`` is every vitlit function called from ``main`` until the first ``training_step`` begins (parsing, checks,
the data, the model, the run folder, Lightning's set-up hooks); ``step`` is every one called from the first
``training_step`` to the second (the step itself, its hooks, the next batch). A function counts once per window,
wherever it is called from; module bodies (imports) and comprehensions do not count. The profile is Python's own
(``sys.setprofile``), so nothing in vitlit is instrumented for it.

    python scripts/main_path.py           # the two windows, file by file, in the order they were first called
    python scripts/main_path.py --json    # the same as JSON: {"start": {file: [functions]}, "step": {...}}
    python scripts/main_path.py --tour    # the tour in CONTRIBUTING.md (tests/test_layout.py keeps the two equal)
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from inspect import CO_NEWLOCALS
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: A digits fit cut to three batches: the windows need two training steps, and nothing later.
FIT = ["fit", "--config", str(ROOT / "configs" / "digits.yaml"), "--trainer.max_epochs", "1",
       "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1",
       "--model.scheduler.init_args.warmup_steps", "1", "--trainer.enable_progress_bar", "false"]  # fmt: skip


def profile(args: list[str]) -> dict[str, dict[str, list[str]]]:
    """Run ``vitlit.cli.main(args)`` in this process; return each window's functions by file, in call order."""
    import vitlit
    from vitlit.cli import main
    from vitlit.data.digits import complete_copy, default_digits_root, write_once

    if not complete_copy(default_digits_root()):  # the first fit on a machine writes the digits: not the path
        write_once(default_digits_root())

    package = str(Path(vitlit.__file__).parent) + os.sep
    windows: dict[str, dict[str, list[str]]] = {"start": {}, "step": {}}
    state = {"window": "start", "steps": 0}

    def seen(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(package) or not code.co_flags & CO_NEWLOCALS or code.co_name[0] == "<":
            return  # another library's code, a module or class body (an import), or a comprehension
        if code.co_name == "training_step":
            state["steps"] += 1
            state["window"] = {1: "step", 2: "done"}.get(state["steps"], "done")
        if state["window"] == "done":
            return
        file = os.path.relpath(code.co_filename, package).replace(os.sep, "/")
        functions = windows[state["window"]].setdefault(file, [])
        name = getattr(code, "co_qualname", code.co_name)  # Python 3.10 has no qualified names
        if name not in functions:
            functions.append(name)

    sys.setprofile(seen)
    try:
        main(args)
    finally:
        sys.setprofile(None)
    return windows


def measure(args: list[str] = FIT) -> tuple[dict[str, dict[str, list[str]]], dict[str, str]]:
    """`profile` of a fit in a fresh process (nothing imported or cached before it), with a run folder of its own.

    Returns:
        The two windows, and the file of each vitlit module the fit loaded (`scripts/code_size.py` counts its lines).
    """
    with tempfile.TemporaryDirectory() as root:
        command = [sys.executable, __file__, "--json", *args, "--trainer.default_root_dir", root]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [x.split(" ", 1) for x in done.stdout.splitlines() if x.startswith(("WINDOWS ", "LOADED "))]
    printed = dict(lines)
    if len(printed) != 2:
        raise RuntimeError(f"the run failed:\n{done.stderr[-3000:]}")
    return json.loads(printed["WINDOWS"]), json.loads(printed["LOADED"])


def counts(window: dict[str, list[str]]) -> tuple[int, int]:
    """A window's files and functions."""
    return len(window), sum(len(functions) for functions in window.values())


def imports(package: Path = ROOT / "src" / "vitlit") -> dict[str, set[str]]:
    """Each vitlit module and the vitlit modules it imports, at the top or inside a function.

    ``from a import b`` counts as importing ``a.b`` where that is a module, else ``a``. A package a module sits in is
    not counted: Python imports it first, but it is not a dependency the module's author chose.
    """
    names = {
        ".".join(("vitlit", *path.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
        for path in package.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        name = ".".join(("vitlit", *path.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*here.split(".")[: len(here.split(".")) - node.level + 1], *filter(None, [base])])
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names)
        graph[name] = {module for module in found if module in names and module != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: each group of modules that import each other, directly or around a loop."""
    # Tarjan's strongly connected components, iterative: each component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            nxt = next((e for e in edges if e not in index or e in stack), None)
            if nxt is not None:
                if nxt in index:
                    low[node] = min(low[node], index[nxt])
                else:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def tour(windows: dict[str, dict[str, list[str]]]) -> str:
    """The two windows as Markdown: the start, file by file in the order a fit first calls them, then the step."""
    lines = []
    for name, title in (("start", "From `main` to the first training step"), ("step", "One training step")):
        files, functions = counts(windows[name])
        lines.append(f"{title} ({functions} functions in {files} files):")
        lines.append("")
        for file, called in windows[name].items():
            lines.append(f"- `{file}`: {', '.join(f'`{f}`' for f in called)}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    """Print both windows, their tour (``--tour``), or their JSON (``--json``; `measure` adds a fit's arguments)."""
    if sys.argv[1:2] == ["--json"] and len(sys.argv) == 2:  # the default fit, measured in a fresh process
        print(json.dumps(measure()[0]))
        return
    if sys.argv[1:2] == ["--json"]:  # measure()'s own call: the fit's arguments follow, profiled in this process
        windows = profile(sys.argv[2:])
        print("WINDOWS " + json.dumps(windows), flush=True)
        loaded = {m: getattr(sys.modules[m], "__file__", None) for m in sys.modules if m.split(".")[0] == "vitlit"}
        print("LOADED " + json.dumps(loaded), flush=True)
        return
    windows, _ = measure()
    if sys.argv[1:2] == ["--tour"]:
        print(tour(windows), end="")
        return
    for name, title in (("start", "main -> the first training_step"), ("step", "one step (the next batch included)")):
        files, functions = counts(windows[name])
        print(f"{title}: {functions} functions in {files} files")
        for file, called in windows[name].items():
            print(f"  {file} ({len(called)}): {', '.join(called)}")
    loops = cycles(imports())
    print(f"import cycles (imports inside functions counted): {len(loops)}")
    for loop in loops:
        print(f"  {' <-> '.join(loop)}")


if __name__ == "__main__":
    main()
