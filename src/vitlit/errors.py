"""The exception types vitlit reports as one line instead of a traceback.

`vitlit.cli.main` prints a `ConfigError` as a single line and exits with status 2, so a bad value never ends in a
traceback. Raise it as early as the value is known (in `__init__` where possible), with the offending value and the
fix in one sentence. A `CheckFailed` is a result that failed vitlit's own check of it (an export whose outputs differ
from PyTorch's): one line, status 1. A `TrainingHalted` is a fit stopped on purpose because going on would waste it
(a NaN loss): Lightning saves ``last.ckpt`` on the way out, and the CLI ends with one line, the command that resumes
the run, and status 1.

What the system says of a path it refuses is here too, by its errno, so that the CLI's one line (`vitlit.exits`) and a
data format's wrapper (`vitlit.data.table`) tell those refusals from bugs by the same list.
"""

import errno

#: A path the system refuses to read or write, and the fix to say with it.
PATH_REFUSED = {errno.ENAMETOOLONG: "is longer than the file system allows; give shorter paths",
                errno.EACCES: "cannot be read or written by this user (permission denied); check its permissions",
                errno.EPERM: "cannot be read or written by this user (operation not permitted); check its permissions",
                errno.EROFS: "is on a read-only file system; choose a folder on a writable disk"}  # fmt: skip
#: A write refused for space: what ran out, and its fix (a file-size limit is not fixed by freeing space).
NO_SPACE = {errno.ENOSPC: ("the disk is full", "free some space or choose a folder on a larger disk"),
            errno.EDQUOT: ("the disk quota is used up", "free some of the quota or choose a folder on another disk"),
            errno.EFBIG: ("the file is larger than this process may write (its ulimit -f)",
                          "raise the limit (ulimit -f unlimited) in the shell that starts it")}  # fmt: skip


class ConfigError(ValueError):
    """A user-caused problem (bad value, bad path, incompatible options), reported without a traceback."""


class CheckFailed(RuntimeError):
    """A result failed vitlit's own check (the file must not be used), or a writer was stopped from outside.

    One line and status 1; a killed writer process is the second kind.
    """


class TrainingHalted(RuntimeError):
    """A fit stopped on purpose (a NaN/inf loss); its message says where and what to change."""
