"""``python -m annotated_transformer.exercises 06 [--solutions] [--file PATH]``.

Grades the exercises of one chapter: by default the reader's starter
``notebooks/exercises/06_<chapter>.py``; ``--file`` another copy of it;
``--solutions`` the reference solutions (a teacher's copy only). The file is
graded in a separate process, each exercise within ``--timeout`` seconds, on
inputs drawn from a fresh seed that the report prints (``--seed`` repeats a run).
Exits 0 when every exercise passes, 1 otherwise, 2 on bad input, 130 when
interrupted (after a summary of what was graded).
"""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

from annotated_transformer.exercises import grading, isolation


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
    parser.add_argument(
        "--seed", type=int, help="draw the inputs of an earlier run (it printed it)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds each exercise may take (default 60)",
    )
    args = parser.parse_args(argv)
    seed = secrets.randbelow(10**6) if args.seed is None else args.seed
    try:
        chapter = grading.normalise(args.chapter)
        if args.solutions:
            path = grading.solutions_path(chapter)
        else:
            path = args.file or grading.starter_path(chapter)
            if not path.is_file():
                raise ValueError(
                    f"{path} is not a file; pass the path of your answers"
                )
    except ValueError as error:
        print(f"error: {error}")
        return 2
    results: list[grading.Result] = []
    total = len(grading.exercises(chapter))

    def write(line: str) -> None:  # each result as its exercise finishes
        print(line, flush=True)

    try:
        write(f"Chapter {chapter} exercises, graded from {path} (seed {seed})")
        results = isolation.grade_file(
            chapter, path, seed=seed, limit=args.timeout, write=write, into=results
        )
    except ValueError as error:
        print(f"error: {error}")
        return 2
    except KeyboardInterrupt:
        print(f"interrupted after {len(results)} of {total} exercises.")
        print(grading.summary(results, total), f"Repeat with --seed {seed}.")
        return 130
    print(grading.summary(results, total))
    return 0 if all(r.outcome is grading.Outcome.PASS for r in results) else 1
