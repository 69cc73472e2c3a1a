"""Jupyter set-up: charts as Vega-Lite MIME bundles, the stored charts converted
from Altair's HTML, the venv's Jupyter settings and saves that keep what a chapter
stores.

(The browser check of a chapter in JupyterLab is ``tests/lab_check.py``.)
"""

import asyncio
import base64
import json
import struct
import zlib
from pathlib import Path

import altair as alt
import nbformat
import pandas as pd
import pytest
from nbformat.sign import NotebookNotary

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
    configured = {
        server["ContentsManager"]["pre_save_hook"]: jupyter.pre_save,
        server["ServerApp"]["contents_manager_class"]: jupyter.ChapterContents,
    }
    for dotted, expected in configured.items():
        module, name = dotted.rsplit(".", 1)
        assert getattr(__import__(module, fromlist=[name]), name) is expected
    notification = settings["@jupyterlab/apputils-extension:notification"]
    assert notification == {"fetchNews": "false", "checkForUpdates": False}


def test_install_gives_lab_and_notebook_7_the_books_css(tmp_path):
    jupyter.install(tmp_path)
    server = json.loads(
        (tmp_path / "etc/jupyter/jupyter_server_config.json").read_text()
    )
    assert server["LabApp"]["custom_css"] is True  # Notebook 7 loads it anyway
    pages = server["ServerApp"]["tornado_settings"]
    # where JupyterLab serves /custom/ from, and where Notebook 7 reads it
    lab = Path(pages["static_custom_path"][0]) / "custom.css"
    notebook = Path(pages["page_config_data"]["jupyterConfigDir"]) / "custom"
    assert lab == notebook / "custom.css"
    assert lab.is_relative_to(tmp_path / "etc/jupyter")
    assert ".vega-embed" in lab.read_text()


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


class Notary:
    """A notary that has signed every notebook."""

    def check_signature(self, notebook: dict) -> bool:
        return True


class Contents:
    def __init__(self, root: Path) -> None:
        self.root_dir = str(root)
        self.notary = Notary()


def as_restored(cell: dict) -> dict:
    """A stored code cell as the save puts it back: trusted, as its chapter."""
    return {**cell, "metadata": {**cell["metadata"], "trusted": True}}


def code(cell_id: str, source: str, tags: list[str], started: str | None) -> dict:
    """A stored code cell as Jupyter writes it, ``started``: its timing."""
    metadata: dict = {"tags": tags}
    if started is not None:
        metadata["execution"] = {"iopub.execute_input": started}
    out = {"output_type": "stream", "name": "stdout", "text": f"{source}\n"}
    return {
        "cell_type": "code",
        "id": cell_id,
        "metadata": metadata,
        "source": source,
        "outputs": [out],
        "execution_count": 1,
    }


