"""Sphinx extension: the book with or without the exercises' solutions.

Each solution toggle of a chapter is a ``dropdown`` titled "Solution" that shows a
function of ``notebooks/exercises/solutions/chNN.py`` (beside the starters, outside
the package) as a code block, written there by ``make listings``
(``annotated_transformer.exercises.toggles``). When the solutions are withheld, the
whole toggle is replaced by one line saying so. They are withheld when

- the build runs with ``AT_SOLUTIONS=0``, or
- the solution file is missing (a copy without ``solutions/``; ``make handout``'s
  student edition cuts the toggles themselves).

A chapter is read again whenever one of its solutions changes between shown and
withheld, so switching either way needs no clean build.
"""

import os
from pathlib import Path

from docutils import nodes

WITHHELD = "The solution is not included in this copy of the book."
WITHHELD_CLASS = "solution-withheld"


def _solutions(app, docname: str) -> Path | None:
    """notebooks/exercises/solutions/chNN.py for chapter NN, else None."""
    page = Path(docname)
    if page.parent != Path("notebooks") or not page.name[:2].isdigit():
        return None
    solutions = Path(app.srcdir, "notebooks", "exercises", "solutions")
    return solutions / f"ch{page.name[:2]}.py"


def _withheld(config, path: str) -> bool:
    return not config.exercise_solutions or not Path(path).is_file()


def _seen(env) -> dict[str, dict[str, bool]]:
    """docname -> {solution file -> withheld when the chapter was last read}."""
    if not hasattr(env, "exercise_solutions"):
        env.exercise_solutions = {}
    return env.exercise_solutions


def _outdated(app, env, added, changed, removed) -> list[str]:
    """Chapters whose solutions switched between shown and withheld since read."""
    return [
        docname
        for docname, files in _seen(env).items()
        if any(_withheld(app.config, p) != w for p, w in files.items())
    ]


def _purge(app, env, docname: str) -> None:
    _seen(env).pop(docname, None)


def _merge(app, env, docnames, other) -> None:
    _seen(env).update({d: _seen(other)[d] for d in docnames if d in _seen(other)})


def _toggles(doctree: nodes.document) -> list[nodes.Element]:
    """The dropdowns titled "Solution" (sphinx-design's title is a rubric)."""
    return [
        node
        for node in doctree.findall(nodes.container)
        if node.get("design_component") == "dropdown"
        and isinstance(node.children[0], nodes.rubric)
        and node.children[0].astext() == "Solution"
    ]


def _drop_withheld_toggles(app, doctree: nodes.document) -> None:
    """Replace each solution toggle by the note alone when its file is withheld."""
    path = _solutions(app, app.env.docname)
    toggles = _toggles(doctree) if path else []
    if not toggles:
        return
    withheld = _withheld(app.config, str(path))
    _seen(app.env)[app.env.docname] = {str(path): withheld}
    if withheld:
        for toggle in toggles:
            note = nodes.paragraph(WITHHELD, WITHHELD, classes=[WITHHELD_CLASS])
            toggle.replace_self(note)


def setup(app):
    shown = os.environ.get("AT_SOLUTIONS", "1") != "0"
    app.add_config_value("exercise_solutions", shown, "env")
    app.connect("doctree-read", _drop_withheld_toggles)
    app.connect("env-get-outdated", _outdated)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
