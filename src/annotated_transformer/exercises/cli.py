"""``python -m annotated_transformer.exercises 06 [--solutions] [--file PATH]``.

Grades the exercises of one chapter: by default the reader's starter
``notebooks/exercises/06_<chapter>.py``; ``--file`` another copy of it;
``--solutions`` the reference solutions. Exits 0 when every exercise passes, 1
otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from annotated_transformer.exercises import grading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer.exercises",
        description="Grade the exercises of one chapter.",
    )
    parser.add_argument("chapter", help="the chapter's number, e.g. 06")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--solutions",
        action="store_true",
        help="grade the reference solutions instead",
    )
    which.add_argument("--file", type=Path, help="grade this file, not the starter")
    args = parser.parse_args(argv)
    try:
        chapter = grading.normalise(args.chapter)
        if args.solutions:
            module, source = grading.solutions(chapter), "the reference solutions"
        else:
            path = args.file or grading.starter_path(chapter)
            module, source = grading.load(path), str(path)
    except ValueError as error:
        print(f"error: {error}")
        return 2
    print(f"Chapter {chapter} exercises, graded from {source}")
    results = grading.grade(chapter, module)
    return 0 if all(r.outcome is grading.Outcome.PASS for r in results) else 1
