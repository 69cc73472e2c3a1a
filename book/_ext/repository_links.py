"""Sphinx extension: chapters' links to book pages work in Jupyter and on the site.

A chapter lives in ``notebooks/`` and the book's own pages in ``book/``, so a
chapter opened in Jupyter reaches the References page as
``../book/references.md``. The site serves the chapters from ``book/notebooks/``
(a link to ``../notebooks``), one level below those pages: there the same page is
``../references.md``. Chapters are written for Jupyter, and this rewrites their
links to ``book/`` pages as the site needs them before the page is parsed.
"""

IN_REPOSITORY = "](../book/"
ON_SITE = "](../"


def _site_links(app, docname: str, source: list[str]) -> None:
    if docname.startswith("notebooks/"):
        source[0] = source[0].replace(IN_REPOSITORY, ON_SITE)


def setup(app):
    app.connect("source-read", _site_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
