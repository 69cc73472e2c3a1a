"""Charts stored before the book drew them as MIME bundles, converted in place.

A notebook executed with an older set-up holds Altair's HTML output (a script
that fetches Vega from a CDN); this replaces each by the Vega-Lite MIME bundle
that :mod:`~annotated_transformer.book.rendering` writes, without executing
anything: ``python -m annotated_transformer.book.charts notebooks/*.ipynb``
(``make charts``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat

from annotated_transformer.book.rendering import mimebundle


def spec_from_html(html: str) -> dict[str, Any] | None:
    """The Vega-Lite spec inside Altair's HTML output, or None if it holds none.

    Altair's template ends in ``})(SPEC, EMBED_OPTIONS);``.
    """
    start = html.rfind("})(")
    if start < 0 or "vegaEmbed" not in html:
        return None
    spec, _ = json.JSONDecoder().raw_decode(html, start + len("})("))
    return spec if isinstance(spec, dict) and "$schema" in spec else None


def convert(notebook: nbformat.NotebookNode) -> int:
    """Replace each stored Altair HTML chart by its MIME bundle; how many."""
    converted = 0
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            html = data.get("text/html", "")
            spec = spec_from_html(html if isinstance(html, str) else "".join(html))
            if spec is None:
                continue
            del data["text/html"]
            data.update(mimebundle(spec))
            converted += 1
    return converted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Store the Altair charts of notebooks as Vega-Lite MIME "
        "bundles (drawn offline in Jupyter and on the site), in place."
    )
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for path in args.notebooks:
        if not path.is_file():
            print(f"charts: no notebook {path}", file=sys.stderr)
            return 2
        notebook = nbformat.read(path, as_version=4)
        converted = convert(notebook)
        if converted:
            nbformat.write(notebook, path)
        print(f"{path}: {converted} chart(s) converted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
