"""Counters of what code does, for tests that assert what a speed stands for (tests count, benchmarks time).

CI runs two test files at once on two cores, so any clock in a test reads the other file's load too. What a speed
stands for can be counted instead, and a count reads the same on a busy machine: the kernels PyTorch runs
(`Kernels`), the Python functions called (`python_calls`), the calls a method gets (`calls_to`), the
lines a reader takes from a file (`lines_read`).
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

#: Operators that only make a view or an alias of a tensor: no kernel reads or writes its data.
_VIEWS = ("aten.detach.", "aten.view.", "aten.alias.", "aten._unsafe_view.", "aten.t.", "aten.expand.")


class Kernels(TorchDispatchMode):
    """Count the ATen operators that run inside ``with Kernels() as kernels:``, by name, views left out.

    Each counted operator is a kernel launch on a GPU (a foreach operator is one for a whole list of tensors), so the
    count is what a step costs the device beside its arithmetic, whatever the machine is doing.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = str(func)
        if not name.startswith(_VIEWS):
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """How many kernels ran."""
        return sum(self.ops.values())


def python_calls(fn: Callable[[], object]) -> int:
    """How many Python and C functions ``fn()`` calls, its callees' callees included (``sys.setprofile``'s events)."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        count += event in ("call", "c_call")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


@contextlib.contextmanager
def calls_to(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> Iterator[list[tuple[tuple, dict]]]:
    """Record ``(args, kwargs)`` of every call of ``owner.name`` (a method or a function) inside the block; it runs."""
    calls: list[tuple[tuple, dict]] = []
    original = getattr(owner, name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(owner, name, recorded)
        yield calls


class _Lines:
    """A text file that counts the lines its reader takes (iterated, ``readline``; ``read`` counts all it returns)."""

    def __init__(self, file: Any) -> None:
        self.file, self.count = file, 0

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = next(self.file)
        self.count += 1
        return line

    def readline(self, *args: Any) -> str:
        line = self.file.readline(*args)
        self.count += bool(line)
        return line

    def read(self, *args: Any) -> str:
        text = self.file.read(*args)
        self.count += text.count("\n")
        return text

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


@contextlib.contextmanager
def lines_read(monkeypatch: pytest.MonkeyPatch, path: Path) -> Iterator[_Lines]:
    """Count the lines read from ``path`` opened with ``Path.open`` inside the block (the last file opened counts)."""
    original, counted = Path.open, _Lines(None)

    def opened(self: Path, *args: Any, **kwargs: Any) -> Any:
        file = original(self, *args, **kwargs)
        if self == path:
            counted.file, counted.count = file, 0
            return counted
        return file

    with monkeypatch.context() as patch:
        patch.setattr(Path, "open", opened)
        yield counted
