"""Grade an answer file without ever running it in the grader's process.

The answer file is code the grader does not trust: it may loop for ever, end its
process, print lines that look like results, look for the expected values on the
stack, patch the checks or rewrite the grader's files. So the grader never
imports it. :class:`Worker` starts ``python -m annotated_transformer.exercises.
worker`` in a fresh scratch folder (its working directory, the only place it may
write), which imports the file and answers requests in plain data
(:mod:`protocol`); the checks, the expected values and the reference solutions
stay here.

Isolation, said in every report (:func:`isolation`):

- ``sandbox``: on Linux with bubblewrap (``bwrap``), the worker sees the file
  system read-only (the scratch folder excepted), the reference solutions as an
  empty folder and the checks as blank files, and has no network;
- ``process``: elsewhere, a separate process whose audit hook refuses writes
  outside its scratch folder, reading the solutions or the checks, and starting
  programs.

Either way the grader checks its own files against a manifest (sha256) before
and after every answer file, and stops when they changed. An exercise whose
answer does not come within ``limit`` seconds, or whose worker dies, is a FAIL
with one line; a fresh worker goes on with the next exercise.
"""

from __future__ import annotations

import functools
import hashlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO

from annotated_transformer.exercises import grading, protocol
from annotated_transformer.exercises.grading import Outcome, Result

LOAD_LIMIT = 120.0
"""Seconds a worker may take to start and import the answer file (torch's import
is most of it)."""

PACKAGE = Path(__file__).resolve().parents[1]
"""The grader's own code: the annotated_transformer package."""


class GraderChangedError(Exception):
    """The grader's files changed while an answer was graded."""


class WorkerError(Exception):
    """The grader could not start a worker (not the answer's doing)."""


@functools.cache
def sandboxed() -> bool:
    """Whether bubblewrap can start a sandbox on this machine."""
    if sys.platform != "linux" or shutil.which("bwrap") is None:
        return False
    probe = ["bwrap", "--ro-bind", "/", "/", "--unshare-net", "true"]
    done = subprocess.run(probe, capture_output=True, check=False)
    return done.returncode == 0


def isolation(kind: str = "auto") -> str:
    """``sandbox`` or ``process`` (``auto``: the sandbox where there is one);
    a one-line ValueError for a sandbox this machine cannot start."""
    if kind == "sandbox" and not sandboxed():
        raise ValueError(
            "no sandbox here: install bubblewrap (apt install bubblewrap)"
        )
    if kind == "auto":
        return "sandbox" if sandboxed() else "process"
    return kind


def describe(kind: str) -> str:
    """The report's line about the isolation used."""
    if kind == "sandbox":
        return "isolation: sandbox (bubblewrap: read-only files, no network)"
    return "isolation: separate process (no sandbox here: grader files checked)"


