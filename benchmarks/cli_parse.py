"""What a command costs before anything runs: LightningCLI's parsers built, the command line parsed and checked.

Every ``vitlit`` command pays it, and so does every test that runs the CLI in-process. The command timed is a digits
``fit`` that the check phase refuses (``--trainer.max_epochs -5``): parse and checks, no data read. Printed: the CPU
seconds of one command (``time.process_time``, so that other jobs on the machine move it less), and of its two
LightningCLI phases, ``setup_parser`` (the parsers) and ``parse_arguments`` (jsonargparse's parse, vitlit's checks).

    python benchmarks/cli_parse.py                # the mean of 10 commands after one to warm up
    python benchmarks/cli_parse.py --repeats 30
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningCLI

from vitlit.cli import main

DIGITS = Path(__file__).resolve().parents[1] / "configs" / "digits.yaml"


def timed(spent: dict[str, float], name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, adding the CPU seconds of each call to ``spent[name]``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return method(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.process_time() - start

    return wrapper


def refused_fit() -> None:
    """One digits fit that the check phase refuses: its output swallowed, its exit caught."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        main(["fit", "--config", str(DIGITS), "--trainer.max_epochs", "-5"])


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="commands to average over, after one to warm up")
    repeats = parser.parse_args().repeats
    spent: dict[str, float] = {}
    for name in ("setup_parser", "parse_arguments"):  # LightningCLI's public phases (VitLitCLI calls them)
        setattr(LightningCLI, name, timed(spent, name, getattr(LightningCLI, name)))
    refused_fit()
    spent.clear()
    start = time.process_time()
    for _ in range(repeats):
        refused_fit()
    total = (time.process_time() - start) / repeats
    phases = ", ".join(f"{name} {seconds / repeats:.3f}" for name, seconds in spent.items())
    print(f"one command: {total:.3f} s of CPU ({phases}; mean of {repeats})")


if __name__ == "__main__":
    main_()
