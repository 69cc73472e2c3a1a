"""The book's chart helpers: specs that Vega actually renders, and clear errors."""

import numpy as np
import pandas as pd
import pytest
import vl_convert

from annotated_transformer.book import viz


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
