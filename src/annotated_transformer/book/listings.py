"""Refresh the package listings stored in the chapters, without re-running them.

A chapter shows package code with
:func:`~annotated_transformer.book.source.show_source`, and strict nbval fails as
soon as that code changes and the stored output does not. Most chapters re-execute
in seconds, but those that read long training runs do not, and a docstring edit
should not need hours of training. A listing's stored output names what it shows
(``"`Batch` in `annotated_transformer/data/batching.py`"``), so it can be
rendered again from the package as it is now, leaving every other output
untouched (an object that moved to another module is found by its name)::

    python -m annotated_transformer.book.listings notebooks/*.ipynb

Only outputs that are listings change; the command prints how many changed per file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any

import nbformat

import annotated_transformer
from annotated_transformer.book.source import Source

HEADING = re.compile(
    r"^`([\w.<>]+)` in `annotated_transformer/([\w/]+)\.py`$", re.M
)


def _resolve(name: str, path: str) -> Any:
    """The object that a listing heading names: ``name`` inside
    the module at ``path``, or, if it moved, in the module that defines it now."""
    try:
        module = importlib.import_module(
            "annotated_transformer." + path.replace("/", ".")
        )
    except ModuleNotFoundError:
        module = None
    if name == "module" and module is not None:
        return module
    top = name.split(".")[0]
    if module is None or not hasattr(module, top):
        module = _defining_module(top, path.split("/")[-1])
    obj: Any = module
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _defining_module(name: str, stem: str) -> Any:
    """The package module whose own top level defines ``name``; where several do
    (two datasets' ``tokenize``), the one whose file is still called ``stem``."""
    found = []
    for info in pkgutil.walk_packages(
        annotated_transformer.__path__, "annotated_transformer."
    ):
        if info.name.endswith("__main__"):  # running it would start the CLI
            continue
        module = importlib.import_module(info.name)
        obj = vars(module).get(name)
        if obj is not None and getattr(obj, "__module__", None) == info.name:
            found.append(module)
    if len(found) > 1:
        found = [m for m in found if m.__name__.rsplit(".", 1)[-1] == stem]
    if len(found) != 1:
        raise LookupError(
            f"cannot tell which module defines {name!r} (it was in {stem}.py): "
            "name it in the listing's heading"
        )
    return found[0]


def refresh_output(output: dict) -> bool:
    """Render one stored listing again; return whether its text changed."""
    data = output.get("data", {})
    markdown = data.get("text/markdown", "")
    if isinstance(markdown, list):
        markdown = "".join(markdown)
    headings = HEADING.findall(markdown)
    if "```python" not in markdown or not headings:
        return False
    source = Source(*(_resolve(name, path) for name, path in headings))
    new = {"text/markdown": source._repr_markdown_(), "text/plain": repr(source)}
    if all(data.get(key) == value for key, value in new.items()):
        return False
    data.update(new)
    return True


def refresh(path: Path) -> int:
    """Refresh every listing stored in the notebook at ``path``;
    return how many changed."""
    notebook = nbformat.read(path, as_version=4)
    changed = sum(
        refresh_output(output)
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )
    if changed:
        nbformat.write(notebook, path)
    return changed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    for path in parser.parse_args(argv).notebooks:
        print(f"{path}: {refresh(path)} listing(s) refreshed")


if __name__ == "__main__":
    main()
