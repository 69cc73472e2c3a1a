"""Byte datasets: sizes, checksums, splits and random training windows."""

from __future__ import annotations

import gzip
import hashlib
import io
import zipfile
from pathlib import Path

import pytest
import torch

from annotated_transformer.data import byte_corpora as chars
from annotated_transformer.data.download import REGISTRY, Resource


@pytest.fixture(scope="module")
def mirror(chars_mirror: Path) -> Path:
    return chars_mirror


def test_tiny_shakespeare(mirror):
    data = chars.load_bytes("tinyshakespeare", mirror=mirror)
    assert data.dtype == torch.uint8 and data.shape == (1_115_394,)
    text = bytes(data.tolist())
    assert text.startswith(b"First Citizen:\nBefore we proceed any further")
    assert len(set(text)) == 65 and text.count(b"\n") == 40_000
    splits = chars.load_splits("tinyshakespeare", mirror=mirror)
    assert list(splits) == ["train", "val"]
    assert len(splits["train"]) == int(0.9 * 1_115_394)
    assert torch.equal(torch.cat([splits["train"], splits["val"]]), data)


def test_enwik8_prefix(mirror):
    splits = chars.load_splits("enwik8_prefix", mirror=mirror)
    assert {k: len(v) for k, v in splits.items()} == {
        "train": 900_000,
        "val": 50_000,
        "test": 50_000,
    }
    data = torch.cat(list(splits.values()))
    assert (
        bytes(data[:42].tolist()) == b'<mediawiki xmlns="http://www.mediawiki.org'
    )
    expected = "369b688978f649681136198fb96db14c1616756260c55fb4b65e9bc049552cad"
    assert hashlib.sha256(bytes(data.tolist())).hexdigest() == expected


def test_enwik8_prefix_is_cut_from_full_enwik8_when_not_mirrored(
    mirror, tmp_path, monkeypatch
):
    prefix = gzip.decompress(
        (mirror / "chars" / "enwik8_prefix_1000000.gz").read_bytes()
    )
    full = (
        prefix + b"<page>more of the dump</page>"
    )  # stands in for the 10^8-byte file
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("enwik8", full)
    (tmp_path / "chars").mkdir()
    (tmp_path / "chars" / "enwik8.zip").write_bytes(buffer.getvalue())
    fake = Resource(
        "chars/enwik8.zip", hashlib.sha256(full).hexdigest(), content="zip:enwik8"
    )
    monkeypatch.setitem(REGISTRY, "enwik8", (fake,))
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path / "cache"))
    assert (
        bytes(chars.load_bytes("enwik8_prefix", mirror=tmp_path).tolist()) == prefix
    )
    assert len(chars.load_bytes("enwik8", mirror=tmp_path)) == len(full)


def test_enwik8_split_is_90m_5m_5m(monkeypatch):
    monkeypatch.setattr(
        chars, "load_bytes", lambda name, mirror=None: torch.empty(10**8)
    )
    sizes = {k: len(v) for k, v in chars.load_splits("enwik8").items()}
    assert sizes == {"train": 90_000_000, "val": 5_000_000, "test": 5_000_000}


def test_unknown_dataset():
    with pytest.raises(ValueError, match="tinyshakespeare"):
        chars.load_bytes("shakespeare")


def test_random_windows_are_shifted_slices():
    data = torch.arange(
        200, dtype=torch.uint8
    )  # every byte value tells its own position
    x, y = chars.random_windows(data, 64, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (64, 16) and x.dtype == y.dtype == torch.int64
    for row_x, row_y in zip(x, y, strict=True):
        start = int(row_x[0])
        assert row_x.tolist() == list(range(start, start + 16))
        assert row_y.tolist() == list(range(start + 1, start + 17))
    again, _ = chars.random_windows(data, 64, 16, torch.Generator().manual_seed(0))
    assert torch.equal(x, again)


def test_random_windows_reach_every_start():
    data = torch.arange(20, dtype=torch.uint8)
    x, _ = chars.random_windows(data, 2_000, 5, torch.Generator().manual_seed(1))
    assert set(x[:, 0].tolist()) == set(
        range(20 - 5)
    )  # last window ends at the last byte


def test_random_windows_reject_bad_sizes():
    with pytest.raises(ValueError, match="block_size"):
        chars.random_windows(torch.zeros(10, dtype=torch.uint8), 2, 10)
    with pytest.raises(ValueError, match="1-D"):
        chars.random_windows(torch.zeros(2, 10, dtype=torch.uint8), 2, 3)
    with pytest.raises(ValueError, match="batch_size"):
        chars.random_windows(torch.zeros(10, dtype=torch.uint8), 0, 3)
