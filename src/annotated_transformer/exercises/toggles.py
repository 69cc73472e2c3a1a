"""The chapters' solution toggles, written from the solution files.

Each exercise's statement ends with a closed MyST ``dropdown`` titled "Solution"
that holds the reference solution as a fenced ``python`` block: the code itself,
not an include of its file, because JupyterLab's jupyterlab-myst renders an
included file as an empty toggle, while a fenced block reads the same in
JupyterLab, the classic Notebook and on the site.

``notebooks/exercises/solutions/chNN.py`` stays the one source: ``python -m
annotated_transformer.exercises.toggles`` (run by ``make listings``) writes each
toggle's code again from the function its first line defines, in both files of
the chapter, and a test fails when a toggle differs from its file.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from annotated_transformer.exercises import grading

FENCE = "```"


def pattern(prefix: str, blank: str) -> re.Pattern[str]:
    """A solution toggle in a chapter's text whose markdown lines start with
    ``prefix`` (blank lines: ``blank``); group 1 is the function it shows."""
    p, b = re.escape(prefix), re.escape(blank)
    opening = rf"^{p}:::\{{dropdown\}} Solution\n{p}{FENCE}python\n"
    body = rf"{p}def (\w+)\(.*\n(?:(?:{p}.*|{b})\n)*?"
    return re.compile(rf"{opening}{body}{p}{FENCE}\n{p}:::$", re.MULTILINE)


def toggle(code: str, prefix: str = "", blank: str = "") -> str:
    """The toggle that shows ``code``, its lines prefixed as :func:`pattern`
    reads them."""
    lines = [":::{dropdown} Solution", f"{FENCE}python", *code.splitlines(), FENCE]
    return "\n".join(prefix + line if line else blank for line in [*lines, ":::"])


def solution_code(path: Path, name: str) -> str:
    """The source of function ``name`` in the solution file ``path``; a one-line
    ValueError when it has none."""
    source = path.read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(source, node)
    raise ValueError(f"{path} defines no {name}: fix the toggle that shows it")


def markdown(path: Path, text: str, edit: Callable[[str, str, str], str]) -> str:
    """A chapter's ``.py`` or ``.ipynb`` text with ``edit(text, prefix, blank)``
    applied to its markdown (a ``.py``'s markdown lines start with ``# ``)."""
    if path.suffix == ".py":
        return edit(text, "# ", "#")
    notebook = json.loads(text)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            source = edit("".join(cell["source"]), "", "")
            cell["source"] = source.splitlines(keepends=True)
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def refreshed(path: Path, text: str, root: Path) -> str:
    """Chapter ``path``'s ``text`` with every toggle showing the code of its
    solution file in the book at ``root``."""

    def write(markdown_text: str, prefix: str, blank: str) -> str:
        def code(match: re.Match[str]) -> str:
            solutions = grading.solutions_path(path.name[:2], root)
            return toggle(solution_code(solutions, match[1]), prefix, blank)

        return pattern(prefix, blank).sub(code, markdown_text)

    return markdown(path, text, write)


def chapters(root: Path) -> list[Path]:
    """Every chapter file with exercises: notebooks/NN_*.py and .ipynb."""
    pages = (root / "notebooks").glob("[0-9][0-9]_*.*")
    return sorted(p for p in pages if p.suffix in {".py", ".ipynb"})


def write(root: Path) -> list[Path]:
    """Write every chapter's toggles from its solution file; the files changed."""
    changed = []
    for path in chapters(root):
        text = path.read_text(encoding="utf-8")
        new = refreshed(path, text, root)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer.exercises.toggles",
        description="Write the chapters' solution toggles from the solution files.",
    )
    parser.add_argument(
        "--root", type=Path, default=Path.cwd(), help="the book (default: here)"
    )
    root = parser.parse_args(argv).root
    try:
        changed = write(root)
    except ValueError as error:
        print(f"error: {error}")
        return 2
    print(f"solution toggles written again in {len(changed)} chapter file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
