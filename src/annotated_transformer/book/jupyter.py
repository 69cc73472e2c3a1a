"""Jupyter set up for the book: the named kernel, chapters' ``.py`` files opened as
notebooks, and a guard on saving.

``python -m annotated_transformer.book.jupyter`` (run by ``make setup``, or by
hand without make) sets up the Jupyter of this environment (``sys.prefix``):

- the kernel "Transformers from Scratch", this Python, which imports the package;
- JupyterLab opens a ``.py`` chapter as a notebook (Jupytext's viewer), so editing
  and saving it keeps the pair in step;
- the server refuses to save a chapter while ``AT_SIZE=ci`` (chapters shrunk for
  CI): its outputs would replace the full-size ones stored in the ``.ipynb``;
- it saves a chart as the kernel wrote it: JupyterLab adds a PNG of each chart it
  draws to the notebook (tens of kB a chart), which the save leaves out.

With ``--user`` it registers only the kernel, for the user's own Jupyter (conda,
pipx, an editor): any Jupyter then runs the chapters with this environment.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from annotated_transformer.book.rendering import MIME_TYPE
from annotated_transformer.book.sizes import run_size

KERNEL = "transformers-from-scratch"
DISPLAY_NAME = "Transformers from Scratch"
CHAPTER = re.compile(r"^\d\d_\w+\.(ipynb|py)$")
HOOK = "annotated_transformer.book.jupyter.pre_save"
VIEWERS = {"python": "Jupytext Notebook"}  # Jupytext's own setting


def refuse_ci_outputs(
    model: dict[str, Any], path: str, contents_manager: Any, **kwargs: Any
) -> None:
    """Jupyter's pre-save hook: no stored chapter is overwritten from a CI-size
    kernel.

    The server's ``AT_SIZE`` is its kernels' run size. A chapter is a file named
    ``NN_name.ipynb`` or ``.py`` whose ``.ipynb`` exists; a copy under a new name
    is saved. The save fails with one line that JupyterLab shows; nothing on disk
    changes.
    """
    from tornado.web import HTTPError  # the server's; never needed by a chapter

    stored = (Path(contents_manager.root_dir) / path).with_suffix(".ipynb")
    if run_size() == "ci" and CHAPTER.match(stored.name) and stored.is_file():
        raise HTTPError(
            409,
            f"not saved: AT_SIZE=ci, and saving {path} would replace the chapter's "
            "full-size outputs. Start Jupyter without AT_SIZE (make lab) to save, "
            "or File > Save As under another name.",
        )


def drop_chart_pngs(model: dict[str, Any]) -> None:
    """Leave out the PNG that JupyterLab adds to every chart output it draws."""
    if model.get("type") != "notebook" or not isinstance(
        model.get("content"), dict
    ):
        return
    for cell in model["content"].get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if MIME_TYPE in data:
                data.pop("image/png", None)


def pre_save(
    model: dict[str, Any], path: str, contents_manager: Any, **kwargs: Any
) -> None:
    """The pre-save hook of this environment's Jupyter server."""
    refuse_ci_outputs(model, path, contents_manager)
    drop_chart_pngs(model)


def _merge(settings: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(settings.get(key), dict):
            _merge(settings[key], value)
        else:
            settings[key] = value


def _merge_json(path: Path, update: dict[str, Any]) -> None:
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


def install(prefix: Path) -> None:
    """Set up the Jupyter of the environment in ``prefix``."""
    config = prefix / "etc" / "jupyter"
    _merge_json(
        config / "labconfig" / "default_setting_overrides.json",
        {"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": VIEWERS}},
    )
    _merge_json(
        config / "jupyter_server_config.json",
        {"ContentsManager": {"pre_save_hook": HOOK}},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--user",
        action="store_true",
        help="only register the kernel, for the user's own Jupyter installs",
    )
    args = parser.parse_args(argv)
    spec = install_kernel(args.user)
    if not args.user:
        install(Path(sys.prefix))
    print(f'Jupyter: kernel "{DISPLAY_NAME}" in {spec}')
    return 0


if __name__ == "__main__":
    sys.exit(main())
