"""Marking a class: how long the grader takes per submission, isolation included.

Writes SUBMISSIONS submissions of one chapter to a temporary folder (the
reference solutions, the untouched starter and one-line mistakes of the
solutions, in turn), marks them with ``python -m annotated_transformer.exercises
mark`` as a teacher would (each file in its own worker, JOBS at once) and prints
the seconds per submission, the isolation used and the machine.

    PYTHONPATH=src python benchmarks/grading.py [--chapter 06] [--submissions 100]
        [--jobs 2]

Run it from the repository's root of a teacher's copy (it needs the solutions).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from annotated_transformer.exercises import grading, isolation


def mistakes(source: str) -> list[str]:
    """The solutions with one number changed, each in another place."""
    numbers = list(re.finditer(r"(?<![\w.])[1-9](?![\w.])", source))
    return [
        source[: m.start()] + str(int(m[0]) + 1) + source[m.end() :]
        for m in numbers
    ]


def processor() -> str:
    """The CPU's model name (Linux), or what the platform says."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="06")
    parser.add_argument("--submissions", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    chapter = grading.normalise(args.chapter)
    solutions = grading.solutions_path(chapter).read_text()
    starter = grading.starter_path(chapter).read_text()
    kinds = [solutions, starter, *mistakes(solutions)]
    with tempfile.TemporaryDirectory() as folder:
        submissions = Path(folder) / "class"
        submissions.mkdir()
        for k in range(args.submissions):
            (submissions / f"student{k:03d}.py").write_text(kinds[k % len(kinds)])
        command = [sys.executable, "-m", "annotated_transformer.exercises", "mark"]
        command += [
            str(submissions),
            "--chapter",
            chapter,
            "--jobs",
            str(args.jobs),
        ]
        command += ["--out", str(Path(folder) / "marks"), "--seed", "1"]
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        took = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(
            f"error: the marking failed: {done.stdout[-500:]}{done.stderr[-500:]}"
        )
    print(f"chapter {chapter}: {args.submissions} submissions, {args.jobs} jobs")
    print(f"isolation: {isolation.isolation()}")
    print(f"machine: {processor()}, {len(os.sched_getaffinity(0))} cores to use")
    print(f"{took:.1f} s in all, {took / args.submissions:.2f} s per submission")


if __name__ == "__main__":
    main()
