"""Folders vitlit writes whole (an export's timm folder, a prepared data set) and replaces only where it wrote them.

A folder is written beside its destination (a hidden sibling), then renamed into place, so that a reader sees the old
folder or the new one, never a mix, and a kill leaves the old one as it was. Inside, a manifest (``MANIFEST`` names
its file) lists every file with its SHA-256: ``--overwrite`` replaces a folder only where each file in it is one the
manifest lists, unchanged, and nothing else is there. A marker file proves nothing about the files beside it; the
manifest does. The folder keeps its permissions across a replacement.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vitlit.atomic import fsync_dir, umask
from vitlit.errors import ConfigError
from vitlit.text import say, shown


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB pieces."""
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _entries(folder: Path, manifest: str) -> Iterator[tuple[str, Path]]:
    """Each entry under ``folder`` but the manifest: (its path relative to the folder, its path); links not followed."""
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            relative = path.relative_to(folder).as_posix()
            if relative != manifest:
                yield relative, path


def write_manifest(folder: Path, manifest: str) -> None:
    """List every file under ``folder`` with its SHA-256 in ``folder/manifest``."""
    files = {rel: digest(path) for rel, path in _entries(folder, manifest) if path.is_file()}
    (folder / manifest).write_text(json.dumps({"files": files}, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def check_replaceable(folder: Path, manifest: str, flag: str, writer: str) -> None:
    """Refuse to replace ``folder`` unless every entry in it is a file its manifest lists, with the same bytes.

    Args:
        folder: An existing folder that ``--overwrite`` would replace.
        manifest: The manifest's file name inside it.
        flag: The option that named the folder, for the message (``--output``).
        writer: What writes such folders, for the message (``vitlit export``).

    Raises:
        ConfigError: For a folder without a readable manifest, or holding anything the manifest does not list as it is.
    """
    try:
        listed = json.loads((folder / manifest).read_text(encoding="utf-8"))["files"]
        if not isinstance(listed, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):  # no manifest, or not one of ours: nothing is listed
        listed = {}
    folders = {parent.as_posix() for rel in listed for parent in Path(rel).parents}  # the folders it wrote files in
    other = []
    for relative, path in _entries(folder, manifest):
        if (
            path.is_symlink()
            or (path.is_dir() and relative not in folders)
            or (not path.is_dir() and (not path.is_file() or relative not in listed))
        ):
            other.append(relative)
        elif path.is_file() and digest(path) != listed[relative]:
            other.append(f"{relative} (changed)")
    if other or not listed:
        shown_other = ", ".join(shown(name) for name in sorted(other)[:3]) + (" ..." if len(other) > 3 else "")
        what = f"holds {shown_other}, which" if other else "is a folder"
        raise ConfigError(f"{flag} {folder} {what} no {writer} wrote; --overwrite true replaces only an earlier "
                          f"{writer}'s folder as it wrote it: choose a new folder's name.")  # fmt: skip


def remove_stale(output: Path) -> None:
    """Remove the staged copies beside ``output`` that a killed writer left (`staged_folder`), and say so.

    A copy is stale where the process its name records is gone; one of a live process (another write under way) is
    left alone. Not on Windows, where ``os.kill`` would end the process it asks about.
    """
    if os.name == "nt":
        return
    pattern = re.compile(rf"\.{re.escape(output.name)}\.(\d+)\.\w+\.partial")
    for entry in output.parent.iterdir() if output.parent.is_dir() else ():
        found = pattern.fullmatch(entry.name)
        if found is None or not entry.is_dir() or entry.is_symlink():
            continue
        try:
            os.kill(int(found.group(1)), 0)  # signal 0: is it alive?
            continue
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
            say(f"vitlit: removed {entry}, an unfinished copy that a stopped run left", error=True)
        except (OSError, OverflowError):  # another user's process (alive), or no number a process has
            continue


@contextlib.contextmanager
def folders_made_for(folder: Path) -> Iterator[None]:
    """Create ``folder`` and its missing parents; on an error in the block, remove those it made, innermost first.

    A refused or stopped export or prepare leaves no empty folders where it would have written.
    """
    made = list(itertools.takewhile(lambda p: not p.exists(), (folder, *folder.parents)))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for path in made:
            with contextlib.suppress(OSError):  # one that holds a file since (not ours) stays
                path.rmdir()
        raise


@contextlib.contextmanager
def staged_folder(output: Path) -> Iterator[Path]:
    """Yield a new hidden folder beside ``output``; when the block ends without an error, it becomes ``output``.

    An existing ``output`` (checked by `check_replaceable` first) is swapped out and removed only once the new
    folder has its name; its permissions carry over (a new folder gets the umask's). On an error the staged folder
    goes and ``output`` is as it was.
    """
    output = output.absolute()
    remove_stale(output)
    # The writer's process id in the name: a copy whose writer is gone (killed) is known as stale by the next run.
    staged = Path(tempfile.mkdtemp(prefix=f".{output.name}.{os.getpid()}.", suffix=".partial", dir=output.parent))
    try:
        yield staged
        mode = (output.stat().st_mode if output.exists() else 0o777 & ~umask()) & 0o7777
        os.chmod(staged, mode)
        previous = None
        if output.exists():
            previous = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".replaced", dir=output.parent))
            os.rename(output, previous / "old")  # a fresh name of our own: a stale or planted entry is never met
        try:
            os.rename(staged, output)
        except BaseException:  # a full disk, or a Ctrl-C between the two renames: the old folder is put back
            if previous is not None:
                os.rename(previous / "old", output)
                shutil.rmtree(previous, ignore_errors=True)
            raise
        fsync_dir(output.parent)
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
    finally:
        shutil.rmtree(staged, ignore_errors=True)  # gone already where it took its name
