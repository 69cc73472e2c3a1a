"""Jupyter set up for the book: the named kernel, chapters' ``.py`` files opened as
notebooks, and saves that keep what a chapter stores.

``python -m annotated_transformer.book.jupyter`` (run by ``make setup``, or by
hand without make) sets up the Jupyter of this environment (``sys.prefix``):

- the kernel "Transformers from Scratch", this Python, which imports the package;
- JupyterLab opens a ``.py`` chapter as a notebook (Jupytext's viewer), so editing
  and saving it keeps the pair in step;
- saving a chapter keeps what it stores: its try-it cells (what a reader typed and
  the answer stay in the open notebook only), every cell's stored timing, and,
  while ``AT_SIZE=ci`` (chapters shrunk for CI), all of it: CI-size outputs never
  replace the full-size ones stored in the ``.ipynb`` (see :func:`keep_stored`);
- it saves a chart as the kernel wrote it: JupyterLab adds a PNG of each chart it
  draws to the notebook (tens of kB a chart), which the save leaves out.

With ``--user`` it registers only the kernel, for the user's own Jupyter (conda,
pipx, an editor): any Jupyter then runs the chapters with this environment.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import re
import struct
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

from annotated_transformer.book.rendering import MIME_TYPE
from annotated_transformer.book.sizes import run_size

KERNEL = "transformers-from-scratch"
DISPLAY_NAME = "Transformers from Scratch"
CHAPTER = re.compile(r"^\d\d_\w+\.(ipynb|py)$")
HOOK = "annotated_transformer.book.jupyter.pre_save"
VIEWERS = {"python": "Jupytext Notebook"}  # Jupytext's own setting
CONTENTS = "annotated_transformer.book.jupyter.ChapterContents"
# In command mode JupyterLab takes the arrow keys to move between cells, even from
# a focused slider or dropdown of a chart: the same shortcuts, but not from those.
FOCUSED = ".jp-Notebook.jp-mod-commandMode:not(.jp-mod-readWrite) :focus"
ARROWS = {
    "ArrowDown": "notebook:move-cursor-down",
    "ArrowUp": "notebook:move-cursor-up",
    "ArrowLeft": "notebook:move-cursor-heading-above-or-collapse",
    "ArrowRight": "notebook:move-cursor-heading-below-or-expand",
}
SHORTCUTS = [
    {"command": command, "keys": [key], "selector": FOCUSED, **change}
    for key, command in ARROWS.items()
    for change in (
        {"disabled": True},
        {"selector": f"{FOCUSED}:not(input):not(select)"},
    )
]
# JupyterLab's settings: .py chapters open as notebooks (Jupytext's viewer); no
# prompt to fetch Jupyter's news, no update check (a first start asks nothing);
# a chart's controls take the arrow keys.
LAB = {
    "@jupyterlab/docmanager-extension:plugin": {"defaultViewers": VIEWERS},
    "@jupyterlab/shortcuts-extension:shortcuts": {"shortcuts": SHORTCUTS},
    "@jupyterlab/apputils-extension:notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}
# The book's CSS for JupyterLab and Notebook 7 (their ``custom/custom.css``): a
# chart scales down to its cell, its actions menu beside it rather than past the
# cell's edge or over its title, a solution's code wraps, and the menu bar holds
# all its menus: a phone's 390 px scrolls nothing sideways and cuts nothing.
CSS = """\
/* Transformers from Scratch (python -m annotated_transformer.book.jupyter) */
.jp-RenderedVegaCommon5 .vega-embed {
  display: block;
  width: fit-content;
  max-width: 100%;
  box-sizing: border-box;
}
.jp-RenderedVegaCommon5 .chart-wrapper {
  max-width: 100%;
}
.jp-RenderedVegaCommon5 .chart-wrapper > .marks {
  max-width: 100%;
  height: auto !important;
}
.jp-RenderedVegaCommon5 .vega-bindings {
  max-width: 100%;
  overflow-wrap: anywhere;
}
.jp-MarkdownCell pre,
.jp-MarkdownCell pre code {
  white-space: pre-wrap !important;
  overflow-wrap: anywhere;
}
@media (max-width: 480px) {
  #jp-MainMenu .lm-MenuBar-item {
    padding: 0 4px;
  }
}
"""
TRY_IT = "try-it"  # the tag of a try-it cell (annotated_transformer.book.try_it)


def stored_chapter(path: str, contents_manager: Any) -> dict[str, Any] | None:
    """The chapter's notebook as stored on disk, when ``path`` (relative to the
    server's root) is a chapter: a file named ``NN_name.ipynb`` or ``.py`` whose
    ``.ipynb`` exists. A copy under a new name is no chapter."""
    stored = (Path(contents_manager.root_dir) / path).with_suffix(".ipynb")
    if not (CHAPTER.match(stored.name) and stored.is_file()):
        return None
    # as Jupyter reads it: each source and output text one string
    return nbformat.read(stored, as_version=4)


def keep_stored(
    model: dict[str, Any], stored: dict[str, Any], trusted: bool
) -> None:
    """What a reader does in a chapter never changes what it stores: the
    notebook in ``model`` (about to be saved) gets back the stored notebook
    metadata (the kernel's Python version is the reader's), the stored version of
    each try-it cell (tagged ``try-it``: the reader's text and the model's
    answer stay in the open notebook) and each stored cell's ``execution``
    timing (what ``make times`` reads; JupyterLab drops it when a cell runs).
    At ``AT_SIZE=ci`` (chapters shrunk for CI) every cell is the stored one:
    CI-size outputs must not replace the full-size ones, so the save writes
    the chapter as it was, and no dialog interrupts the reader.

    Cells are matched by their id; a try-it cell with a new id takes the
    stored try-it cell at the same rank. A stored cell put back is ``trusted``
    as the stored chapter is (so the save signs it again). Changed in place:
    Jupytext writes the ``.py`` from these same cells after the ``.ipynb``.
    """
    content = model["content"]
    content["metadata"].clear()
    content["metadata"].update(copy.deepcopy(stored["metadata"]))
    cells = content["cells"]
    if run_size() == "ci":
        cells[:] = [restored(cell, trusted) for cell in stored["cells"]]
        return
    by_id = {cell.get("id"): cell for cell in stored["cells"]}
    try_its = [cell for cell in stored["cells"] if TRY_IT in tags(cell)]
    rank = 0
    for cell in cells:
        if TRY_IT in tags(cell):
            kept = by_id.get(cell.get("id")) or (try_its[rank:] or [None])[0]
            rank += 1
            if kept is not None:
                cell.clear()
                cell.update(restored(kept, trusted))
                continue
        timing = by_id.get(cell.get("id"), {}).get("metadata", {}).get("execution")
        if timing is not None:
            cell.setdefault("metadata", {})["execution"] = copy.deepcopy(timing)


def restored(cell: dict[str, Any], trusted: bool) -> dict[str, Any]:
    """A copy of the stored ``cell`` to save, a code cell marked ``trusted``."""
    cell = copy.deepcopy(cell)
    if cell.get("cell_type") == "code":
        cell.setdefault("metadata", {})["trusted"] = trusted
    return cell


def tags(cell: dict[str, Any]) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def drop_chart_pngs(model: dict[str, Any]) -> None:
    """Leave out the PNG that JupyterLab adds to every chart output it draws."""
    for cell in model["content"].get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if MIME_TYPE in data:
                data.pop("image/png", None)


def one_pixel_png() -> str:
    """A 1 x 1 transparent PNG, base64-encoded (how notebooks store images)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return (
            struct.pack(">I", len(data))
            + body
            + struct.pack(">I", zlib.crc32(body))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)  # 8-bit RGBA
    pixel = zlib.compress(b"\x00" + bytes(4))  # filter byte, one clear pixel
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixel)
    return base64.b64encode(png + chunk(b"IEND", b"")).decode("ascii")


