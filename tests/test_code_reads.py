"""The package's code reads as written, not as the formatter left it.

- A comment sits above or beside the line it explains, never after a line that
  only closes brackets (``):  # why``), where the formatter strands a comment that
  made a statement too long.
- An import of one name fits on one line: no ``from x import (\\n    y,\\n)``.
- A Sphinx role (``:class:`...```) is never cut by a line break.
- A module docstring says what the module does and the one thing to know, in at
  most ``MODULE_DOCSTRING_LINES`` lines.
- In the model code (``SCOPE``), a class or function docstring holds shapes, the
  equation and one line of why, in at most ``DEFINITION_DOCSTRING_LINES`` lines.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "annotated_transformer"
MODULE_DOCSTRING_LINES = 30
DEFINITION_DOCSTRING_LINES = 15
# Checks that look at some folders only; the others look at the whole package.
SCOPE = {"long_definition_docstrings": ("blocks/", "models/")}


def stranded_comments(source: str) -> list[int]:
    """Lines holding a comment after tokens that only close brackets (and a
    ``:``, ``,`` or the rest of a statement), e.g. ``):  # why``; ``# fmt:``
    directives are not comments to a reader."""
    found = []
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    layout = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    first: dict[int, tokenize.TokenInfo] = {}
    for token in tokens:
        if token.type not in layout:
            first.setdefault(token.start[0], token)
    for token in tokens:
        if token.type != tokenize.COMMENT or token.string.startswith("# fmt:"):
            continue
        opener = first[token.start[0]]
        if opener is not token and opener.string in (")", "]", "}"):
            found.append(token.start[0])
    return found


def wrapped_imports(source: str) -> list[int]:
    """Lines of ``from x import (y,)`` statements that import one name over
    several lines."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        and len(node.names) == 1
        and node.end_lineno != node.lineno
    ]


def wrapped_values(source: str) -> list[int]:
    """Lines of assignments of a one-line value that the formatter wrapped in
    brackets over three lines or more (a comment beside the value made the line
    too long): ``x: int = (\n    1  # why\n)``; the comment goes above."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    commented = {t.start[0] for t in tokens if t.type == tokenize.COMMENT}
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and node.value is not None
        and node.value.lineno == node.value.end_lineno in commented
        and node.end_lineno - node.lineno >= 2
    ]


ROLE_CUT = re.compile(r":(?:class|func|meth|mod|attr|data|exc):`[^`]*\n")


def split_roles(source: str) -> list[int]:
    """Lines where a role's target is cut by a line break."""
    return [source.count("\n", 0, m.start()) + 1 for m in ROLE_CUT.finditer(source)]


def long_docstrings(source: str) -> list[int]:
    """[1] when the module docstring spans more than MODULE_DOCSTRING_LINES
    lines, its quotes included."""
    body = ast.parse(source).body
    if not body or ast.get_docstring(ast.parse(source)) is None:
        return []
    lines = body[0].end_lineno - body[0].lineno + 1
    return [1] if lines > MODULE_DOCSTRING_LINES else []


def long_definition_docstrings(source: str) -> list[int]:
    """First lines of class and function docstrings that span more than
    DEFINITION_DOCSTRING_LINES lines, their quotes included."""
    definitions = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = [
        node.body[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, definitions) and ast.get_docstring(node) is not None
    ]
    return [
        d.lineno
        for d in docstrings
        if d.end_lineno - d.lineno + 1 > DEFINITION_DOCSTRING_LINES
    ]


CHECKS = {
    "stranded_comments": stranded_comments,
    "wrapped_imports": wrapped_imports,
    "wrapped_values": wrapped_values,
    "split_roles": split_roles,
    "long_docstrings": long_docstrings,
    "long_definition_docstrings": long_definition_docstrings,
}


def modules(check: str) -> dict[str, str]:
    """The package's modules that ``check`` looks at, by name."""
    return {
        name: path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
        if (name := path.relative_to(PACKAGE).as_posix()).startswith(
            SCOPE.get(check, "")
        )
    }


@pytest.mark.parametrize("check", CHECKS)
def test_the_package_reads_as_written(check: str) -> None:
    found = {
        name: lines
        for name, source in modules(check).items()
        if (lines := CHECKS[check](source))
    }
    assert not found, f"{check}: {found}"


STRANDED = """\
if (
    a and b
):  # why
    f(
        x
    )  # more
"""
BESIDE = """\
# why
if a and b:  # or here
    x = [1]  # fine
y = (
    1  # inside the brackets, beside its line
)
z = f(
    1
)  # fmt: skip
"""
IMPORTS = """\
from a import (
    b,
)
from c import d
from e import (
    f,
    g,
)
"""


def test_the_checks_find_what_they_look_for() -> None:
    assert stranded_comments(STRANDED) == [3, 6]
    assert stranded_comments(BESIDE) == []
    assert wrapped_imports(IMPORTS) == [1]
    assert wrapped_values(BESIDE) == [4]
    assert wrapped_values("# why\nx: int = 1\ny = (\n    'long'\n)\n") == []
    assert split_roles('"""See :class:`~a.b.\nC`s and :func:`d`."""\n') == [1]
    assert split_roles('"""See :class:`~a.b.C`\nand more."""\n') == []
    most = MODULE_DOCSTRING_LINES
    assert long_docstrings('"""' + "x\n" * most + '"""\n') == [1]
    assert long_docstrings('"""' + "x\n" * (most - 1) + '"""\n') == []
    assert long_docstrings("x = 1\n") == []
    most = DEFINITION_DOCSTRING_LINES
    docstring = '    """' + "x\n" * most + '    """\n'
    assert long_definition_docstrings("class A:\n" + docstring) == [2]
    assert long_definition_docstrings("def f():\n" + docstring) == [2]
    shorter = docstring.replace("x\n", "", 1)
    assert long_definition_docstrings("def f():\n" + shorter) == []
    assert long_definition_docstrings(docstring.strip() + "\n") == []
