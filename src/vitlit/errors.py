"""The exception types vitlit reports as one line instead of a traceback.

`vitlit.cli.main` prints a `ConfigError` as a single line and exits with status 2, so a bad value never ends in a
traceback. Raise it as early as the value is known (in `__init__` where possible), with the offending value and the
fix in one sentence. A `CheckFailed` is a result that failed vitlit's own check of it (an export whose outputs differ
from PyTorch's): one line, status 1. A `TrainingHalted` is a fit stopped on purpose because going on would waste it
(a NaN loss): Lightning saves ``last.ckpt`` on the way out, and the CLI ends with one line, the command that resumes
the run, and status 1.
"""


class ConfigError(ValueError):
    """A user-caused problem (bad value, bad path, incompatible options), reported without a traceback."""


class CheckFailed(RuntimeError):
    """A result failed vitlit's own check (the file must not be used), or a writer was stopped from outside.

    One line and status 1; a killed writer process is the second kind.
    """


class TrainingHalted(RuntimeError):
    """A fit stopped on purpose (a NaN/inf loss); its message says where and what to change."""
