"""The standard streams, whose reader can go away: a pipe's (``vitlit fit | head``) or a closed terminal's (EIO).

A write to either then fails, and so would every line after and Python's flush at exit: the stream is pointed at
the null device instead, and what stops the run is said in its run card.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TextIO

from vitlit.text import clean


def stream_gone(stream: TextIO | None = None) -> None:
    """Point ``stream`` (the standard output) at the null device, its reader being gone."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: a stream without a descriptor (a test's capture)
        os.dup2(os.open(os.devnull, os.O_WRONLY), (stream or sys.stdout).fileno())


def tell(*lines: str) -> None:
    """Print ``lines`` to the standard error, each through `vitlit.text.clean`; nowhere once a terminal is gone."""
    try:
        for line in lines:
            print(clean(line), file=sys.stderr, flush=True)
    except OSError:
        stream_gone(sys.stderr)
