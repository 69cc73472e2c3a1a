"""A pytest plugin for nbval, loaded by ``make nbval`` (``-p
annotated_transformer.book.nbval_json``): JSON outputs are compared as text, like
the others.

A chart is stored as a Vega-Lite MIME bundle (a JSON object, see
``annotated_transformer.book.rendering``). nbval applies the patterns of
``tests/nbval_sanitize.cfg`` (four decimals, a data set's hash name) only to
outputs that are strings and compares the rest exactly, so a chart stored on one
CPU would fail on another by a last digit. Here a JSON output is written out as
sorted, indented text first (whole numbers as ints, as JupyterLab saves them), and
then sanitized and compared like any text. (A plugin here rather than a
``conftest.py`` beside the chapters: every ``.py`` in ``notebooks/`` is a chapter.)
"""

import json

from nbval.plugin import IPyNbCell

from annotated_transformer.book.rendering import plain_numbers

_sanitize_text = IPyNbCell.sanitize


def _sanitize(self: IPyNbCell, value: object) -> object:
    if isinstance(value, dict | list):
        value = json.dumps(
            plain_numbers(value), indent=1, sort_keys=True, ensure_ascii=False
        )
    return _sanitize_text(self, value)


IPyNbCell.sanitize = _sanitize
