"""How long each chapter takes, from one source each: reading (stated once, in
the chapter's Time line), running (measured: the cell timings that
``make execute`` stores in the notebook) and training its runs (their records).

Every time the book states is generated from these: each chapter's Time line, the
preface's table (``book/intro.md``) and the teachers' (``book/teachers.md``),
between ``<!-- times -->`` and ``<!-- /times -->``.
``python -m annotated_transformer.book.times`` writes them again; ``--check``
only says which are stale (a unit test does the same). ``--build-seconds S``
records the wall time of ``make book EXECUTE=1`` (the Makefile measures it) in
``book/build.json``, with the machine and commit.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat

from annotated_transformer.files import write_json
from annotated_transformer.machine import describe, git_commit
from annotated_transformer.paths import repository_root
from annotated_transformer.records import all_records

ROOT = repository_root(Path(__file__).parent) or Path.cwd()
MODULE = "annotated_transformer.book.times"
BUILD = ROOT / "book" / "build.json"
PAGES = (ROOT / "book" / "intro.md", ROOT / "book" / "teachers.md")
BLOCK = re.compile(r"(<!-- times -->\n).*?(<!-- /times -->)", re.S)
# A chapter's Time line, as its first markdown cell states it.
TIME_LINE = re.compile(
    r"^- \*\*Time:\*\* about (?P<read>\d+) minutes to read\b.*$", re.M
)
TITLE = re.compile(r"^# (?:\d+ · )?(?P<title>.+)$", re.M)
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four"}


@dataclass(frozen=True)
class Chapter:
    """One chapter's times: ``read`` minutes as stated, ``run`` seconds as
    measured, its runs' records."""

    number: int
    title: str
    stem: str
    read: int
    run: float
    records: tuple[dict[str, Any], ...]


def _stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def run_seconds(notebook: nbformat.NotebookNode) -> float | None:
    """The seconds a notebook's code cells took when it was last executed: the
    sum of each cell's time from input to reply, as Jupyter stored it; None when
    a code cell has no timing (never executed whole)."""
    total = 0.0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        timing = cell.metadata.get("execution", {})
        if (
            "iopub.execute_input" not in timing
            or "shell.execute_reply" not in timing
        ):
            return None
        start = _stamp(timing["iopub.execute_input"])
        total += (_stamp(timing["shell.execute_reply"]) - start).total_seconds()
    return total


def chapter(py: Path, records: Sequence[dict[str, Any]]) -> Chapter:
    """The times of the chapter whose source is ``py`` (``NN_name.py``)."""
    from annotated_transformer.book.runs import BY_NAME

    text = py.read_text()
    found = TIME_LINE.search(_markdown(text))
    if found is None:
        raise ValueError(
            f"{py.name} has no '- **Time:** about N minutes to read' line"
        )
    number = int(py.stem[:2])
    notebook = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
    seconds = run_seconds(notebook)
    if seconds is None:
        raise ValueError(
            f"{py.with_suffix('.ipynb').name}: code cells with no stored timing: "
            f"make execute CHAPTER={py.stem}"
        )
    title = TITLE.search(_markdown(text))
    reads = [
        r
        for r in records
        if number in getattr(BY_NAME.get(r["name"]), "chapters", ())
    ]
    return Chapter(
        number,
        title["title"].strip() if title else py.stem,
        py.stem,
        int(found["read"]),
        seconds,
        tuple(reads),
    )


def _markdown(py_text: str) -> str:
    """The text of a py:percent file's comment lines, without their ``# ``."""
    return "\n".join(
        line[2:] if line.startswith("# ") else line.removeprefix("#")
        for line in py_text.splitlines()
    )


def chapters(root: Path = ROOT) -> list[Chapter]:
    records = [record for _, record in all_records(root / "results")]
    found = sorted((root / "notebooks").glob("[0-9][0-9]_*.py"))
    return [chapter(py, records) for py in found]


def running(seconds: float) -> str:
    """A chapter's measured run time in words."""
    if seconds < 60:
        return "under a minute"
    minutes = round(seconds / 60)
    return "about a minute" if minutes == 1 else f"about {minutes} minutes"


def _threads(records: Sequence[dict[str, Any]]) -> str:
    counts = sorted(
        {r["machine"]["threads"] for r in records}
        | {p["machine"]["threads"] for r in records for p in r.get("resumed") or []}
    )
    words = " or ".join(NUMBERS.get(n, str(n)) for n in counts)
    return f"{words} CPU thread{'s' if counts != [1] else ''}"


