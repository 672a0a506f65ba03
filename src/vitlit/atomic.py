"""Files that appear whole or not at all: written beside their target, flushed, then swapped in with ``os.replace``.

A reader (a resume, a TensorBoard tab, a server loading an export) sees the old file or the new one, never a part,
and a kill or a full disk during the write leaves the old file as it was. The temporary file is hidden (a leading
dot) so that globs such as ``*.ckpt`` never pick it up, and it gets the permissions of the file it replaces, or of
any new file (the umask), not ``mkstemp``'s owner-only 0600.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; when the block ends without an error, it becomes ``target``.

    The block writes the file at the yielded path (any writer: ``torch.save``, ``onnx.save``, ``open``). On an error
    the temporary file is removed and ``target`` is untouched.
    """
    target = Path(target)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with tmp.open("rb+") as f:  # durable before it is visible: a power cut after the swap keeps the new file
            os.fsync(f.fileno())
        # A replaced file keeps its permissions (a private model stays private); a new one gets the umask's.
        os.chmod(tmp, target.stat().st_mode & 0o777 if target.exists() else 0o666 & ~umask())
        # Windows refuses to replace a file open anywhere (a `vitlit test` reading last.ckpt while the fit saves the
        # next one): tried again for up to 3 s, as the reader is done within moments.
        for wait in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, None):
            try:
                os.replace(tmp, target)
                break
            except PermissionError as err:
                if wait is None:
                    raise PermissionError(f"{target} could not be replaced: another process holds it open; close "
                                          f"that process and run this again") from err  # fmt: skip
                time.sleep(wait)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through `replacing`."""
    with replacing(path) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def umask() -> int:
    """The process's umask (reading it means setting it; it is put straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; a no-op elsewhere)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
