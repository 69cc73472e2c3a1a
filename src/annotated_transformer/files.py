"""Files that a crash cannot leave half-written, and one clear error for a full
disk.

Every file a run writes (checkpoints, ``history.csv``, ``metrics.json``, records,
downloads) goes through :func:`atomic_write`: to a temporary file in the same
folder, flushed to disk (fsync), then renamed over the old one with
``os.replace``, so a kill mid-write leaves the previous file intact. A full disk
(or quota) is one :class:`DiskFullError` that says what ran out, however deep the
writer (torch, json) wrapped the ``ENOSPC``. A JSON file that a run or a record
keeps is read back by :func:`read_json`, which names the file when it is damaged.
Every file read back is opened by :func:`open_regular`: a regular file only (a
FIFO would block the reader for ever), and inside its folder (a link that leads
out of it is refused).

Only the standard library: the data layer and the command line's error handling
use it too.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

# The extension of this package's temporary files, and only theirs:
# ``.NAME.PID.RANDOM.at-tmp`` (:func:`temporary_name`).
TEMPORARY = ".at-tmp"
_TEMPORARY_NAME = re.compile(r"\..+\.(?P<pid>[0-9]+)\.[0-9a-f]{8}\.at-tmp")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX; Windows has neither
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation


class DamagedFileError(ValueError):
    """A file that the package wrote and reads back is not what it wrote
    (garbage, truncated, emptied, edited): the message names it and what to do."""


class DiskFullError(OSError):
    """A file could not be written for want of disk space (or quota); nothing was
    replaced."""


def atomic_write(
    path: str | os.PathLike,
    data: bytes | Callable[[BinaryIO], None],
    check: Callable[[Path], None] | None = None,
    *,
    folder: int | None = None,
) -> Path:
    """Write a file so that a reader (or a crash) sees the old
    file or the new, never half.

    ``data``: the bytes, or a function that writes into an open binary file. The
    bytes go to a temporary file in the same folder (:func:`temporary_name`), are
    flushed to disk (fsync), ``check(temporary path)`` may refuse them by raising
    (e.g. a checksum), and the temporary file is renamed over ``path`` with
    ``os.replace`` (atomic on POSIX and Windows); then the folder is synced so that
    the rename itself survives a power cut. Folders are created as needed, unless
    ``folder`` is given: an open descriptor of ``path``'s folder, which every step
    then goes through (POSIX), so that the file lands in that folder wherever it has
    been moved, and never recreates its old path. A full disk raises
    :class:`DiskFullError` (however deep the writer wrapped it) and, like any other
    failure, removes the temporary file.
    """
    path = Path(path)
    if folder is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    # relative to ``folder`` (its descriptor), or else by the path
    local = Path(path.name) if folder is not None else path
    fd, tmp = _create_temporary(local, folder)
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if check is not None:
            check(path.parent / tmp.name)
        os.replace(tmp, local, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=folder)
        if is_disk_full(error):
            raise disk_full(path) from error
        raise
    if hasattr(os, "O_DIRECTORY"):  # POSIX: make the rename durable
        dir_fd = os.open(path.parent, os.O_DIRECTORY) if folder is None else folder
        try:
            os.fsync(dir_fd)
        finally:
            if folder is None:
                os.close(dir_fd)
    return path


def _create_temporary(path: Path, folder: int | None) -> tuple[int, Path]:
    """A new temporary file for ``path`` (:func:`temporary_name`), created
    exclusively (never an existing file or a link), with a plain file's
    permissions; its descriptor and path."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _BINARY
    while True:
        tmp = temporary_name(path)
        with contextlib.suppress(FileExistsError):  # taken: draw another name
            return os.open(tmp, flags, 0o666, dir_fd=folder), tmp


def temporary_name(path: Path) -> Path:
    """A temporary file's path for a write of ``path``, in the same folder: hidden,
    the name, the writer's process id, 8 random hex digits and this package's own
    extension (``.last.pt.4242.9f86d081.at-tmp``). The id tells a file a killed
    writer left from one a live writer is writing (:func:`is_stale`); the extension
    tells the package's temporary files from anyone else's (a ``.notes.tmp``)."""
    token = secrets.token_hex(4)
    return path.with_name(f".{path.name}.{os.getpid()}.{token}{TEMPORARY}")


def is_stale(tmp: Path) -> bool:
    """Was ``tmp`` a temporary file of this package (:func:`temporary_name`) left
    by a writer that no longer runs (or by an earlier process with this process's
    id)? Any other name, a user's ``.notes.tmp`` included, is not. POSIX: the
    process is looked up by its id, not signalled."""
    named = _TEMPORARY_NAME.fullmatch(tmp.name)
    if named is None:
        return False
    pid = int(named["pid"])
    if pid == os.getpid():
        return True  # a process before this one, with the same id
    try:
        os.kill(pid, 0)  # signal 0: is it there?
    except (ProcessLookupError, OverflowError):  # none with that id
        return True
    except PermissionError:  # there, another user's
        return False
    return False