STAND_IN_PNG = one_pixel_png()


def add_chart_stand_ins(notebook: dict[str, Any]) -> None:
    """Give each chart output a stand-in PNG, so that JupyterLab leaves it as it is.

    JupyterLab (and Notebook 7) draws a chart, then writes a PNG of it into the
    output unless the output has one, which marks a notebook that was only read
    as modified ("Save changes before closing?"). The chart is still drawn from
    its Vega-Lite specification; the stand-in exists only in the browser, since
    saving leaves out every chart's PNG (:func:`drop_chart_pngs`).
    """
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if MIME_TYPE in data and not data.get("image/png"):
                data["image/png"] = STAND_IN_PNG


class ChapterContents(AsyncLargeFileManager):
    """The server's contents manager (Jupytext's pairs are built on it): the
    notebooks it reads carry a stand-in PNG in each chart
    (:func:`add_chart_stand_ins`)."""

    async def get(
        self,
        path: str,
        content: bool = True,
        type: str | None = None,
        format: str | None = None,
        require_hash: bool = False,
    ) -> dict[str, Any]:
        model = await super().get(path, content, type, format, require_hash)
        if content and model.get("type") == "notebook":
            add_chart_stand_ins(model["content"])
        return model


def trust(folder: Path) -> list[Path]:
    """Trust the chapters in ``folder`` as they are stored (``jupyter trust``):
    their stored outputs are shown as the book wrote them, with no "Not
    Trusted" mark. ``make lab`` does it for the checkout's chapters; a chapter
    changed afterwards is trusted again only when Jupyter saves it."""
    from nbformat import read
    from nbformat.sign import NotebookNotary

    notary = NotebookNotary()
    chapters = sorted(p for p in folder.glob("*.ipynb") if CHAPTER.match(p.name))
    for chapter in chapters:
        notary.sign(read(chapter, as_version=4))
    return chapters


