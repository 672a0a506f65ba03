"""The old home of `PredictionWriter`, now in `vitlit.runs.records`: configs saved before name this module.

Kept so that they load as they are; ``scripts/upgrade_config.py`` rewrites them to the new path, and new runs save it.
"""

from vitlit.runs.records import PredictionWriter

__all__ = ["PredictionWriter"]
