"""Run-time settings read from the environment: run size, data mirror and cache directory.

Every chapter and command line reads these, so one switch changes them all:

- ``AT_SIZE``: ``full`` (default) runs chapters at the size their stored outputs were made with;
  ``ci`` shrinks every training run so the whole book re-executes in minutes on a CPU.
- ``AT_DATA_MIRROR``: a folder laid out like the canonical downloads (``multi30k/``, ``imdb/``,
  ``chars/``); files found there are checksum-verified and used instead of the network.
- ``AT_CACHE_DIR``: where downloads are kept (default ``~/.cache/annotated_transformer``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

SIZES = ("ci", "full")


def run_size() -> str:
    """The run size selected by ``AT_SIZE``: ``"ci"`` or ``"full"``."""
    size = os.environ.get("AT_SIZE", "full").strip().lower()
    if size not in SIZES:
        raise ValueError(f"AT_SIZE={size!r} is not a run size; use one of {', '.join(SIZES)}")
    return size


def pick(ci: T, full: T) -> T:
    """Return ``ci`` in a CI-sized run and ``full`` otherwise (one switch for every chapter)."""
    return ci if run_size() == "ci" else full


def data_mirror() -> Path | None:
    """The local mirror folder from ``AT_DATA_MIRROR``, or None when unset."""
    mirror = os.environ.get("AT_DATA_MIRROR")
    return Path(mirror).expanduser() if mirror else None


def cache_dir() -> Path:
    """The download cache from ``AT_CACHE_DIR`` (default ``~/.cache/annotated_transformer``)."""
    default = Path.home() / ".cache" / "annotated_transformer"
    return Path(os.environ.get("AT_CACHE_DIR", default)).expanduser()
