"""Altair charts for the book: every picture is one of these,
with a title and axis labels.

The charts are built from long-form pandas DataFrames (one row per cell or
point) so that a reader can open the data behind any picture, and they carry
tooltips for exploring it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd
import torch

# The book's heatmaps (positional encodings, attention over 30 tokens × 8
# heads) exceed Altair's default 5,000-row guard; the chapters keep their data
# small on purpose instead.
alt.data_transformers.disable_max_rows()


def _as_array(
    matrix: torch.Tensor | np.ndarray | Sequence[Sequence[float]],
) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().float().cpu().numpy()
    array = np.asarray(matrix, dtype=float)
    if array.ndim != 2:
        raise ValueError(
            f"heatmap needs a 2-D matrix (rows, columns), got shape {array.shape}"
        )
    return array


def _vega_string(text: str) -> str:
    """``text`` as a string literal of Vega's expression language.

    Vega compiles ``if(...)`` by name and rejects the literal "if" itself
    ("Unrecognized signal name"), so that one word is written as the sum of two
    strings.
    """
    return '"i"+"f"' if text == "if" else json.dumps(text)


def _label_axis(
    title: str, labels: Sequence[str] | None, angle: int = 0
) -> alt.Axis:
    """An axis over integer positions that prints
    ``labels[position]`` (labels may repeat)."""
    if labels is None:
        return alt.Axis(title=title)
    array = "[" + ", ".join(_vega_string(str(label)) for label in labels) + "]"
    return alt.Axis(
        title=title, labelExpr=f"{array}[datum.value]", labelAngle=angle
    )


def heatmap(
    matrix: torch.Tensor | np.ndarray | Sequence[Sequence[float]],
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    *,
    title: str | list[str],
    x_title: str,
    y_title: str,
    value_title: str = "value",
    scheme: str = "viridis",
    domain: tuple[float, float] | None = None,
    width: int = 300,
    height: int = 300,
) -> alt.Chart:
    """A labelled heatmap of a (rows, columns) matrix: rows go down the y axis.

    ``x_labels``/``y_labels`` name the columns/rows (e.g. tokens); repeated labels
    are fine. ``domain`` fixes the colour scale, e.g. (0, 1) for attention weights.
    A ``title`` given as a list is drawn one line per item.
    """
    array = _as_array(matrix)
    rows, cols = array.shape
    for name, labels, size in (
        ("x_labels", x_labels, cols),
        ("y_labels", y_labels, rows),
    ):
        if labels is not None and len(labels) != size:
            raise ValueError(
                f"{name} has {len(labels)} labels for {size} positions"
            )
    row_index, col_index = np.meshgrid(
        np.arange(rows), np.arange(cols), indexing="ij"
    )
    frame = pd.DataFrame(
        {
            "row": row_index.ravel(),
            "column": col_index.ravel(),
            value_title: array.ravel(),
        }
    )
    tooltip = ["row:O", "column:O", alt.Tooltip(f"{value_title}:Q", format=".3f")]
    if x_labels is not None:
        frame["x label"] = [x_labels[c] for c in frame["column"]]
        tooltip.append("x label:N")
    if y_labels is not None:
        frame["y label"] = [y_labels[r] for r in frame["row"]]
        tooltip.append("y label:N")
    scale = alt.Scale(
        scheme=scheme, domain=list(domain) if domain else alt.Undefined
    )
    return (
        alt.Chart(frame, title=title)
        .mark_rect()
        .encode(
            # More than a dozen words side by side only fit standing up.
            x=alt.X(
                "column:O",
                axis=_label_axis(x_title, x_labels, -90 if cols > 12 else 0),
            ),
            y=alt.Y("row:O", axis=_label_axis(y_title, y_labels)),
            color=alt.Color(f"{value_title}:Q", scale=scale, title=value_title),
            tooltip=tooltip,
        )
        .properties(width=width, height=height)
    )


def line_chart(
    frame: pd.DataFrame,
    x: str,
    y: str,
    color: str | None = None,
    *,
    title: str,
    x_title: str,
    y_title: str,
    log_y: bool = False,
    width: int = 500,
    height: int = 280,
) -> alt.Chart:
    """Lines of ``y`` against ``x`` from a long-form DataFrame, one
    line per ``color`` value."""
    missing = [c for c in (x, y, color) if c is not None and c not in frame.columns]
    if missing:
        raise ValueError(
            f"columns {missing} are not in the frame (it has {list(frame.columns)})"
        )
    encoding = {
        "x": alt.X(f"{x}:Q", title=x_title),
        "y": alt.Y(
            f"{y}:Q",
            title=y_title,
            scale=alt.Scale(type="log" if log_y else "linear"),
        ),
        "tooltip": [
            alt.Tooltip(f"{c}", format=".4g") if c != color else c for c in (x, y)
        ],
    }
    if color is not None:
        encoding["color"] = alt.Color(f"{color}:N", title=color)
        encoding["tooltip"].append(f"{color}:N")
    return (
        alt.Chart(frame, title=title)
        .mark_line()
        .encode(**encoding)
        .properties(width=width, height=height)
    )