def pre_save(
    model: dict[str, Any], path: str, contents_manager: Any, **kwargs: Any
) -> None:
    """The pre-save hook of this environment's Jupyter server."""
    if model.get("type") != "notebook" or not isinstance(
        model.get("content"), dict
    ):
        return
    stored = stored_chapter(path, contents_manager)
    if stored is not None:
        trusted = contents_manager.notary.check_signature(stored)
        keep_stored(model, stored, trusted)
    drop_chart_pngs(model)


def _merge(settings: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(settings.get(key), dict):
            _merge(settings[key], value)
        else:
            settings[key] = value


def merge_json(path: Path, update: dict[str, Any]) -> None:
    """Write ``update`` into the JSON settings in ``path``, keeping the rest."""
    settings = json.loads(path.read_text()) if path.is_file() else {}
    _merge(settings, update)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n")


def install_kernel(user: bool) -> Path:
    """Register this Python as the kernel ``KERNEL``; where its spec went."""
    from ipykernel.kernelspec import install

    prefix = None if user else sys.prefix
    return Path(
        install(
            user=user, prefix=prefix, kernel_name=KERNEL, display_name=DISPLAY_NAME
        )
    )


def configure(config: Path) -> None:
    """Write the book's Jupyter settings into the configuration folder
    ``config`` (an environment's ``etc/jupyter``, or a ``JUPYTER_CONFIG_DIR``)."""
    merge_json(config / "labconfig" / "default_setting_overrides.json", LAB)
    custom = config / "custom"
    custom.mkdir(parents=True, exist_ok=True)
    (custom / "custom.css").write_text(CSS)
    # Both read custom.css from the user's folder (~/.jupyter) unless told
    # otherwise: JupyterLab through the server's static_custom_path, Notebook 7
    # through its page's jupyterConfigDir.
    pages = {"static_custom_path": [str(custom)]}
    pages["page_config_data"] = {"jupyterConfigDir": str(config)}
    merge_json(
        config / "jupyter_server_config.json",
        {
            "ServerApp": {
                "contents_manager_class": CONTENTS,
                "tornado_settings": pages,
            },
            "ContentsManager": {"pre_save_hook": HOOK},
            "LabApp": {"custom_css": True},
        },
    )


def install(prefix: Path) -> None:
    """Set up the Jupyter of the environment in ``prefix``."""
    configure(prefix / "etc" / "jupyter")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--user",
        action="store_true",
        help="only register the kernel, for the user's own Jupyter installs",
    )
    parser.add_argument(
        "--trust",
        type=Path,
        metavar="FOLDER",
        help="also trust the chapters in FOLDER as stored (make lab)",
    )
    args = parser.parse_args(argv)
    spec = install_kernel(args.user)
    if not args.user:
        install(Path(sys.prefix))
    print(f'Jupyter: kernel "{DISPLAY_NAME}" in {spec}')
    if args.trust:
        print(f"Jupyter: {len(trust(args.trust))} chapters trusted as stored")
    return 0


if __name__ == "__main__":
    sys.exit(main())
