"""The one exception type for mistakes a user can make in a config, a flag or on disk.

`vitlit.cli.main` prints a `ConfigError` as a single line and exits with status 2, so a bad value never ends in a
traceback. Raise it as early as the value is known (in `__init__` where possible), with the offending value and the
fix in one sentence.
"""


class ConfigError(ValueError):
    """A user-caused problem (bad value, bad path, incompatible options), reported without a traceback."""
