"""Shared fixtures: the local data mirror (``AT_DATA_MIRROR``,
else ``../shared/data``).

Tests that need the real datasets take one of the ``*_mirror`` fixtures;
without the data they are skipped with a reason, so the unit tests also run
on a machine that has none.
"""

import contextlib
import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def _mirror(subdir: str) -> Path:
    path = Path(os.environ.get("AT_DATA_MIRROR") or SHARED).resolve()
    if not (path / subdir).is_dir():
        pytest.skip(
            f"no {subdir}/ in the data mirror {path}; set AT_DATA_MIRROR to "
            "shared/data"
        )
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
    """Tiny models: a second intra-op thread gains nothing, and on a
    busy machine it waits."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def torchrun():
    """Train under torchrun (``python -m annotated_transformer.launch``, which
    runs it) on CPU processes (gloo); checks it ran.

    ``torchrun(task, out, settings, nproc=2, env=None)`` runs
    ``task train --out out`` with each setting as ``--set`` and one thread per
    process.
    """

    def run(
        task: str, out: Path, settings: list[str], *, nproc: int = 2, env=None
    ) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
        command = [sys.executable, "-m", "annotated_transformer.launch"]
        command += ["--standalone", f"--nproc_per_node={nproc}", task, "train"]
        command += ["--out", str(out), "--no-progress", "--device", "cpu"]
        command += [arg for setting in settings for arg in ("--set", setting)]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"on {nproc} process(es)" in (Path(out) / "train.log").read_text()

    return run


class FullDisk(io.RawIOBase):
    """A file whose disk fills after ``room`` bytes: then ``OSError`` ENOSPC, as the
    kernel says it."""

    def __init__(self, file: io.BufferedWriter, room: int) -> None:
        self.file, self.room = file, room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def fileno(self) -> int:
        return self.file.fileno()

    def close(self) -> None:
        self.file.close()
        super().close()


@pytest.fixture
def full_disk():
    """``with full_disk(room):`` files opened with ``os.fdopen`` (how
    ``atomic_write`` writes) take ``room`` bytes, then fail as a full disk does."""

    @contextlib.contextmanager
    def filled(room: int = 0):
        fdopen = os.fdopen

        def full(fd: int, mode: str) -> FullDisk:
            return FullDisk(fdopen(fd, mode), room)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "fdopen", full)
            yield

    return filled