def open_at(
    path: str | os.PathLike, flags: int = os.O_RDONLY, *, folder: int | None = None
) -> int:
    """A descriptor of the plain file ``path`` (with ``folder``, an open descriptor
    of its folder: the name ``path.name`` in that folder, wherever it has moved),
    opened with ``flags`` (``os.O_WRONLY | os.O_APPEND | os.O_CREAT`` to append to
    a log). Never through a symbolic link, never a FIFO or device (opened without
    blocking, then checked on the descriptor), so that a planted name can neither
    send a write out of the folder nor hang the program: those are one
    :class:`DamagedFileError`."""
    path = Path(path)
    where = path.name if folder is not None else path
    refused = DamagedFileError(
        f"{path} is not a plain file (a symbolic link, a FIFO, a device or a "
        "folder): remove or rename it, then run again"
    )
    try:
        fd = os.open(where, flags | _NOFOLLOW | _NONBLOCK, 0o666, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise refused from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise refused
    return fd


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


def atomic_copy(
    source: str | os.PathLike,
    target: str | os.PathLike,
    inside: str | os.PathLike | None = None,
    *,
    folder: int | None = None,
) -> Path:
    """Copy the regular file ``source`` (inside the folder ``inside``, when given:
    :func:`open_regular`) to ``target`` atomically (see :func:`atomic_write`);
    ``folder``: an open descriptor of the folder that holds both."""
    if folder is None:
        with open_regular(source, inside) as f:
            return atomic_write(target, lambda out: shutil.copyfileobj(f, out))
    with os.fdopen(open_at(source, folder=folder), "rb") as f:
        copy = functools.partial(shutil.copyfileobj, f)
        return atomic_write(target, copy, folder=folder)


KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def open_regular(
    path: str | os.PathLike,
    inside: str | os.PathLike | None = None,
    fix: str = "put the file itself in its place",
) -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file (and, with
    ``inside``, one within that folder once every link is followed); anything else
    is one :class:`DamagedFileError` naming it and ending with ``fix``.

    The file is opened without blocking and checked on the open descriptor
    (``fstat``): a FIFO, whose opening waits for a writer, is refused at once, and
    nothing can swap the file between the check and the read."""
    path = Path(path)
    real = path.resolve() if inside is not None else path
    if inside is not None and not real.is_relative_to(Path(inside).resolve()):
        raise DamagedFileError(
            f"{path} is a link that leads out of {inside} (to {real}): {fix}"
        )
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(real, flags)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = KINDS.get(stat.S_IFMT(mode), "a special file")
        raise DamagedFileError(f"{path} is {kind}, not a regular file: {fix}")
    return open(fd, "rb")


def write_json(
    path: str | os.PathLike, value: Any, *, folder: int | None = None
) -> Path:
    """Write ``value`` as indented JSON (UTF-8, non-ASCII kept as it is, a final
    newline) with :func:`atomic_write` (``folder``: its open folder)."""
    text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    return atomic_write(path, text.encode(), folder=folder)


def read_json(
    path: str | os.PathLike,
    fix: str,
    needs: dict[str, type | tuple] | None = None,
    inside: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The JSON object in ``path`` (a run's ``metrics.json``, a record's
    ``record.json``, ...), a regular file (inside the folder ``inside``, when
    given: :func:`open_regular`). Anything else is one :class:`DamagedFileError`
    that names the file and ends with ``fix`` (what to do): text that is not JSON,
    JSON that is not an object, or an object without one of ``needs``' keys or
    whose value there is not of that key's type(s)."""
    path = Path(path)
    with open_regular(path, inside, fix) as f:
        data = f.read()
    return parse_json(data, path, fix, needs)


def parse_json(
    data: bytes,
    path: str | os.PathLike,
    fix: str,
    needs: dict[str, type | tuple] | None = None,
) -> dict[str, Any]:
    """The JSON object in ``data``, the bytes read from ``path``, checked as
    :func:`read_json` checks it."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        problem = f"is not valid JSON ({error})"
        raise DamagedFileError(f"{path} {problem}: {fix}") from None
    if not isinstance(value, dict):
        kind = type(value).__name__
        raise DamagedFileError(f"{path} holds a {kind}, not a JSON object: {fix}")
    for key, kind in (needs or {}).items():
        if not isinstance(value.get(key), kind):
            what = "lacks" if key not in value else "has a wrong"
            raise DamagedFileError(f"{path} {what} {key!r}: {fix}")
    return value
