"""Run sizes and the runs folder: what makes one chapter run in seconds in CI and at
full size for its stored outputs.

- ``AT_SIZE``: ``full`` (default) runs chapters at the size their stored outputs
  were made with; ``ci`` shrinks every training run so the whole book
  re-executes in minutes on a CPU.
- :func:`runs_dir`: the repository's ``runs/`` folder, where
  ``python -m annotated_transformer TASK train --out runs/NAME`` leaves finished
  runs for the chapters to reuse.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

from annotated_transformer.paths import repository_root

T = TypeVar("T")

SIZES = ("ci", "full")


def run_size() -> str:
    """The run size selected by ``AT_SIZE``: ``"ci"`` or ``"full"``."""
    size = os.environ.get("AT_SIZE", "full").strip().lower()
    if size not in SIZES:
        raise ValueError(
            f"AT_SIZE={size!r} is not a run size; use one of {', '.join(SIZES)}"
        )
    return size


def pick(ci: T, full: T) -> T:
    """Return ``ci`` in a CI-sized run and ``full`` otherwise (one
    switch for every chapter)."""
    return ci if run_size() == "ci" else full


def runs_dir(start: str | Path | None = None) -> Path:
    """``runs/`` in the repository that holds ``start``
    (default: the working directory).

    The repository is the nearest folder, upwards, with a ``pyproject.toml``; a
    chapter runs in ``notebooks/``, a command line usually at the top. Outside
    a repository: ``./runs``.
    """
    root = repository_root(start) or Path(start or Path.cwd()).resolve()
    return root / "runs"
