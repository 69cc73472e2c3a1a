"""``python -m annotated_transformer.exercises 06 [--solutions] [--file PATH]``.

Grades the exercises of one chapter: by default the reader's starter
``notebooks/exercises/06_<chapter>.py``; ``--file`` another copy of it;
``--solutions`` the reference solutions (a teacher's copy only). The file is
graded in a separate process (:mod:`isolation`; the report says which), each
exercise within ``--timeout`` seconds, on inputs drawn from a fresh seed that the
report prints (``--seed`` repeats a run); what the answer prints goes to
standard error, the report to standard output. Exits 0 when every exercise
passes, 1 otherwise, 2 on bad input (a file that does not import included), 3
when the grader could not grade (its own files changed), 130 when interrupted
(after a summary of what was graded).

``python -m annotated_transformer.exercises mark SUBMISSIONS`` marks a class
(see :mod:`marking`).
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from annotated_transformer.exercises import grading, isolation, marking

GRADED, FAILED, BAD_INPUT, NOT_GRADED, INTERRUPTED = 0, 1, 2, 3, 130


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mark"]:
        return marking.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer.exercises",
        description="Grade the exercises of one chapter "
        "(or a class's submissions: mark SUBMISSIONS, see mark --help).",
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
    parser.add_argument(
        "--isolation",
        choices=["auto", "sandbox", "process"],
        default="auto",
        help="sandbox (bubblewrap), process, or auto: the sandbox if there is one",
    )
    args = parser.parse_args(argv)
    seed = secrets.randbelow(10**6) if args.seed is None else args.seed
    try:
        chapter = grading.normalise(args.chapter)
        kind = isolation.isolation(args.isolation)
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
        return BAD_INPUT
    results: list[grading.Result] = []
    total = len(grading.exercises(chapter))

    def write(line: str) -> None:  # each result as its exercise finishes
        print(line, flush=True)

    try:
        write(f"Chapter {chapter} exercises, graded from {path} (seed {seed})")
        write(isolation.describe(kind))
        isolation.grade_file(
            chapter,
            path,
            seed=seed,
            limit=args.timeout,
            kind=kind,
            write=write,
            into=results,
            log=sys.stderr,
        )
    except ValueError as error:
        print(f"error: {error}")
        return BAD_INPUT
    except isolation.GraderChangedError as error:
        print(f"error: {error}; reinstall the grader before grading again")
        return NOT_GRADED
    except isolation.WorkerError as error:
        print(f"error: {error}")
        return NOT_GRADED
    except KeyboardInterrupt:
        print(f"interrupted after {len(results)} of {total} exercises.")
        print(grading.summary(results, total), f"Repeat with --seed {seed}.")
        return INTERRUPTED
    print(grading.summary(results, total))
    passed = all(r.outcome is grading.Outcome.PASS for r in results)
    return GRADED if passed else FAILED
