"""Download, verification and atomic caching, against a local
HTTP server (no network)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import os
import threading
import zipfile
from pathlib import Path

import pytest

from annotated_transformer.data import download
from annotated_transformer.data.download import (
    REGISTRY,
    ChecksumError,
    DownloadError,
    Resource,
    fetch,
    sha256_of,
)

PAYLOAD = b"Zwei junge Leute stehen vor einem Zaun.\n" * 2000
SHA = hashlib.sha256(PAYLOAD).hexdigest()
SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
MIRROR = Path(
    os.environ.get("AT_DATA_MIRROR", SHARED)
).resolve()  # read before fixtures unset it


class Server(http.server.ThreadingHTTPServer):
    hits: dict[str, int]


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        hits = self.server.hits
        hits[self.path] = hits.get(self.path, 0) + 1
        if self.path == "/flaky" and hits[self.path] == 1:
            self.send_error(503, "try again")
            return
        body = PAYLOAD
        length = len(body)
        if self.path == "/corrupt":
            body = PAYLOAD[:-1] + b"X"
        elif self.path == "/truncated":
            length += 1000  # announce more than is sent, then hang up
        elif self.path == "/missing":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


@pytest.fixture
def server():
    srv = Server(("127.0.0.1", 0), Handler)
    srv.hits = {}
    thread = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No waiting between retries, no mirror unless a test names
    one, a throwaway cache."""
    monkeypatch.setattr(download.time, "sleep", lambda seconds: None)
    monkeypatch.delenv("AT_DATA_MIRROR", raising=False)
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path / "default-cache"))


def url(srv: Server, path: str) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}{path}"


def files_in(folder: Path) -> list[str]:
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()
    )


def test_download_verifies_and_caches(server, tmp_path):
    resource = Resource("demo/file.txt", SHA, url(server, "/good"))
    mirror = tmp_path / "empty-mirror"
    mirror.mkdir()
    path = fetch(resource, cache=tmp_path, mirror=mirror)
    assert path == tmp_path / "demo" / "file.txt"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA
    assert files_in(tmp_path) == ["demo/file.txt"]  # no temporary leftovers
    fetch(resource, cache=tmp_path, mirror=mirror)
    assert server.hits["/good"] == 1  # the second fetch came from the cache


def test_wrong_checksum_is_reported_and_nothing_is_cached(server, tmp_path):
    resource = Resource("demo/file.txt", SHA, url(server, "/corrupt"))
    with pytest.raises(DownloadError, match="sha256") as info:
        fetch(resource, cache=tmp_path, retries=2)
    assert "AT_DATA_MIRROR" in str(info.value) and "--data-dir" in str(info.value)
    assert server.hits["/corrupt"] == 2
    assert files_in(tmp_path) == []


def test_truncated_transfer_is_detected(server, tmp_path):
    resource = Resource("demo/file.txt", SHA, url(server, "/truncated"))
    with pytest.raises(DownloadError):
        fetch(resource, cache=tmp_path, retries=1)
    assert files_in(tmp_path) == []


def test_truncated_file_with_unknown_length_fails_the_checksum(tmp_path):
    source = tmp_path / "src.bin"
    source.write_bytes(PAYLOAD[: len(PAYLOAD) // 2])
    resource = Resource("demo/file.txt", SHA, source.as_uri())
    with pytest.raises(DownloadError, match="sha256"):
        fetch(resource, cache=tmp_path / "cache", retries=1)
    assert files_in(tmp_path / "cache") == []


def test_failed_attempt_is_retried(server, tmp_path):
    resource = Resource("demo/file.txt", SHA, url(server, "/flaky"))
    path = fetch(resource, cache=tmp_path, retries=3)
    assert server.hits["/flaky"] == 2
    assert path.read_bytes() == PAYLOAD


def test_http_error_after_retries(server, tmp_path):
    resource = Resource("demo/file.txt", SHA, url(server, "/missing"))
    with pytest.raises(DownloadError, match="404"):
        fetch(resource, cache=tmp_path, retries=2)
    assert files_in(tmp_path) == []


def test_corrupted_cache_file_is_replaced(server, tmp_path):
    resource = Resource("demo/file.txt", SHA, url(server, "/good"))
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "file.txt").write_bytes(b"half a file")
    path = fetch(resource, cache=tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert server.hits["/good"] == 1


def test_mirror_file_is_used_in_place_and_verified(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "demo").mkdir(parents=True)
    (mirror / "demo" / "file.txt").write_bytes(PAYLOAD)
    dead = Resource("demo/file.txt", SHA, "http://127.0.0.1:9/unreachable")
    assert (
        fetch(dead, mirror=mirror, cache=tmp_path / "cache")
        == mirror / "demo" / "file.txt"
    )
    assert not (tmp_path / "cache").exists()

    (mirror / "demo" / "file.txt").write_bytes(PAYLOAD + b"!")
    with pytest.raises(ChecksumError, match=SHA):
        fetch(dead, mirror=mirror, cache=tmp_path / "cache")


def test_mirror_is_read_from_environment(tmp_path, monkeypatch):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "file.txt").write_bytes(PAYLOAD)
    monkeypatch.setenv("AT_DATA_MIRROR", str(tmp_path))
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path / "cache"))
    assert fetch(Resource("demo/file.txt", SHA)) == tmp_path / "demo" / "file.txt"


