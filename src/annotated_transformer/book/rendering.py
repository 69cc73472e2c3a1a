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

:mod:`~annotated_transformer.book.charts` stores the charts of existing
notebooks the same way without executing them (``make charts``).
"""

from __future__ import annotations

from typing import Any

import altair as alt

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


# Room beside a single view's plot for its y axis, and for a legend if it has one.
AXIS_ROOM, LEGEND_ROOM = 70, 130
COMPOUND = ("hconcat", "vconcat", "concat", "facet", "repeat")
LEGENDS = ("color", "fill", "stroke", "size", "shape", "opacity")


def _has_legend(spec: dict[str, Any]) -> bool:
    views = [spec, *spec.get("layer", [])]
    return any(
        isinstance(channel := view.get("encoding", {}).get(name), dict)
        and "field" in channel
        and channel.get("legend", {}) is not None
        for view in views
        for name in LEGENDS
    )


def fit_column(spec: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """``spec`` as the site draws it, so that no chart is wider than its column.

    A single view (a mark, or layers of marks) drawn ``width`` px wide gets the
    column's width instead (Vega-Lite's ``"container"``), up to the width it was
    drawn at: returned with it, in px, with room for its axes and legend. A phone
    then redraws it narrower, labels at their size. A compound chart (concatenated
    or faceted views, the explorers) keeps its layout: the page scales its
    drawing down to the column (``book.css``), and None is returned.
    """
    width = spec.get("width")
    if any(key in spec for key in COMPOUND) or not isinstance(width, int | float):
        return spec, None
    room = AXIS_ROOM + (LEGEND_ROOM if _has_legend(spec) else 0)
    fitted = {
        **spec,
        "width": "container",
        "autosize": {"type": "fit-x", "contains": "padding"},
    }
    return fitted, round(width) + room


def enable() -> None:
    """Show every Altair chart of this kernel as a Vega-Lite MIME bundle."""
    alt.renderers.register(RENDERER, mimebundle)
    alt.renderers.enable(RENDERER)