def manifest(roots: list[Path]) -> dict[str, str]:
    """sha256 of every regular file under ``roots`` (links not followed)."""
    sums = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                path = Path(folder) / name
                if path.is_file() and not path.is_symlink():
                    sums[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sums


def hidden() -> list[Path]:
    """What the worker must not read: the reference solutions' folders, and
    the checks (chNN.py, grading.py and their compiled copies)."""
    found = []
    for root in grading._roots(None):
        folder = root / "notebooks" / "exercises" / "solutions"
        if folder.is_dir():
            found.append(folder.resolve())
    here = Path(__file__).resolve().parent
    for pattern in ("ch[0-9][0-9].py", "grading.py"):
        found += here.glob(pattern)
        found += (here / "__pycache__").glob(pattern.replace(".py", ".*.pyc"))
    return sorted(set(found))


class Worker(grading.Answers):
    """An answer file served from a process of its own (see the module)."""

    def __init__(self, path: Path, kind: str, log: IO | None = None) -> None:
        super().__init__()
        self.scratch = Path(tempfile.mkdtemp(prefix="answer-"))
        self.process: subprocess.Popen | None = None
        try:
            self._start(path, kind, log)
        except BaseException:  # Ctrl-C too: no process, no scratch left behind
            self.close()
            raise

    def _start(self, path: Path, kind: str, log: IO | None) -> None:
        copy = self.scratch / path.name
        copy.write_bytes(path.read_bytes())
        self.sources = grading._functions(str(copy))
        hide = [str(h) for h in hidden()]
        module = f"{__package__}.worker"
        command = [
            sys.executable,
            "-m",
            module,
            str(copy),
            str(self.scratch),
            *hide,
        ]
        if kind == "sandbox":
            command = [*_bwrap(self.scratch, hide), *command]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=_writable(log),
            cwd=self.scratch,
            env={**os.environ, "TMPDIR": str(self.scratch), "PYTHONPATH": _path()},
            start_new_session=os.name == "posix",  # Ctrl-C reaches the grader only
        )
        self.deadline = time.monotonic() + LOAD_LIMIT
        self.limit = LOAD_LIMIT
        try:
            self._receive()  # "started": the worker runs, the answer not yet
        except grading.StoppedError as error:
            what = f"the grader could not start its worker: {error}"
            raise WorkerError(what) from None
        reply, _ = self._receive()
        if "error" in reply:
            raise ValueError(reply["error"])
        self.functions = set(reply.get("functions", []))
        self.copied = set(reply.get("copied", []))

    def start(self, limit: float) -> None:
        """Give the next exercise ``limit`` seconds."""
        self.limit, self.deadline = limit, time.monotonic() + limit

    def exchange(self, message: dict, tensors: dict) -> tuple[dict, dict]:
        self._send(message, tensors)
        while True:
            reply, received = self._receive()
            if "callback" not in reply:
                return reply, received
            self._send(*self.callback(reply, received))

    def _send(self, message: dict, tensors: dict) -> None:
        try:
            protocol.send(self.process.stdin, message, tensors)
        except (BrokenPipeError, OSError):
            raise self._stopped() from None

    def _receive(self) -> tuple[dict, dict]:
        head = self._read(8)
        try:
            return protocol.parse(head, self._read(protocol.lengths(head)))
        except ValueError as error:
            self.close()
            what = f"the answer sent what is not an answer ({error})"
            raise grading.StoppedError(what) from None

    def _read(self, size: int) -> bytes:
        fd, chunks = self.process.stdout.fileno(), []
        while size:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                if time.monotonic() >= self.deadline:
                    self.close()
                    what = (
                        f"it ran for more than {self.limit:g} s (an endless loop?)"
                    )
                    raise grading.StoppedError(f"{what} and was stopped")
                continue
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                raise self._stopped()
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def _stopped(self) -> grading.StoppedError:
        self.close()
        code = self.process.returncode
        return grading.StoppedError(
            f"the answer ended the grading process (exit code {code})"
        )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def close(self) -> None:
        """Stop the worker (and anything it started) and remove its scratch."""
        if self.process is not None:
            if self.process.poll() is None:
                if os.name == "posix":
                    os.killpg(self.process.pid, signal.SIGKILL)
                else:
                    self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                stream.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _path() -> str:
    """PYTHONPATH for the worker, which runs in its scratch folder: this
    package's folder and the grader's entries, made absolute."""
    given = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    entries = [str(PACKAGE.parent), *(str(Path(p).resolve()) for p in given if p)]
    return os.pathsep.join(dict.fromkeys(entries))


def _writable(log: IO | None) -> IO | int:
    """Where the answer's output goes: ``log`` if it is a real file (not one a
    test captures), else nowhere."""
    try:
        log.fileno()
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL
    return log


def _bwrap(scratch: Path, hide: list[str]) -> list[str]:
    """bubblewrap's arguments: everything read-only, the scratch folder
    writable, the solutions and the checks blank, no network, its own process
    tree."""
    command = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    command += ["--bind", str(scratch), str(scratch)]
    for path in hide:  # a folder empty, a file blank
        is_file = Path(path).is_file()
        command += ["--ro-bind", os.devnull, path] if is_file else ["--tmpfs", path]
    command += ["--unshare-net", "--unshare-pid", "--unshare-ipc"]
    return [*command, "--die-with-parent", "--chdir", str(scratch)]


def grade_file(
    chapter: str,
    path: Path,
    *,
    seed: int,
    limit: float,
    kind: str = "process",
    write: Callable[[str], None] = print,
    into: list[Result] | None = None,
    log: IO | None = None,
) -> list[Result]:
    """Grade ``path``'s answers to ``chapter``'s exercises, each result printed
    as it comes and appended to ``into`` (what an interrupted run has graded).
    A one-line ValueError when the file does not import; GraderChangedError when the
    grader's files changed meanwhile."""
    grading.set_seed(seed)
    exercises = grading.exercises(chapter)
    try:
        starter = grading._functions(str(grading.starter_path(chapter)))
    except ValueError:
        starter = {}
    roots = [PACKAGE, *hidden()]
    before = manifest(roots)
    results = [] if into is None else into
    worker = None
    try:
        for ex in exercises:
            if worker is None or not worker.alive:
                if worker is not None:
                    worker.close()
                try:
                    worker = Worker(Path(path), kind, log)
                except grading.StoppedError as error:  # while importing the file
                    worker = None
                    message = f"while importing the file, {error}"
                    results.append(Result(ex, Outcome.FAIL, message))
                    grading.report(results[-1], write)
                    continue
            worker.start(limit)
            began = time.monotonic()
            result = grading.run(ex, worker, starter)
            results.append(replace(result, seconds=time.monotonic() - began))
            grading.report(results[-1], write)
    finally:
        if worker is not None:
            worker.close()
        if manifest(roots) != before:
            raise GraderChangedError(
                f"the grader's files changed while grading {path}"
            )
    return results


def failed_import(chapter: str, message: str) -> list[Result]:
    """Every exercise of ``chapter`` FAILed with the one line of a file that
    does not import."""
    return [Result(ex, Outcome.FAIL, message) for ex in grading.exercises(chapter)]
