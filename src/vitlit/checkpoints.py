"""What a failed save or load of a checkpoint means: a damaged file, or a full disk.

Finding a run's checkpoints, choosing and checking the one a run starts from (``--ckpt_path last|auto``) and the
command that resumes a stopped run are the opt-in part `vitlit.runs`; without it ``--ckpt_path`` goes to Lightning
as it is.
"""

from __future__ import annotations

import errno
import pickle
import zipfile

# What torch.load raises on a truncated, foreign or tampered-with file.
UNREADABLE = (RuntimeError, EOFError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile)


def disk_full(err: BaseException) -> str | None:
    """What ran out, if ``err`` (or an error it was raised while handling) is a write refused for lack of space.

    torch's zip writer reports a failed write as ``RuntimeError: ... unexpected pos``; the OSError behind it is only
    its ``__context__``.
    """
    reasons = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
               errno.EFBIG: "the file is larger than this process may write (ulimit -f)"}  # fmt: skip
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in reasons:
            return reasons[err.errno]
        err = err.__cause__ or err.__context__
    return None
