"""The constrained number types of typed signatures, which moved to `vitlit.config`: this name stays for forks."""

from vitlit.config import (
    Fraction,
    NonNegativeFloat,
    NonNegativeInt,
    OpenUnitInterval,
    PositiveFloat,
    PositiveInt,
    Probability,
    Rate,
    as_builtin,
)

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