def training(records: Sequence[dict[str, Any]]) -> str:
    """What training a chapter's runs took, from their records."""
    if not records:
        return ""
    minutes = sorted(r["train_minutes"] for r in records)
    where = _threads(records)
    if len(minutes) == 1:
        return f"training its run took {minutes[0]:.1f} minutes on {where}"
    spread = f"{minutes[0]:.1f}–{minutes[-1]:.1f}"
    spread = spread if minutes[0] != minutes[-1] else f"{minutes[0]:.1f}"
    return f"training its {len(minutes)} runs took {spread} minutes each on {where}"


def time_line(ch: Chapter) -> str:
    """The chapter's Time line: read as stated, run as measured, training as
    recorded (the Results page gives each run's machine and command)."""
    run = running(ch.run)
    if ch.records:
        kind = "run's record" if len(ch.records) == 1 else "runs' records"
        run = f"{run} from its {kind}; {training(ch.records)}"
    return f"- **Time:** about {ch.read} minutes to read; it runs in {run}."


def preface_table(found: Sequence[Chapter]) -> str:
    rows = [
        "| chapter | read | run | training its runs |",
        "| --- | --- | --- | --- |",
    ]
    for ch in found:
        link = f"[{ch.number:02d} · {ch.title}](notebooks/{ch.stem}.ipynb)"
        train = training(ch.records).removeprefix("training ") or "none"
        rows.append(f"| {link} | {ch.read} min | {running(ch.run)} | {train} |")
    return "\n".join(rows)


def teachers_table(found: Sequence[Chapter]) -> str:
    rows = ["| chapter | read | run |", "| --- | --- | --- |"]
    for ch in found:
        rows.append(
            f"| {ch.number:02d} {ch.title} | {ch.read} min | {running(ch.run)} |"
        )
    total = sum(ch.read for ch in found)
    rows.append(f"| all {len(found)} chapters | {total} min | |")
    return "\n".join(rows)


def _replace_line(text: str, start: str, line: str) -> str:
    """``text``, its first line that begins with ``start`` replaced by ``line``."""
    lines = text.split("\n")
    index = next(i for i, old in enumerate(lines) if old.startswith(start))
    return "\n".join([*lines[:index], line, *lines[index + 1 :]])


def _with_block(text: str, table: str) -> str:
    if not BLOCK.search(text):
        raise ValueError("no <!-- times --> ... <!-- /times --> block")
    return BLOCK.sub(lambda m: f"{m[1]}{table}\n{m[2]}", text)


def expected(root: Path = ROOT) -> dict[Path, str]:
    """Every file with generated times, as it should read."""
    found = chapters(root)
    out: dict[Path, str] = {}
    for ch in found:
        py = root / "notebooks" / f"{ch.stem}.py"
        out[py] = _replace_line(
            py.read_text(), "# - **Time:**", f"# {time_line(ch)}"
        )
    intro, teachers = (root / "book" / "intro.md", root / "book" / "teachers.md")
    out[intro] = _with_block(intro.read_text(), preface_table(found))
    out[teachers] = _with_block(teachers.read_text(), teachers_table(found))
    return out


def write_chapter(py: Path, text: str) -> None:
    """Write the chapter ``py`` as ``text`` and put its Time line into the
    paired notebook's first markdown cell, leaving the stored outputs as they
    are; the notebook first, so that Jupytext still sees the .py as the newer."""
    line = TIME_LINE.search(_markdown(text))
    assert line is not None
    ipynb = py.with_suffix(".ipynb")
    notebook = nbformat.read(ipynb, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and "- **Time:**" in cell.source:
            cell.source = _replace_line(cell.source, "- **Time:**", line[0])
            break
    nbformat.write(notebook, ipynb)
    py.write_text(text)


def record_build(seconds: int, jobs: int) -> dict[str, Any]:
    """``make book EXECUTE=1``'s wall time, on this machine, into ``BUILD``."""
    record = {
        "seconds": seconds,
        "minutes": round(seconds / 60, 1),
        "jobs": jobs,
        "machine": describe("cpu") | {"threads": 1},
        "git": git_commit(ROOT),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(BUILD, record)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--check", action="store_true", help="are the times stale?")
    parser.add_argument("--build-seconds", type=int, help="record make book's time")
    parser.add_argument("--jobs", type=int, default=1, help="chapters at a time")
    args = parser.parse_args(argv)
    if args.build_seconds is not None:
        record = record_build(args.build_seconds, args.jobs)
        print(f"make book EXECUTE=1 took {record['minutes']} minutes: {BUILD}")
        return 0
    try:
        wanted = expected()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    stale = [p for p, text in wanted.items() if p.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path} is stale: run python -m {MODULE}")
        return 1 if stale else 0
    for path, text in wanted.items():
        if path in stale:
            if path.suffix == ".py":
                write_chapter(path, text)
            else:
                path.write_text(text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
