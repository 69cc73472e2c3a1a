"""Files that a crash cannot leave half-written, and one clear error for a full
disk.

Every file a run writes (checkpoints, ``history.csv``, ``metrics.json``, records,
downloads) goes through :func:`atomic_write`: to a temporary file in the same
folder, flushed to disk (fsync), then renamed over the old one with
``os.replace``, so a kill mid-write leaves the previous file intact. A full disk
(or quota) is one :class:`DiskFullError` that says what ran out, however deep the
writer (torch, json) wrapped the ``ENOSPC``.

Only the standard library: the data layer and the command line's error handling
use it too.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

UMASK = os.umask(0o022)  # read the process's umask (the only way is to set it) ...
os.umask(UMASK)  # ... and put it back


class DiskFullError(OSError):
    """A file could not be written for want of disk space (or quota); nothing was
    replaced."""


def atomic_write(
    path: str | os.PathLike,
    data: bytes | Callable[[BinaryIO], None],
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Write a file so that a reader (or a crash) sees the old
    file or the new, never half.

    ``data``: the bytes, or a function that writes into an open binary file. The
    bytes go to a temporary file in the same folder, are flushed to disk (fsync),
    ``check(temporary path)`` may refuse them by raising (e.g. a checksum), and the
    temporary file is renamed over ``path`` with ``os.replace`` (atomic on POSIX and
    Windows); then the folder is synced so that the rename itself survives a power
    cut. Folders are created as needed. A full disk raises :class:`DiskFullError`
    (however deep the writer wrapped it) and, like any other failure, removes the
    temporary file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
    )
    try:
        os.chmod(
            tmp, 0o666 & ~UMASK
        )  # mkstemp's file is private (0600); a plain file is not
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if check is not None:
            check(Path(tmp))
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        if is_disk_full(error):
            raise disk_full(path) from error
        raise
    if hasattr(os, "O_DIRECTORY"):  # POSIX: make the rename durable
        dir_fd = os.open(path.parent, os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def disk_full(path: str | os.PathLike) -> DiskFullError:
    """The error for a write of ``path`` that found the disk full: what ran out, and
    what to do."""
    path = Path(path)
    error = DiskFullError(
        f"no space left on the disk of {path.parent} to write {path.name} (the "
        f"previous {path.name}, if any, is intact): free some space, then run "
        "again (a training run: with --resume)"
    )
    error.errno = errno.ENOSPC
    return error


def is_disk_full(error: BaseException | None) -> bool:
    """Is ``error``, or one it was raised from (torch wraps them), a full disk?"""
    seen = 0
    while error is not None and seen < 10:  # a chain of causes, not a cycle
        full = (errno.ENOSPC, errno.EDQUOT)
        if isinstance(error, OSError) and error.errno in full:
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def atomic_copy(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Copy ``source`` to ``target`` atomically (see :func:`atomic_write`)."""
    with open(source, "rb") as f:
        return atomic_write(target, lambda out: shutil.copyfileobj(f, out))


def write_json(path: str | os.PathLike, value: Any) -> Path:
    """Write ``value`` as indented JSON (UTF-8, non-ASCII kept as it is, a final
    newline) with :func:`atomic_write`."""
    text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    return atomic_write(path, text.encode())
