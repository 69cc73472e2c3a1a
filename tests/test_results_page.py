"""The Results page's chart is stored as the chapters' are: a Vega-Lite MIME
bundle that JupyterLab and the site draw offline, holding every record's curve."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import altair as alt
import nbformat

from annotated_transformer.book import results as page
from annotated_transformer.book.rendering import MIME_TYPE

ROOT = Path(__file__).resolve().parents[1]


def stored_outputs() -> list[dict]:
    cells = nbformat.read(page.PAGE, as_version=4).cells
    return [output for cell in cells for output in cell.get("outputs", [])]


def test_the_chart_is_a_spec_that_loads_nothing():
    outputs = stored_outputs()
    assert len(outputs) == 1
    data = outputs[0]["data"]
    assert set(data) == {MIME_TYPE, "text/plain"}  # no HTML: no script to trust
    text = json.dumps(data)
    assert "<script" not in text and "cdn" not in text
    alt.VConcatChart.from_dict(data[MIME_TYPE])  # valid Vega-Lite (schema check)


def test_the_chart_draws_every_record_from_its_history():
    """Each record's curve is its ``history.csv``, read here with ``csv``."""
    spec = stored_outputs()[0]["data"][MIME_TYPE]
    rows = [row for part in spec["datasets"].values() for row in part]
    folders = sorted((ROOT / "results").glob("*/record.json"))
    assert sorted({row["run"] for row in rows}) == [p.parent.name for p in folders]
    for folder in folders:
        run = folder.parent.name
        drawn = sorted((r["step"], r["value"]) for r in rows if r["run"] == run)
        metric = next(r["metric"] for r in rows if r["run"] == run)
        with open(folder.parent / "history.csv", newline="") as f:
            history = [
                (int(row["step"]), float(row[metric]))
                for row in csv.DictReader(f)
                if row[metric] not in ("", "nan")
            ]
        assert len(drawn) == len(history), run
        for (step, value), (want_step, want) in zip(drawn, history, strict=True):
            assert step == want_step and math.isclose(value, want), run