@pytest.fixture
def chapter(tmp_path) -> dict:
    """A stored chapter, 06_masks.ipynb: a timed cell, a try-it cell, another."""
    stored = {
        "cells": [
            code("a", "print(1)", [], "2026-01-01T00:00:00Z"),
            code("t", 'SENTENCE = "stored"', ["try-it"], "2026-01-01T00:01:00Z"),
            code("b", "print(2)", [], "2026-01-01T00:02:00Z"),
        ],
        "metadata": {"language_info": {"version": "3.11.9"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "06_masks.ipynb").write_text(json.dumps(stored))
    return stored


def as_read_then_run(stored: dict) -> dict:
    """The notebook a reader saves: every cell run again (no timings, new
    outputs), the try-it cell given new text, a cell added, another Python."""
    content = json.loads(json.dumps(stored))
    for cell in content["cells"]:
        cell["metadata"].pop("execution")
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x"}]
    content["cells"][1]["source"] = 'SENTENCE = "mine"'
    content["cells"].append(code("c", "print(3)", [], None))
    content["metadata"]["language_info"]["version"] = "3.12.0"
    return {"type": "notebook", "content": content}


@pytest.mark.parametrize("name", ["06_masks.ipynb", "06_masks.py"])
def test_saving_keeps_the_try_it_cells_and_the_timings_stored(
    tmp_path, monkeypatch, chapter, name
):
    monkeypatch.setenv("AT_SIZE", "full")
    model = as_read_then_run(chapter)
    jupyter.pre_save(model, name, contents_manager=Contents(tmp_path))
    a, t, b, c = model["content"]["cells"]
    assert t == as_restored(chapter["cells"][1])  # as stored, all of it
    timings = [cell["metadata"].get("execution") for cell in (a, b, c)]
    assert timings == [
        {"iopub.execute_input": "2026-01-01T00:00:00Z"},
        {"iopub.execute_input": "2026-01-01T00:02:00Z"},
        None,  # a new cell has no stored timing
    ]
    assert a["outputs"][0]["text"] == "x"  # a re-run cell keeps its new output
    assert model["content"]["metadata"] == chapter["metadata"]


def test_a_try_it_cell_with_a_new_id_takes_the_stored_one_of_its_rank(
    tmp_path, monkeypatch, chapter
):
    monkeypatch.setenv("AT_SIZE", "full")
    model = as_read_then_run(chapter)
    model["content"]["cells"][1]["id"] = "renamed"
    jupyter.pre_save(model, "06_masks.ipynb", contents_manager=Contents(tmp_path))
    assert model["content"]["cells"][1] == as_restored(chapter["cells"][1])


@pytest.mark.parametrize(
    ("size", "name", "kept"),
    [
        ("ci", "06_masks.ipynb", "all"),
        ("ci", "06_masks.py", "all"),
        ("ci", "06_masks_mine.ipynb", "nothing"),  # a copy under a new name
        ("full", "06_masks.ipynb", "try-it"),
    ],
)
def test_at_ci_size_a_save_writes_the_stored_chapter_silently(
    tmp_path, monkeypatch, chapter, size, name, kept
):
    monkeypatch.setenv("AT_SIZE", size)
    model = as_read_then_run(chapter)
    saved = json.loads(json.dumps(model))
    jupyter.pre_save(model, name, contents_manager=Contents(tmp_path))  # no error
    cells = model["content"]["cells"]
    if kept == "all":
        assert cells == [as_restored(cell) for cell in chapter["cells"]]
    elif kept == "nothing":
        assert model == saved
    else:
        assert (
            len(cells) == 4
            and cells[0]["outputs"] != chapter["cells"][0]["outputs"]
        )


def test_the_stand_in_is_a_one_pixel_png():
    png = base64.b64decode(jupyter.STAND_IN_PNG)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + data)
        chunks[kind] = data
        at += 12 + length
    assert list(chunks) == [b"IHDR", b"IDAT", b"IEND"]
    assert struct.unpack(">II", chunks[b"IHDR"][:8]) == (1, 1)
    assert zlib.decompress(chunks[b"IDAT"]) == bytes(5)  # filter 0, clear RGBA


def test_a_chapter_read_by_the_server_has_a_stand_in_in_each_chart(tmp_path):
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("chart")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data", {rendering.MIME_TYPE: {"mark": "bar"}}
        ),
        nbformat.v4.new_output("display_data", {"text/plain": "a table"}),
    ]
    notebook.cells = [cell]
    nbformat.write(notebook, tmp_path / "06_masks.ipynb")
    contents = jupyter.ChapterContents(root_dir=str(tmp_path))
    model = asyncio.run(contents.get("06_masks.ipynb"))
    chart, table = model["content"]["cells"][0]["outputs"]
    assert chart["data"]["image/png"] == jupyter.STAND_IN_PNG
    assert "image/png" not in table["data"]
    jupyter.drop_chart_pngs(model)  # and saving leaves it out again
    assert model["content"]["cells"][0]["outputs"][0]["data"] == {
        rendering.MIME_TYPE: {"mark": "bar"}
    }


def test_trust_signs_the_chapters_only(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    for name in ("06_masks.ipynb", "scratch.ipynb"):
        cells = [nbformat.v4.new_markdown_cell(name)]  # two different notebooks
        nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / name)
    assert jupyter.trust(tmp_path) == [tmp_path / "06_masks.ipynb"]
    notary = NotebookNotary()
    signed = {
        name: notary.check_signature(nbformat.read(tmp_path / name, as_version=4))
        for name in ("06_masks.ipynb", "scratch.ipynb")
    }
    assert signed == {"06_masks.ipynb": True, "scratch.ipynb": False}
