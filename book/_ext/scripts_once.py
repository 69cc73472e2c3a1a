"""Sphinx extension: each script of a page is included once.

sphinx-thebe adds its inline configuration (``const THEBE_JS_URL = ...``) from an
event that runs before every reading of the sources, and under Jupyter Book it
reached every page twice: the browser stopped at the second declaration
("Identifier 'THEBE_JS_URL' has already been declared"). This drops a script
identical to one before it (inline scripts: the same body), as the page is written.
"""


def _key(script) -> tuple:
    attributes = tuple(sorted(getattr(script, "attributes", {}).items()))
    # an inline script is added once with the file name None, once with ""
    return str(getattr(script, "filename", script) or ""), attributes


def _scripts_once(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        if _key(script) not in seen:
            seen.add(_key(script))
            kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _scripts_once)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
