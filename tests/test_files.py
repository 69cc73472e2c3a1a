"""Atomic writes: a reader sees the old file or the new one, never half; a full
disk is one clear error."""

import errno
import json
import os
from pathlib import Path
from typing import BinaryIO

import pytest

from annotated_transformer.files import (
    DamagedFileError,
    DiskFullError,
    atomic_copy,
    atomic_write,
    is_disk_full,
    is_stale,
    open_regular,
    read_json,
    write_json,
)


def files_in(folder: Path) -> list[str]:
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()
    )


def test_atomic_write_creates_folders_and_leaves_no_temporary_file(tmp_path):
    atomic_write(tmp_path / "a" / "b.json", b"{}")
    assert files_in(tmp_path) == ["a/b.json"]
    assert (tmp_path / "a" / "b.json").read_bytes() == b"{}"


def test_a_refused_or_failed_write_keeps_the_old_file(tmp_path):
    path = atomic_write(tmp_path / "f.txt", b"old")

    def refuse(_: Path) -> None:
        raise ValueError("checksum mismatch")

    def fail_half_way(f: BinaryIO) -> None:
        f.write(b"ne")
        raise RuntimeError("half way")

    with pytest.raises(ValueError, match="checksum"):
        atomic_write(path, b"new", check=refuse)
    with pytest.raises(RuntimeError, match="half way"):
        atomic_write(path, fail_half_way)
    assert files_in(tmp_path) == ["f.txt"] and path.read_bytes() == b"old"


def test_a_full_disk_is_one_error_that_names_the_file(tmp_path, full_disk):
    with full_disk(room=3), pytest.raises(DiskFullError) as caught:
        atomic_write(tmp_path / "big.bin", b"more than three bytes")
    assert "no space left" in str(caught.value) and "big.bin" in str(caught.value)
    assert caught.value.errno == errno.ENOSPC and files_in(tmp_path) == []
    wrapped = RuntimeError("torch")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert is_disk_full(wrapped) and not is_disk_full(RuntimeError("other"))


def test_copy_and_json(tmp_path):
    source = atomic_write(tmp_path / "a.bin", bytes(range(256)))
    assert atomic_copy(source, tmp_path / "b.bin").read_bytes() == bytes(range(256))
    path = write_json(tmp_path / "m.json", {"α": 0.6, "steps": [1, 2]})
    assert path.read_text(encoding="utf-8") == (
        '{\n  "α": 0.6,\n  "steps": [\n    1,\n    2\n  ]\n}\n'
    )
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "α": 0.6,
        "steps": [1, 2],
    }


def test_a_temporary_file_is_stale_only_when_its_writer_is_gone(tmp_path):
    """A temporary file's name holds its writer's process id: one that still
    runs keeps its file; a finished one's and this process's (an earlier process
    with its id) are left-overs. A name this package does not make (a user's
    ``.notes.tmp``, ``.draft.v2.tmp``, the old ``.NAME.PID.X.tmp``) never is."""
    import os
    import subprocess
    import sys

    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        names = {
            f".last.pt.{alive.pid}.0a1b2c3d.at-tmp": False,
            f".last.pt.{gone.pid}.0a1b2c3d.at-tmp": True,
            f".last.pt.{os.getpid()}.0a1b2c3d.at-tmp": True,
            ".notes.tmp": False,
            ".draft.v2.tmp": False,
            f".last.pt.{gone.pid}.x1y2.tmp": False,
            ".last.pt.0a1b2c3d.at-tmp": False,
            f"last.pt.{gone.pid}.0a1b2c3d.at-tmp": False,
        }
        for name, stale in names.items():
            assert is_stale(tmp_path / name) is stale, name
    finally:
        alive.kill()
        alive.wait()
    assert is_stale(tmp_path / f".last.pt.{alive.pid}.0a1b2c3d.at-tmp")
    # atomic_write names its temporary files so
    seen = []

    def look(f):
        seen.extend(p.name for p in tmp_path.glob(".*"))
        f.write(b"{}")

    atomic_write(tmp_path / "a.json", look)
    assert len(seen) == 1 and seen[0].startswith(f".a.json.{os.getpid()}.")
    assert seen[0].endswith(".at-tmp") and is_stale(tmp_path / seen[0])


def test_only_regular_files_inside_their_folder_are_opened(tmp_path):
    """open_regular: a FIFO (whose opening would wait for a writer for ever), a
    device or a folder is refused at once; inside a folder, a link out of it
    is refused, a link within it followed."""
    folder = tmp_path / "record"
    folder.mkdir()
    (folder / "a.json").write_text('{"a": 1}')
    (tmp_path / "outside.json").write_text('{"b": 2}')
    os.mkfifo(folder / "fifo.json")
    (folder / "within.json").symlink_to("a.json")
    (folder / "out.json").symlink_to(tmp_path / "outside.json")
    (folder / "up.json").symlink_to(Path("..") / "outside.json")
    with open_regular(folder / "within.json", folder) as f:
        assert f.read() == b'{"a": 1}'
    assert read_json(folder / "a.json", "fix", inside=folder) == {"a": 1}
    refused = {
        folder / "fifo.json": "is a FIFO, not a regular file: fix it",
        Path(os.devnull): "is a character device, not a regular file",
        folder: "is a folder, not a regular file",
    }
    for path, said in refused.items():
        with pytest.raises(DamagedFileError, match=said):
            open_regular(path, fix="fix it")
    for name in ("out.json", "up.json"):
        with pytest.raises(DamagedFileError, match="is a link that leads out of"):
            read_json(folder / name, "fix", inside=folder)
    assert read_json(folder / "out.json", "fix") == {"b": 2}  # no folder given
