"""How the book's charts are shown: as a Vega-Lite MIME bundle, drawn offline.

Altair's default output is HTML whose script fetches vega, vega-lite and
vega-embed from a CDN, and JupyterLab runs no script of a notebook it does not
trust (every notebook a reader has not run on their machine). So those charts
draw neither offline nor before the chapter is run. A MIME bundle carries only
the chart's spec: JupyterLab, Notebook 7 and VS Code draw it with the Vega they
ship, with no network and no ``jupyter trust``, since it runs no code from the
notebook. The site turns the same bundle into HTML that uses its own bundled
copy of the libraries (``book/_ext/offline_vega.py``).

JupyterLab 4.6 renders Vega-Lite under the ``v5`` MIME type only (its renderer
bundles Vega-Lite 5); Altair 6 writes Vega-Lite 6 specs, which that renderer
draws unchanged (the browser test draws every chart of a chapter with it). When
JupyterLab learns the ``v6`` type, ``MIME_TYPE`` is the one line to change.

Run as a module, this stores the charts of existing notebooks the same way
without executing them: ``python -m annotated_transformer.book.rendering
notebooks/*.ipynb`` (``make charts``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import altair as alt
import nbformat

MIME_TYPE = "application/vnd.vegalite.v5+json"
RENDERER = "book"


def plain_numbers(value: Any) -> Any:
    """``value`` with every whole float written as an int (``1.0`` -> ``1``).

    JSON in a browser has one kind of number: JupyterLab saves ``1.0`` as ``1``.
    Stored that way from the start, a chart is the same whether the kernel wrote
    it or JupyterLab saved it again.
    """
    if isinstance(value, dict):
        return {key: plain_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_numbers(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def mimebundle(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """Altair's renderer for the book: the spec under ``MIME_TYPE``.

    IPython adds the chart's ``text/plain`` (``alt.Chart(...)``) itself.
    """
    return {MIME_TYPE: plain_numbers(spec)}


def enable() -> None:
    """Show every Altair chart of this kernel as a Vega-Lite MIME bundle."""
    alt.renderers.register(RENDERER, mimebundle)
    alt.renderers.enable(RENDERER)


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
