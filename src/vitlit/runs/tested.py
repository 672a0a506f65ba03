"""A run's card read back after its fit: by a resume, which goes on with it, and by ``test``, which adds its score.

Loaded by resumes and tests only (`vitlit.runs.run_card.RunCard`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vitlit.runs.run_card import CARD, write_card


def read_card(run_dir: Path) -> dict[str, Any]:
    """The card of the run in ``run_dir``, or ``{}`` if it has none (or an unreadable one)."""
    try:
        card = json.loads((run_dir / CARD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return card if isinstance(card, dict) else {}


def record_test(ckpt: Path, test_acc: float) -> None:
    """Put ``test_acc`` on the card of the run whose checkpoint ``ckpt`` was tested (where the run has a card)."""
    run = ckpt.resolve().parent.parent
    card = read_card(run)
    if card:
        card["test_acc"], card["test_checkpoint"] = test_acc, ckpt.name  # the last tested; each one's below
        card.setdefault("test_acc_by_checkpoint", {})[ckpt.name] = test_acc
        write_card(run, card)
