"""The exercises as an Otter-Grader assignment, for a course that grades on
Gradescope or JupyterHub with the tools it already has.

:func:`export` writes, per chapter, the starter students fill in and one Otter
test file per exercise (Otter's exception-based format: plain Python). Each test
calls :func:`check`, which runs this package's check for that exercise on the
names the student's file defined, on inputs from a fresh seed, and raises
``AssertionError`` with the grader's one-line verdict. The tests hold no
solution: the checks compare with independent references, as ``make exercises``
does. Students check their work with ``otter check 06_masks.py -t tests``;
``otter generate`` turns the same tests into a Gradescope autograder (see
book/teachers.md).
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import sys
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


def check(chapter: str, name: str, env: dict[str, Any]) -> None:
    """Grade exercise ``name`` of ``chapter`` on the student's global names
    ``env``; an AssertionError with the verdict (and the hint) unless it passes."""
    seed = secrets.randbelow(10**6)
    grading.set_seed(seed)
    (exercise,) = [ex for ex in grading.exercises(chapter) if ex.name == name]
    result = grading.run(exercise, SimpleNamespace(**env))
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
