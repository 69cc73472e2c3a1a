"""Jupyter set-up: charts as Vega-Lite MIME bundles, the stored charts converted
from Altair's HTML, the venv's Jupyter settings and the guard on CI-size saves.

(The browser check of a chapter in JupyterLab is ``tests/lab_check.py``.)
"""

import json
from pathlib import Path

import altair as alt
import nbformat
import pandas as pd
import pytest
from tornado.web import HTTPError

from annotated_transformer.book import charts, jupyter, rendering


@pytest.fixture
def chart() -> alt.Chart:
    frame = pd.DataFrame({"x": [0, 1, 2], "y": [1.0, 0.5, 0.25]})
    return alt.Chart(frame, title="a line").mark_line().encode(x="x:Q", y="y:Q")


def html_of(chart: alt.Chart) -> str:
    with alt.renderers.enable("html"):
        return chart._repr_mimebundle_()["text/html"]


def test_the_book_renderer_emits_the_spec_under_jupyters_vega_lite_type(chart):
    rendering.enable()  # as importing book.viz does
    with alt.renderers.enable(rendering.RENDERER):
        bundle = chart._repr_mimebundle_()
    bundle = bundle[0] if isinstance(bundle, tuple) else bundle
    assert set(bundle) == {"application/vnd.vegalite.v5+json"}
    assert bundle[rendering.MIME_TYPE] == chart.to_dict()
    # whole numbers as a browser writes them: JSON.stringify(0.5, 1.0) is "0.5" "1"
    assert json.dumps(bundle[rendering.MIME_TYPE]["datasets"]).count("1.0") == 0


def test_stored_html_charts_become_mime_bundles_and_the_rest_stays(chart):
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("chart")
    cell.outputs = [
        nbformat.v4.new_output(
            "execute_result",
            {"text/html": html_of(chart), "text/plain": "alt.Chart(...)"},
            execution_count=1,
        ),
        nbformat.v4.new_output("display_data", {"text/html": "<b>a table</b>"}),
    ]
    notebook.cells = [cell]
    assert charts.convert(notebook) == 1
    chart_output, table = cell.outputs
    assert chart_output.data == {
        rendering.MIME_TYPE: chart.to_dict(),
        "text/plain": "alt.Chart(...)",
    }
    assert table.data == {"text/html": "<b>a table</b>"}
    assert charts.convert(notebook) == 0  # converted once


def test_install_sets_the_viewer_and_the_hook_and_keeps_other_settings(tmp_path):
    overrides = tmp_path / "etc/jupyter/labconfig/default_setting_overrides.json"
    overrides.parent.mkdir(parents=True)
    viewers = {"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {}}}
    viewers["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"][
        "markdown"
    ] = "Markdown Preview"
    overrides.write_text(json.dumps(viewers))
    jupyter.install(tmp_path)
    settings = json.loads(overrides.read_text())
    assert settings["@jupyterlab/docmanager-extension:plugin"][
        "defaultViewers"
    ] == {
        "markdown": "Markdown Preview",
        "python": "Jupytext Notebook",
    }
    server = json.loads(
        (tmp_path / "etc/jupyter/jupyter_server_config.json").read_text()
    )
    hook = server["ContentsManager"]["pre_save_hook"]
    module, name = hook.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name) is jupyter.pre_save


def test_saving_leaves_out_the_png_jupyterlab_adds_to_a_chart():
    chart = {rendering.MIME_TYPE: {"mark": "bar"}, "image/png": "iVBOR"}
    picture = {"image/png": "iVBOR"}  # a PNG the kernel wrote stays
    model = {
        "type": "notebook",
        "content": {
            "cells": [
                {"outputs": [{"data": dict(chart)}, {"data": dict(picture)}]},
                {"source": "markdown"},
            ]
        },
    }
    jupyter.drop_chart_pngs(model)
    assert model["content"]["cells"][0]["outputs"] == [
        {"data": {rendering.MIME_TYPE: {"mark": "bar"}}},
        {"data": picture},
    ]


class Contents:
    def __init__(self, root: Path) -> None:
        self.root_dir = str(root)


@pytest.mark.parametrize(
    ("size", "name", "refused"),
    [
        ("ci", "06_masks.ipynb", True),
        ("ci", "06_masks.py", True),
        ("ci", "06_masks_mine.ipynb", False),  # a copy under a new name
        ("ci", "scratch.ipynb", False),
        ("full", "06_masks.ipynb", False),
    ],
)
def test_a_ci_size_kernel_cannot_overwrite_a_stored_chapter(
    tmp_path, monkeypatch, size, name, refused
):
    (tmp_path / "06_masks.ipynb").write_text("{}")
    (tmp_path / "scratch.ipynb").write_text("{}")
    monkeypatch.setenv("AT_SIZE", size)
    contents = Contents(tmp_path)
    if refused:
        with pytest.raises(HTTPError) as error:
            jupyter.refuse_ci_outputs({}, name, contents_manager=contents)
        assert error.value.status_code == 409
        assert "AT_SIZE=ci" in error.value.log_message
    else:
        jupyter.refuse_ci_outputs({}, name, contents_manager=contents)
