"""The hand-outs: a student edition without solutions, a teacher edition with
them, and the Otter-Grader export (``make handout``).

``python -m annotated_transformer.exercises.handout OUT`` copies the book's files
(those git tracks, or every file but build outputs outside a git checkout) to

- ``OUT/teacher/``: everything, the solutions included;
- ``OUT/student/``: the same less ``notebooks/exercises/solutions/`` and the
  tests that quote the solutions (:data:`TEACHERS`), with every chapter's
  solution toggles cut out of its ``.py`` and ``.ipynb`` (the starters and the
  grader stay: students grade themselves with ``make exercises``); before it is
  written, :func:`leaks` makes sure that no file of it holds an expression of a
  solution, compared as tokens (spacing, line breaks and comments aside) with
  every expression of five tokens or more that the book does not already show;
- ``OUT/otter/``: the Otter-Grader assignment (see :mod:`exercises.otter`).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from annotated_transformer.exercises import otter, toggles

SOLUTIONS = Path("notebooks/exercises/solutions")
TEACHERS = {
    Path("tests/test_exercises_mutants.py"),  # the solutions, mutated
    Path("tests/test_exercises_cheats.py"),  # answers close to the solutions
}
"""Files of the teacher edition only, besides the solutions."""

TEXT = {".py", ".ipynb", ".md", ".txt", ".cfg", ".toml", ".json", ".yml", ".yaml"}
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\*\*|//|->|[<>=!]=|[^\s\w]")


def tokens(text: str) -> str:
    """``text`` as a string of tokens, each between NUL characters: spacing,
    line breaks and comments no longer count."""
    text = re.sub(r"#[^\n]*", "", text)
    return "\0" + "\0".join(_TOKEN.findall(text)) + "\0"


def readable(root: Path, name: Path) -> str:
    """The text of file ``name`` as a reader sees it: a notebook's cell
    sources, a chapter without its toggles; "" for other files."""
    if name.suffix not in TEXT:
        return ""
    text = (root / name).read_text(encoding="utf-8", errors="replace")
    if chapter(name):
        text = without_toggles(name, text)
    if name.suffix == ".ipynb":
        cells = json.loads(text).get("cells", [])
        text = "\n".join("".join(cell.get("source", "")) for cell in cells)
    return text


def secrets(root: Path, names: Iterable[Path]) -> dict[str, str]:
    """The solutions' expressions (five tokens or more, as :func:`tokens`)
    that the book does not show elsewhere (the solutions and the exercises'
    tests aside): tokens -> the expression as written."""
    shown = "".join(
        tokens(readable(root, n))
        for n in names
        if SOLUTIONS not in n.parents and not n.name.startswith("test_exercises")
    )
    candidates = {}
    for path in sorted((root / SOLUTIONS).glob("ch*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef):
                continue
            for statement in node.body[1:]:  # after the docstring
                for expression in ast.walk(statement):
                    if isinstance(expression, ast.expr):
                        text = ast.get_source_segment(source, expression) or ""
                        if tokens(text).count("\0") > 5:
                            candidates[tokens(text)] = text
    return {key: text for key, text in candidates.items() if key not in shown}


def leaks(folder: Path, hidden: dict[str, str]) -> list[str]:
    """ "FILE: expression" for every ``hidden`` expression a file under
    ``folder`` holds."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        held = tokens(readable(folder, path.relative_to(folder)))
        found += [
            f"{path.name}: {text}" for key, text in hidden.items() if key in held
        ]
    return found


SKIPPED = {".git", ".venv", "_build", "dist", "__pycache__", ".ipynb_checkpoints"}


def toggle(blank: str, prefix: str) -> re.Pattern[str]:
    """A solution toggle, the blank line before it included, in a chapter's text
    whose markdown lines start with ``prefix`` (blank lines: ``blank``)."""
    p, b = re.escape(prefix), re.escape(blank)
    opening = rf"\n{b}\n{p}:::\{{dropdown\}} Solution\n"
    return re.compile(rf"{opening}(?:.*\n)*?{p}:::(?=\n|$)")


TOGGLES_SENTENCE = " The solutions are behind the toggles: try first."


def without_toggles(path: Path, text: str) -> str:
    """A chapter's ``.py`` or ``.ipynb`` text with its solution toggles cut (and
    the sentence that points to them)."""

    def cut(markdown: str, prefix: str, blank: str) -> str:
        return toggle(blank, prefix).sub("", markdown)

    return toggles.markdown(path, text.replace(TOGGLES_SENTENCE, ""), cut)


def files(root: Path) -> list[Path]:
    """The book's files, relative to ``root``."""
    try:
        listed = subprocess.run(
            ["git", "-c", "core.fsmonitor=false", "ls-files", "-z"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode()
        names = [Path(n) for n in listed.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        names = [p.relative_to(root) for p in root.rglob("*") if p.is_file()]
    return [n for n in names if not SKIPPED & set(n.parts) and (root / n).is_file()]


def chapter(name: Path) -> bool:
    """Whether ``name`` is a chapter (notebooks/NN_*.py or .ipynb)."""
    return (
        name.parent == Path("notebooks")
        and name.name[:2].isdigit()
        and name.suffix in {".py", ".ipynb"}
    )


def student(root: Path, out: Path, names: Iterable[Path]) -> None:
    """The student edition of ``names`` (under ``root``) in ``out``."""
    for name in names:
        if SOLUTIONS in name.parents or name in TEACHERS:
            continue
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if chapter(name):
            text = (root / name).read_text(encoding="utf-8")
            target.write_text(without_toggles(name, text), encoding="utf-8")
        else:
            shutil.copy2(root / name, target)


def teacher(root: Path, out: Path, names: Iterable[Path]) -> None:
    """The teacher edition: ``names`` as they are."""
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, out / name)


def build(root: Path, out: Path) -> None:
    """Both editions and the Otter export of the book at ``root``, in ``out``."""
    names = files(root)
    for edition in ("student", "teacher", "otter"):
        if (out / edition).exists():
            shutil.rmtree(out / edition)
    student(root, out / "student", names)
    leaked = leaks(out / "student", secrets(root, names))
    if leaked:
        shutil.rmtree(out / "student")
        raise ValueError(
            f"the student edition would show solution code: {leaked[0]}"
        )
    teacher(root, out / "teacher", names)
    otter.export(out / "otter", root=root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer.exercises.handout",
        description="Build the student and teacher editions of the book.",
    )
    parser.add_argument("out", type=Path, help="the folder to write them in")
    parser.add_argument(
        "--root", type=Path, default=Path.cwd(), help="the book (default: here)"
    )
    args = parser.parse_args(argv)
    if not (args.root / "notebooks" / "exercises").is_dir():
        print(
            f"error: {args.root} is not the book's folder; run this from its root"
        )
        return 2
    try:
        build(args.root, args.out)
    except ValueError as error:
        print(f"error: {error}")
        return 2
    print(f"student, teacher and otter editions in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
