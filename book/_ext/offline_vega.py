"""Sphinx extension: draw the chapters' charts with Vega, Vega-Lite and vega-embed
served from the site itself.

The chapters store each chart as a Vega-Lite MIME bundle (see
``annotated_transformer.book.rendering``), which Jupyter draws by itself; MyST-NB
does not know that type. As each chapter is read, every such output gets the HTML
Altair would have written for it. That HTML loads the libraries from a CDN unless a
global ``VEGA_DEBUG`` object already names the versions it expects: we write one
self-contained bundle (from vl-convert, which ships the libraries) into ``_static``
and announce its versions, so charts render with no network. The bundle is wrapped
in a function: its top-level names (``_``) would otherwise clash with Sphinx's own
scripts.
"""

import hashlib
import json
from pathlib import Path

import vl_convert
from altair.utils.html import spec_to_html
from altair.vegalite.v6 import display

from annotated_transformer.book.rendering import MIME_TYPE, fit_column

BUNDLE = "vega-offline.js"


def chart_html(spec: dict) -> str:
    """Altair's notebook HTML for ``spec``, fitted to the page column; its element
    id is the spec's hash. Drawn as SVG, which the page can scale down."""
    text = json.dumps(spec, sort_keys=True)
    div = "altair-viz-" + hashlib.sha256(text.encode()).hexdigest()[:32]
    fitted, max_width = fit_column(spec)
    html = spec_to_html(
        fitted,
        mode="vega-lite",
        vega_version=display.VEGA_VERSION,
        vegalite_version=display.VEGALITE_VERSION,
        vegaembed_version=display.VEGAEMBED_VERSION,
        output_div=div,
        embed_options={"renderer": "svg"},
        fullhtml=False,
        template="universal",
    )
    if max_width is None:
        return html
    style = f"max-width: {max_width}px"
    return f'<div class="fitted-chart" style="{style}">{html}</div>'


def _charts_as_html(app, docname: str, source: list[str]) -> None:
    """Give each Vega-Lite MIME output of a notebook its HTML (``source-read``)."""
    notebook_file = str(app.env.doc2path(docname)).endswith(".ipynb")
    if not notebook_file or MIME_TYPE not in source[0]:
        return
    notebook = json.loads(source[0])
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if MIME_TYPE in data and "text/html" not in data:
                data["text/html"] = chart_html(data[MIME_TYPE])
    source[0] = json.dumps(notebook)


def _write_bundle(app) -> None:
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    versions = (
        f'var VEGA_DEBUG = {{"vega_version": "{display.VEGA_VERSION}", '
        f'"vegalite_version": "{display.VEGALITE_VERSION}", '
        f'"vegaembed_version": "{display.VEGAEMBED_VERSION}"}};\n'
    )
    major_minor = ".".join(
        display.VEGALITE_VERSION.split(".")[:2]
    )  # vl-convert wants "v6.4"
    bundle = vl_convert.javascript_bundle(vl_version=f"v{major_minor}")
    (static / BUNDLE).write_text(versions + "(function(){\n" + bundle + "\n})();\n")


def setup(app):
    app.connect("builder-inited", _write_bundle)
    app.connect("source-read", _charts_as_html)
    # Loaded in <head> without defer: the charts' inline scripts
    # run while the body parses.
    app.add_js_file(BUNDLE, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
