"""Show the package's own source code in a chapter.

The book never pastes a copy of the code it runs: a chapter calls
``show_source(attention)`` and the page displays the function as it is in
``src/annotated_transformer/``. The output is Markdown (a highlighted code block in
Jupyter and on the site); its plain-text form is the source itself, so a test
comparing stored outputs notices when the package changed and the chapter was not
re-run.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import annotated_transformer

PACKAGE_ROOT = Path(annotated_transformer.__file__).resolve().parent


class Source:
    """The source of one or more package objects, displayed as a
    highlighted code block."""

    def __init__(self, *objects: Any) -> None:
        if not objects:
            raise ValueError(
                "show_source needs at least one function, class or module"
            )
        self.parts = [self._describe(obj) for obj in objects]

    @staticmethod
    def _describe(obj: Any) -> tuple[str, str]:
        # a decorated function lives in its own file, not the decorator's
        obj = inspect.unwrap(obj)
        try:
            path = Path(inspect.getsourcefile(obj) or "").resolve()
            code, _ = inspect.getsourcelines(obj)
        except TypeError as error:
            raise ValueError(f"{obj!r} has no Python source to show") from error
        try:
            where = f"{PACKAGE_ROOT.name}/{path.relative_to(PACKAGE_ROOT)}"
        except ValueError:
            where = path.name
        name = getattr(obj, "__qualname__", getattr(obj, "__name__", "module"))
        # No line number: it would change with every edit above ``obj`` in its file.
        heading = f"`{name}` in `{where}`"
        return heading, "".join(code).rstrip()

    def _repr_markdown_(self) -> str:
        return "\n\n".join(
            f"{heading}\n\n```python\n{code}\n```" for heading, code in self.parts
        )

    def __repr__(self) -> str:
        return "\n\n".join(code for _, code in self.parts)


def show_source(*objects: Any) -> Source:
    """Display the source of package functions, classes or
    modules in a notebook cell."""
    return Source(*objects)
