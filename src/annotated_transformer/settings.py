"""Where the data comes from, read from the environment: the data mirror and the cache.

Every chapter and command line reads these, so one switch changes them all:

- ``AT_DATA_MIRROR``: a folder laid out like the canonical downloads (``multi30k/``, ``imdb/``,
  ``chars/``); files found there are checksum-verified and used instead of the network.
- ``AT_CACHE_DIR``: where downloads are kept (default ``~/.cache/annotated_transformer``).
"""

from __future__ import annotations

import os
from pathlib import Path


def data_mirror() -> Path | None:
    """The local mirror folder from ``AT_DATA_MIRROR``, or None when unset."""
    mirror = os.environ.get("AT_DATA_MIRROR")
    return Path(mirror).expanduser() if mirror else None


def cache_dir() -> Path:
    """The download cache from ``AT_CACHE_DIR`` (default ``~/.cache/annotated_transformer``)."""
    default = Path.home() / ".cache" / "annotated_transformer"
    return Path(os.environ.get("AT_CACHE_DIR", default)).expanduser()
