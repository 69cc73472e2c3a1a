"""Sphinx extension: serve Vega, Vega-Lite and vega-embed from the site itself.

Altair's HTML output loads these libraries from a CDN unless a global ``VEGA_DEBUG``
object already names the versions it expects. We write one self-contained bundle
(from vl-convert, which ships the libraries) into ``_static`` and announce its
versions, so charts render with no network. The bundle is wrapped in a function: its
top-level names (``_``) would otherwise clash with Sphinx's own scripts.
"""

from pathlib import Path

import vl_convert
from altair.vegalite.v6 import display

BUNDLE = "vega-offline.js"


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
    # Loaded in <head> without defer: the charts' inline scripts
    # run while the body parses.
    app.add_js_file(BUNDLE, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
