"""The old home of `RNGStateCheckpoint`, now in `vitlit.runs.checkpoint_io`: configs saved before name this module.

Kept so that they load as they are; ``scripts/upgrade_config.py`` rewrites them to the new path, and new runs save it.
"""

from vitlit.runs.checkpoint_io import RNGStateCheckpoint

__all__ = ["RNGStateCheckpoint"]
