"""Where the data comes from, read from the environment: the
data mirror and the cache.

Every chapter and command line reads these, so one switch changes them all:

- ``AT_DATA_MIRROR``: a folder laid out like the canonical downloads
  (``multi30k/``, ``imdb/``, ``chars/``); files found there are checksum-verified
  and used instead of the network.
- ``AT_CACHE_DIR``: where downloads are kept (default
  ``~/.cache/annotated_transformer``).
- ``AT_GPT2_DIR``: the folder of GPT-2's published files (default: the cache's
  ``gpt2/``).
- ``AT_RESULTS``: the run records (default: the repository's ``results/``).
"""

from __future__ import annotations

import os
from pathlib import Path


def data_mirror() -> Path | None:
    """The local mirror folder from ``AT_DATA_MIRROR``, or None when unset."""
    mirror = os.environ.get("AT_DATA_MIRROR")
    return Path(mirror).expanduser() if mirror else None


def cache_dir() -> Path:
    """The download cache from ``AT_CACHE_DIR`` (default
    ``~/.cache/annotated_transformer``)."""
    default = Path.home() / ".cache" / "annotated_transformer"
    return Path(os.environ.get("AT_CACHE_DIR", default)).expanduser()


def gpt2_dir() -> Path:
    """GPT-2's files: ``AT_GPT2_DIR``, else ``gpt2/`` in :func:`cache_dir`."""
    folder = os.environ.get("AT_GPT2_DIR")
    return Path(folder).expanduser() if folder else cache_dir() / "gpt2"


def repository_root(start: str | Path | None = None) -> Path | None:
    """The nearest folder upwards from ``start`` (default: the working directory)
    with a ``pyproject.toml``, or None: the repository a command line or a chapter
    (in ``notebooks/``) runs in."""
    here = Path(start or Path.cwd()).resolve()
    return next(
        (f for f in (here, *here.parents) if (f / "pyproject.toml").is_file()), None
    )


def results_dir() -> Path:
    """Where run records live: ``$AT_RESULTS``, else the repository's ``results/``.
    Wherever that is, a setting names a record in it as ``results/NAME``."""
    if os.environ.get("AT_RESULTS"):
        return Path(os.environ["AT_RESULTS"]).expanduser().resolve()
    return (repository_root() or Path.cwd()) / "results"
