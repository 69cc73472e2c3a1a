"""Sphinx extension: the book with or without the exercises' solutions.

Each solution toggle of a chapter is a ``dropdown`` holding a ``literalinclude`` of
a function in ``notebooks/exercises/solutions/`` (beside the starters, outside the
package). When the solutions are withheld, the whole toggle is replaced by one line
saying so, instead of failing the build. They are withheld when

- the build runs with ``AT_SOLUTIONS=0``, or
- the solution file is missing (a copy without ``solutions/``; ``make handout``'s
  student edition cuts the toggles themselves).

A chapter is read again whenever one of its solutions changes between shown and
withheld, so switching either way needs no clean build.
"""

import os
from pathlib import Path

from docutils import nodes
from sphinx.directives.code import LiteralInclude

SOLUTIONS = "exercises/solutions/"
WITHHELD = "The solution is not included in this copy of the book."
WITHHELD_CLASS = "solution-withheld"


class SolutionInclude(LiteralInclude):
    """``literalinclude`` that gives way to a note when a solution is withheld."""

    def run(self) -> list[nodes.Node]:
        if SOLUTIONS in self.arguments[0]:
            path = self.env.relfn2path(self.arguments[0])[1]
            withheld = _withheld(self.config, path)
            seen = _seen(self.env).setdefault(self.env.docname, {})
            seen[path] = withheld
            if withheld:
                note = nodes.paragraph(WITHHELD, WITHHELD, classes=[WITHHELD_CLASS])
                return [note]
        return super().run()


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


def _drop_withheld_toggles(app, doctree: nodes.document) -> None:
    """Replace each dropdown whose solution is withheld by the note alone."""
    for note in list(doctree.findall(nodes.paragraph)):
        if WITHHELD_CLASS not in note["classes"]:
            continue
        toggle = note.parent
        while toggle is not None and toggle.get("design_component") != "dropdown":
            toggle = toggle.parent
        if toggle is not None:
            toggle.replace_self(note.deepcopy())


def setup(app):
    shown = os.environ.get("AT_SOLUTIONS", "1") != "0"
    app.add_config_value("exercise_solutions", shown, "env")
    app.add_directive("literalinclude", SolutionInclude, override=True)
    app.connect("doctree-read", _drop_withheld_toggles)
    app.connect("env-get-outdated", _outdated)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
