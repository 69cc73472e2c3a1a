"""Mark a class: grade a folder of submissions and write the marks.

``python -m annotated_transformer.exercises mark SUBMISSIONS [--chapter 06]
[--out marks]`` (or ``make mark SUBMISSIONS=...``). SUBMISSIONS holds one entry
per student: a file (``alice.py``, graded for ``--chapter``, or ``06_alice.py``
for chapter 06) or a folder (``alice/``, whose ``NN_*.py`` or ``chNN.py`` files
are graded for chapter NN; with ``--chapter``, that chapter's file, or the
folder's one ``.py`` file). Links and hidden names are skipped: a submission
is read as data, never followed out of its folder.

Every file is graded as :mod:`isolation` grades one, several at once
(``--jobs``), all on the same printed seed. The out folder receives

- ``marks.csv`` and ``marks.json``: one row per student and exercise: student,
  chapter, exercise, result (PASS, FAIL, TODO, or NOT GRADED), reason (one
  line), seed, seconds;
- ``feedback/STUDENT.txt``: the report the student would have seen;
- ``output/STUDENT.txt``: what the student's code printed, kept apart.

Progress shows a line per graded file. Exit codes: 0 every submission graded
(whatever the marks), 2 bad input (no submissions), 3 some could not be graded
(the row says why; the grader's files changing stops the marking).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from annotated_transformer.exercises import grading, isolation

GRADED, BAD_INPUT, NOT_GRADED = 0, 2, 3
COLUMNS = ["student", "chapter", "exercise", "result", "reason", "seed", "seconds"]
_NUMBERED = re.compile(r"^(?:ch)?(\d\d)(?:_.*)?\.py$")


@dataclass(frozen=True)
class Submission:
    """One file to grade: whose, for which chapter ("" when unknown), where."""

    student: str
    chapter: str
    path: Path | None
    problem: str = ""


def _chapter_of(name: str) -> str:
    found = _NUMBERED.match(name)
    return found[1] if found else ""


def _plain(path: Path) -> bool:
    return not path.name.startswith(".") and not path.is_symlink()


def submissions(folder: Path, chapter: str | None) -> list[Submission]:
    """What ``folder`` holds to grade (see the module), sorted by student."""
    found = []
    for entry in sorted(p for p in folder.iterdir() if _plain(p)):
        if entry.is_file() and entry.suffix == ".py":
            own = chapter or _chapter_of(entry.name)
            problem = "" if own else "say which chapter: --chapter NN or NN_name.py"
            found.append(Submission(entry.stem, own, entry, problem))
        elif entry.is_dir():
            files = sorted(
                p for p in entry.glob("*.py") if _plain(p) and p.is_file()
            )
            numbered = [
                (p, _chapter_of(p.name)) for p in files if _chapter_of(p.name)
            ]
            if chapter:
                mine = [p for p, ch in numbered if ch == chapter]
                mine = mine or (files if len(files) == 1 else [])
                numbered = [(p, chapter) for p in mine[:1]]
            for path, own in numbered:
                found.append(Submission(entry.name, own, path))
            if not numbered:
                said = (
                    f"no file for chapter {chapter}"
                    if chapter
                    else "no NN_*.py file"
                )
                found.append(Submission(entry.name, chapter or "", None, said))
    return found


def _row(student: str, chapter: str, result: grading.Result, seed: int) -> dict:
    ex = result.exercise
    return {
        "student": student,
        "chapter": chapter,
        "exercise": f"{ex.label} {ex.name}",
        "result": result.outcome.value,
        "reason": result.message,
        "seed": seed,
        "seconds": round(result.seconds, 3),
    }


def _not_graded(submission: Submission, why: str, seed: int) -> dict:
    return {
        "student": submission.student,
        "chapter": submission.chapter,
        "exercise": "",
        "result": "NOT GRADED",
        "reason": why,
        "seed": seed,
        "seconds": 0.0,
    }


def mark_one(
    submission: Submission, out: Path, seed: int, limit: float, kind: str
) -> list[dict]:
    """Grade one submission: its rows; its feedback and output files written."""
    if submission.problem:
        return [_not_graded(submission, submission.problem, seed)]
    try:
        chapter = grading.normalise(submission.chapter)
    except ValueError as error:
        return [_not_graded(submission, str(error), seed)]
    name = f"{submission.student}-{chapter}"
    lines = [f"{submission.student}: chapter {chapter} (seed {seed})"]
    lines.append(isolation.describe(kind))
    with open(out / "output" / f"{name}.txt", "w", encoding="utf-8") as log:
        try:
            results = isolation.grade_file(
                chapter,
                submission.path,
                seed=seed,
                limit=limit,
                kind=kind,
                write=lines.append,
                log=log,
            )
        except ValueError as error:  # the file does not import: every exercise
            results = isolation.failed_import(chapter, str(error))
            for result in results:
                grading.report(result, lines.append)
    lines.append(grading.summary(results, len(results)))
    (out / "feedback" / f"{name}.txt").write_text("\n".join(lines) + "\n", "utf-8")
    return [_row(submission.student, chapter, r, seed) for r in results]


def mark(
    folder: Path,
    out: Path,
    *,
    chapter: str | None,
    seed: int,
    limit: float,
    kind: str,
    jobs: int,
    say=print,
) -> tuple[list[dict], bool]:
    """Mark every submission in ``folder``; (rows, whether all were graded)."""
    todo = submissions(folder, chapter)
    for sub in ("feedback", "output"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    rows: dict[int, list[dict]] = {}
    stop = threading.Event()

    def one(index: int, submission: Submission) -> list[dict]:
        if stop.is_set():
            return [_not_graded(submission, "the marking stopped first", seed)]
        try:
            return mark_one(submission, out, seed, limit, kind)
        except isolation.GraderChangedError as error:
            stop.set()
            return [_not_graded(submission, str(error), seed)]
        except isolation.WorkerError as error:
            return [_not_graded(submission, str(error), seed)]

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        began = time.monotonic()
        futures = {pool.submit(one, i, s): i for i, s in enumerate(todo)}
        for done, future in enumerate(as_completed(futures), 1):
            index = futures[future]
            rows[index] = future.result()
            sub = todo[index]
            passed = sum(r["result"] == "PASS" for r in rows[index])
            took = time.monotonic() - began
            what = f"{passed} of {len(rows[index])} passed"
            if rows[index][0]["result"] == "NOT GRADED":
                what = f"not graded: {rows[index][0]['reason']}"
            where = f"[{done}/{len(todo)}] {sub.student} {sub.chapter}"
            say(f"{where}: {what} ({took:.0f} s)")
    table = [row for i in sorted(rows) for row in rows[i]]
    graded = all(row["result"] != "NOT GRADED" for row in table)
    with open(out / "marks.csv", "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    (out / "marks.json").write_text(json.dumps(table, indent=1) + "\n", "utf-8")
    return table, graded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer.exercises mark",
        description="Grade a folder of submissions; write marks.csv, marks.json "
        "and a feedback file per student.",
    )
    parser.add_argument(
        "submissions", type=Path, help="one file or folder per student"
    )
    parser.add_argument(
        "--chapter", help="grade this chapter (default: from names)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("marks"), help="default marks/"
    )
    parser.add_argument("--seed", type=int, help="the inputs of an earlier marking")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="s per exercise"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--isolation", choices=["auto", "sandbox", "process"], default="auto"
    )
    args = parser.parse_args(argv)
    seed = secrets.randbelow(10**6) if args.seed is None else args.seed
    try:
        if not args.submissions.is_dir() or args.submissions.is_symlink():
            raise ValueError(f"{args.submissions} is not a folder of submissions")
        chapter = grading.normalise(args.chapter) if args.chapter else None
        kind = isolation.isolation(args.isolation)
        if not submissions(args.submissions, chapter):
            raise ValueError(
                f"{args.submissions} holds no submission (.py file or folder)"
            )
    except ValueError as error:
        print(f"error: {error}")
        return BAD_INPUT
    print(
        f"Marking {args.submissions} (seed {seed}); {isolation.describe(kind)}",
        flush=True,
    )
    table, graded = mark(
        args.submissions,
        args.out,
        chapter=chapter,
        seed=seed,
        limit=args.timeout,
        kind=kind,
        jobs=max(1, args.jobs),
        say=lambda line: print(line, flush=True),
    )
    written = args.out / "marks.csv"
    print(f"marks written to {written} and marks.json ({len(table)} rows)")
    return GRADED if graded else NOT_GRADED
