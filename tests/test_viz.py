"""The book's chart helpers: specs that Vega actually renders, and clear errors."""

import altair as alt
import numpy as np
import pandas as pd
import pytest
import vl_convert

from annotated_transformer.book import rendering, viz


@pytest.mark.parametrize(
    "labels",
    [["the", "cat", "sat"], ["if", "you", "enjoy"], ['say "hi"', "it's", "<unk>"]],
    ids=["words", "vega-keyword-if", "quotes"],
)
def test_heatmap_with_word_labels_renders(labels):
    chart = viz.heatmap(
        np.eye(3), labels, labels, title="t", x_title="key", y_title="query"
    )
    svg = vl_convert.vegalite_to_svg(
        chart.to_json()
    )  # raises if Vega rejects the spec
    assert all(f">{label}<" in svg for label in labels if label.isalpha())


def test_line_chart_renders_and_names_missing_columns():
    frame = pd.DataFrame({"step": [1, 2, 3], "loss": [3.0, 2.0, 1.5]})
    chart = viz.line_chart(
        frame, "step", "loss", title="t", x_title="step", y_title="loss"
    )
    assert "<svg" in vl_convert.vegalite_to_svg(chart.to_json())
    with pytest.raises(ValueError, match=r"columns \['lr'\] are not in the frame"):
        viz.line_chart(frame, "step", "lr", title="t", x_title="step", y_title="lr")


def test_heatmap_rejects_wrong_label_counts():
    with pytest.raises(ValueError, match="x_labels has 2 labels for 3 positions"):
        viz.heatmap(np.eye(3), ["a", "b"], title="t", x_title="x", y_title="y")


def test_a_single_view_fits_the_column_up_to_its_own_width():
    """A line chart 500 px wide with a legend: drawn as wide as the column, at most
    its width plus room for the y axis and the legend; a grid of heatmaps keeps
    its layout (the page scales it)."""
    frame = pd.DataFrame({"x": [0, 1], "y": [1.0, 2.0], "run": ["a", "a"]})
    spec = viz.line_chart(
        frame, "x", "y", "run", title="t", x_title="x", y_title="y", width=500
    ).to_dict()
    fitted, widest = rendering.fit_column(spec)
    assert fitted["width"] == "container" and spec["width"] == 500
    assert fitted["autosize"] == {"type": "fit-x", "contains": "padding"}
    assert widest == 500 + rendering.AXIS_ROOM + rendering.LEGEND_ROOM
    plain = viz.line_chart(frame, "x", "y", title="t", x_title="x", y_title="y")
    assert rendering.fit_column(plain.to_dict())[1] == 500 + rendering.AXIS_ROOM
    grid = alt.hconcat(plain, plain).to_dict()
    assert rendering.fit_column(grid) == (grid, None)