def test_mirror_only_file_that_is_absent_says_what_to_do(tmp_path):
    with pytest.raises(DownloadError, match="AT_DATA_MIRROR"):
        fetch(Resource("demo/file.txt", SHA), mirror=tmp_path, cache=tmp_path)
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        fetch(
            Resource("demo/file.txt", SHA), mirror=tmp_path / "typo", cache=tmp_path
        )


def test_alternatives_are_tried_in_order(tmp_path):
    (tmp_path / "b.gz").write_bytes(gzip.compress(PAYLOAD))
    options = (Resource("a.txt", SHA), Resource("b.gz", SHA, content="gzip"))
    assert (
        fetch(options, mirror=tmp_path, cache=tmp_path / "c") == tmp_path / "b.gz"
    )


def test_compressed_content_hashes(tmp_path):
    (tmp_path / "x.gz").write_bytes(gzip.compress(PAYLOAD))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("inner", PAYLOAD)
    (tmp_path / "x.zip").write_bytes(buffer.getvalue())
    assert sha256_of(tmp_path / "x.gz", "gzip") == SHA
    assert sha256_of(tmp_path / "x.zip", "zip:inner") == SHA
    # A truncated gzip cannot be decompressed: reported as a
    # checksum failure, not EOFError.
    (tmp_path / "y.gz").write_bytes(gzip.compress(PAYLOAD)[:100])
    with pytest.raises(ChecksumError, match="corrupted or truncated"):
        download.verify(tmp_path / "y.gz", Resource("y.gz", SHA, content="gzip"))


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown dataset file"):
        fetch("multi30k/train.fr")
    with pytest.raises(ValueError, match="retries"):
        download.download(
            Resource("a", SHA, "file:///dev/null"), Path("/tmp/x"), retries=0
        )


def test_registry_entries_verify_against_the_shared_mirror():
    if not (MIRROR / "multi30k").is_dir():
        pytest.skip(
            f"no data mirror at {MIRROR}; set AT_DATA_MIRROR to shared/data"
        )
    for name in REGISTRY:
        if name == "enwik8":
            continue  # only its 10^6-byte prefix is mirrored
        path = fetch(name, mirror=MIRROR, cache=MIRROR / "no-cache-here")
        assert path.is_relative_to(MIRROR), name


def test_interrupted_download_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(url, out, timeout):
        out.write(PAYLOAD[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(download, "_stream", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch(
            Resource("demo/file.txt", SHA, "http://example.invalid/"),
            cache=tmp_path,
        )
    assert files_in(tmp_path) == []


def test_gpt2_folder_finds_verifies_or_downloads(server, tmp_path, monkeypatch):
    fake = {f: Resource(f"gpt2/{f}", SHA, url(server, "/good")) for f in "ab"}
    monkeypatch.setattr(download, "GPT2_FILES", fake)
    monkeypatch.setenv("AT_GPT2_DIR", str(tmp_path / "gpt2"))
    assert download.gpt2_folder() is None  # absent, and not asked to download
    assert server.hits == {}
    assert download.gpt2_folder(online=True) == tmp_path / "gpt2"
    assert files_in(tmp_path / "gpt2") == ["a", "b"] and server.hits["/good"] == 2
    assert download.gpt2_folder() == tmp_path / "gpt2"  # verified, not downloaded
    assert server.hits["/good"] == 2
    (tmp_path / "gpt2" / "b").write_bytes(b"another file")
    with pytest.raises(ChecksumError, match="gpt2/b has sha256"):
        download.gpt2_folder()
    monkeypatch.delenv("AT_GPT2_DIR")
    assert download.settings.gpt2_dir() == tmp_path / "default-cache" / "gpt2"
