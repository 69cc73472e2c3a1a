"""Sphinx extension: on the site, a cell that waits for the reader's input says how
to run it.

A try-it cell (one that calls a ``*_try_it`` function of
``annotated_transformer.book.explore``) takes the reader's own sentence, review or
prompt, which needs a Python kernel: the site shows the output stored when the
chapter was executed. Before each such cell, the page gets a note saying how to
run the chapter in Jupyter. The note is the site's, not the chapter's: in Jupyter
the cell simply runs.
"""

import json
import re

TRY_IT = re.compile(r"\b(?:\w+_)?try_it\(")
NOTE = """\
:::{{admonition}} This cell runs in Jupyter
:class: note
This page shows the output stored when the chapter was executed. To try your own
input, open the chapter in Jupyter: in a clone of the repository, `make lab` starts
JupyterLab with the book's kernel on `notebooks/`, where this chapter is
`{notebook}` (its `.py` twin opens as the same notebook). Run the cells from the
top, then edit this one and run it.
:::"""


def _notes_before_try_it(app, docname: str, source: list[str]) -> None:
    """Insert the note before each try-it cell of a chapter (``source-read``)."""
    if not docname.startswith("notebooks/") or "try_it(" not in source[0]:
        return
    notebook = json.loads(source[0])
    text = NOTE.format(notebook=docname.split("/", 1)[1] + ".ipynb")
    cells = []
    for cell in notebook["cells"]:
        code = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
        if TRY_IT.search(code):
            cells.append({"cell_type": "markdown", "metadata": {}, "source": text})
        cells.append(cell)
    notebook["cells"] = cells
    source[0] = json.dumps(notebook)


def setup(app):
    app.connect("source-read", _notes_before_try_it)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
