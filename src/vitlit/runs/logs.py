"""The old home of `SkippedImages`, now in `vitlit.runs.records`: configs saved before name this module.

Kept so that they load as they are; ``scripts/upgrade_config.py`` rewrites them to the new path, and new runs save it.
"""

from vitlit.runs.records import SkippedImages

__all__ = ["SkippedImages"]
