"""Shared fixtures: the local data mirror (``AT_DATA_MIRROR``, else ``../shared/data``).

Tests that need the real datasets take one of the ``*_mirror`` fixtures; without the data they
are skipped with a reason, so the unit tests also run on a machine that has none.
"""

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def _mirror(subdir: str) -> Path:
    path = Path(os.environ.get("AT_DATA_MIRROR") or SHARED).resolve()
    if not (path / subdir).is_dir():
        pytest.skip(f"no {subdir}/ in the data mirror {path}; set AT_DATA_MIRROR to shared/data")
    return path


@pytest.fixture(scope="session")
def multi30k_mirror() -> Path:
    return _mirror("multi30k")


@pytest.fixture(scope="session")
def imdb_mirror() -> Path:
    return _mirror("imdb")


@pytest.fixture(scope="session")
def chars_mirror() -> Path:
    return _mirror("chars")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: a second intra-op thread gains nothing, and on a busy machine it waits."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
