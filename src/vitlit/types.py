"""Constrained number types for typed signatures: jsonargparse checks them when it parses, before anything runs.

A range written as a type is checked once, by the parser, with a one-line message that names the key and the
value, and ``--help`` shows it; hand-written checks remain only where several settings must agree (`ConfigError`).
Python callers pass ordinary numbers; the parser passes instances of these ``int``/``float`` subclasses, which a
class stores as plain numbers (`as_builtin`), so that its checkpoints stay readable.
"""

from __future__ import annotations

from typing import Any

from jsonargparse.typing import (
    ClosedUnitInterval,
    NonNegativeFloat,
    NonNegativeInt,
    OpenUnitInterval,
    PositiveFloat,
    PositiveInt,
    restricted_number_type,
)


def as_builtin(value: Any) -> Any:
    """``value`` as a plain ``int``/``float`` if it is a constrained number (e.g. ``PositiveInt(3)``), else as it is.

    The parser hands over instances of these int/float subclasses. Stored in a module, they would travel into the
    hyperparameters and states of every checkpoint, which ``torch.load(weights_only=True)`` then refuses to read; so
    the classes keep plain numbers.
    """
    if isinstance(value, bool) or type(value) in (int, float) or not isinstance(value, (int, float)):
        return value
    return int(value) if isinstance(value, int) else float(value)


#: A probability: 0 to 1, both included.
Probability = ClosedUnitInterval
#: A rate that must stay below 1 (dropout, stochastic depth, label smoothing): 0 included, 1 excluded.
Rate = restricted_number_type("Rate", float, [(">=", 0), ("<", 1)])
#: A share of something that must not be empty: above 0, at most 1 (a layer-decay factor, a fraction of the run).
Fraction = restricted_number_type("Fraction", float, [(">", 0), ("<=", 1)])

__all__ = [
    "Fraction",
    "NonNegativeFloat",
    "NonNegativeInt",
    "OpenUnitInterval",
    "PositiveFloat",
    "PositiveInt",
    "Probability",
    "Rate",
    "as_builtin",
]
