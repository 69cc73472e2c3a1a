"""Grade an answer file in a process of its own, with a time limit per exercise.

The answer file is code the grader does not trust: it may loop for ever, end the
process (``raise SystemExit(0)``, ``os._exit``), print lines that look like
results or replace the grader's helpers. So the command line never imports it:
:func:`grade_file` starts a worker (``python -m
annotated_transformer.exercises.isolation``), which imports the file and runs the
checks one after the other, and reads each result as it comes, one JSON line on
the worker's original standard output. The worker points its own ``print``\\ s
and the answer's at standard error, and tags every result with a token it read
from its standard input before the answer was imported, so a line the answer
prints is never taken for a result.

An exercise whose result does not come within ``limit`` seconds, or whose worker
dies, is a FAIL with one line saying so; a fresh worker then goes on with the
next exercise. Isolation protects the verdict from mistakes and naive tricks, not
the machine from hostile code: run files you do not trust in a container (see
book/teachers.md).
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from annotated_transformer.exercises import grading
from annotated_transformer.exercises.grading import Outcome, Result

LOAD_LIMIT = 120.0
"""Seconds a worker may take to start and import the answer file (torch's import
is most of it)."""


def grade_file(
    chapter: str,
    path: Path,
    *,
    seed: int,
    limit: float,
    write: Callable[[str], None] = print,
    into: list[Result] | None = None,
) -> list[Result]:
    """Grade ``path``'s answers to ``chapter``'s exercises, each result printed
    as it comes and appended to ``into`` (what an interrupted run has graded).
    A one-line ValueError when the file does not import."""
    exercises = grading.exercises(chapter)
    results = [] if into is None else into
    while len(results) < len(exercises):
        for result in _worker(chapter, path, seed, len(results), limit):
            grading.report(result, write)
            results.append(result)
    return results


def _worker(
    chapter: str, path: Path, seed: int, start: int, limit: float
) -> Iterator[Result]:
    """Results of exercises ``start``, ``start`` + 1, … from one worker, until it
    finishes, stops answering or dies (then one FAIL saying which)."""
    exercises = grading.exercises(chapter)
    token = secrets.token_hex(16)
    command = [sys.executable, "-m", __name__, chapter, str(path), str(seed)]
    process = subprocess.Popen(
        [*command, str(start)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=os.name == "posix",  # Ctrl-C reaches the grader only
    )
    process.stdin.write(token + "\n")
    process.stdin.close()
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_read, args=(process.stdout, lines))
    reader.daemon = True
    reader.start()
    index, wait, loaded = start, LOAD_LIMIT, False
    try:
        while index < len(exercises):
            message = _next(lines, token, wait)
            if "error" in message:  # the file does not import
                raise ValueError(message["error"])
            if "stopped" in message:
                message["loaded"] = loaded
                _end(process)
                yield from _stopped(exercises, index, message, process.returncode)
                return
            if "ready" in message:
                wait, loaded = limit, True
                continue
            ex = exercises[index]
            outcome = Outcome(message["outcome"])
            yield Result(ex, outcome, message["message"], message["attempted"])
            index += 1
    finally:
        _end(process)


def _stopped(
    exercises: list[grading.Exercise], index: int, message: dict, code: int
) -> Iterator[Result]:
    """The FAIL(s) for a worker that gave no result in time, or died: the
    exercise it was on or, while it imported the file, every one left."""
    if message["stopped"] == "time":
        wait = message["wait"]
        what = f"it ran for more than {wait:g} s (an endless loop?) and was stopped"
    else:
        what = f"the answer ended the grading process (exit code {code})"
    if not message["loaded"]:
        what = f"while importing the file, {what}"
        for ex in exercises[index:]:
            yield Result(ex, Outcome.FAIL, what)
        return
    yield Result(exercises[index], Outcome.FAIL, what)


def _next(lines: queue.Queue, token: str, wait: float) -> dict:
    """The worker's next message carrying ``token``, or ``{"stopped": "time"}``
    when none comes within ``wait`` seconds, ``{"stopped": "exit"}`` when the
    worker closed its output."""
    while True:
        try:
            line = lines.get(timeout=wait)
        except queue.Empty:
            return {"stopped": "time", "wait": wait}
        if line is None:
            return {"stopped": "exit"}
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(message, dict) and message.pop("token", None) == token:
            return message


def _read(stream: IO[str], lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _end(process: subprocess.Popen) -> None:
    """Stop the worker (and anything it started) if it still runs."""
    if process.poll() is None:
        if os.name == "posix":
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    process.wait()


def work(chapter: str, path: Path, seed: int, start: int) -> None:
    """The worker: import ``path`` and run ``chapter``'s exercises from
    ``start`` on, one JSON line per result on the original standard output."""
    token = sys.stdin.readline().strip()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the answer's prints (and anything else) go to stderr
    sys.stdout = sys.stderr

    def send(**message: object) -> None:
        out.write(json.dumps({"token": token, **message}) + "\n")

    grading.set_seed(seed)
    exercises = grading.exercises(chapter)
    try:
        starter = grading.load(grading.starter_path(chapter))
    except ValueError:
        starter = None
    guard = grading.Guard(sys.modules[exercises[0].check.__module__])
    try:
        module = grading.load(path)
    except ValueError as error:
        send(error=str(error))
        return
    changed = guard.changed()
    send(ready=True)
    for ex in exercises[start:]:
        if changed:
            result = Result(ex, Outcome.FAIL, grading.patched(changed))
        else:
            result = grading.run(ex, module, starter)
        send(
            outcome=result.outcome.value,
            message=result.message,
            attempted=result.attempted,
        )
    out.flush()
    os._exit(0)  # whatever the answer left running (threads, atexit) ends here


if __name__ == "__main__":
    chapter, path, seed, start = sys.argv[1:]
    work(chapter, Path(path), int(seed), int(start))
