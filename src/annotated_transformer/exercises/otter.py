"""The exercises as an Otter-Grader assignment, for a course that grades on
Gradescope or JupyterHub with the tools it already has.

:func:`export` writes, per chapter, the starter students fill in and one Otter
test file per exercise (Otter's exception-based format: plain Python). Each test
calls :func:`check`, which runs this package's check for that exercise on the
names the student's file defined, on inputs from a fresh seed, and raises
``AssertionError`` with the grader's one-line verdict, within ``LIMIT`` seconds
per exercise (an alarm, on Linux and macOS). The tests hold no solution: the
checks compare with independent references, as ``make exercises`` does. Each
chapter's folder also gets ``requirements.txt``, the book's locked versions, for
an autograder built with Python 3.11 like the book (``otter generate
--python-version 3.11 -r requirements.txt``, see book/teachers.md).

Otter runs the student's file in its own process, so the answer and the check
share one: the process isolation and sandbox of ``make exercises`` and ``make
mark`` do not exist there (book/teachers.md says so to teachers).
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from annotated_transformer.exercises import grading
from annotated_transformer.exercises.grading import Outcome

TEST_FILE = '''\
"""Exercise {label} · {title} (written by annotated_transformer.exercises.otter)."""

from otter.test_files import test_case

from annotated_transformer.exercises.otter import check

OK_FORMAT = False
name = "q{chapter}_{number}"
points = 1


@test_case(points=1)
def test_{name}(env):
    check("{chapter}", "{name}", env)
'''


LIMIT = 60
"""Seconds each exercise may take under Otter."""

PYTHON = "3.11"
"""The Python the book is locked for, and the autograder's."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise TimeoutError after ``seconds`` (where an alarm can: POSIX, the
    main thread; elsewhere no limit)."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not (
        threading.main_thread()
    ):
        yield
        return

    def stop(*_: object) -> None:
        raise TimeoutError(f"it ran for more than {seconds} s (an endless loop?)")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check(chapter: str, name: str, env: dict[str, Any]) -> None:
    """Grade exercise ``name`` of ``chapter`` on the student's global names
    ``env``; an AssertionError with the verdict (and the hint) unless it passes."""
    seed = secrets.randbelow(10**6)
    grading.set_seed(seed)
    (exercise,) = [ex for ex in grading.exercises(chapter) if ex.name == name]
    try:
        with time_limit(LIMIT):
            result = grading.run(exercise, SimpleNamespace(**env))
    except TimeoutError as error:
        result = grading.Result(exercise, Outcome.FAIL, str(error))
    if result.outcome is not Outcome.PASS:
        # A find-the-bug exercise asks its question: this report has no starter
        # to tell an untouched function from a failed attempt.
        hint = exercise.question or exercise.hint
        raise AssertionError(
            f"{exercise.label} {result.outcome.value}: {result.message} "
            f"({hint}) [make exercises CHAPTER={chapter} SEED={seed} repeats it]"
        )


def export(
    out: Path, chapters: list[str] | None = None, root: Path | None = None
) -> Path:
    """Write ``out/chNN/{starter, tests/}`` for each chapter; returns ``out``."""
    for chapter in chapters or grading.chapters():
        folder = out / f"ch{chapter}"
        tests = folder / "tests"
        tests.mkdir(parents=True, exist_ok=True)
        starter = grading.starter_path(chapter, root)
        shutil.copy(starter, folder / starter.name)
        lock = (
            (root or Path(__file__).resolve().parents[3])
            / ".ci"
            / "requirements.lock"
        )
        if lock.is_file():  # the book's pins, for the autograder's image
            shutil.copy(lock, folder / "requirements.txt")
        for ex in grading.exercises(chapter):
            text = TEST_FILE.format(
                label=ex.label,
                title=ex.title,
                chapter=chapter,
                number=ex.number,
                name=ex.name,
            )
            (tests / f"q{chapter}_{ex.number}.py").write_text(text)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer.exercises.otter",
        description="Export the exercises as Otter-Grader tests.",
    )
    parser.add_argument("out", type=Path, help="the folder to write")
    parser.add_argument("chapters", nargs="*", help="e.g. 05 06 (default: all)")
    args = parser.parse_args(argv)
    try:
        chapters = [grading.normalise(c) for c in args.chapters]
        export(args.out, chapters)
    except ValueError as error:
        print(f"error: {error}")
        return 2
    print(f"Otter tests for {len(chapters) or 'every'} chapter(s) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
