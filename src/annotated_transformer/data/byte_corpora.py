"""Byte-level text for language modelling: Tiny Shakespeare and enwik8.

Each dataset is a single stream of bytes, returned as a uint8 tensor ``(n_bytes,)``
(the model's vocabulary is the 256 byte values) and split by position, the way
published numbers use it:

- ``tinyshakespeare`` (1,115,394 bytes): first 90% train, last 10% val.
- ``enwik8`` (10^8 bytes of a Wikipedia XML dump): 90M train / 5M val / 5M test.
- ``enwik8_prefix``: only the first 10^6 bytes of enwik8 ("enwik6"), split 90/5/5 in
  the same proportions (900,000 / 50,000 / 50,000). A small stand-in for tests and
  short runs: its scores are NOT comparable with published enwik8 bits per byte.
"""

from __future__ import annotations

import gzip
import hashlib
import zipfile
from pathlib import Path

import torch

from annotated_transformer.data.download import (
    REGISTRY,
    ChecksumError,
    DownloadError,
    fetch,
)

DATASETS = ("tinyshakespeare", "enwik8", "enwik8_prefix")
PREFIX_BYTES = 1_000_000


def load_bytes(name: str, *, mirror: str | Path | None = None) -> torch.Tensor:
    """All bytes of a dataset as a uint8 tensor
    ``(n_bytes,)``, checksum-verified."""
    if name not in DATASETS:
        raise ValueError(
            f"unknown character dataset {name!r}; use one of {', '.join(DATASETS)}"
        )
    data = (
        _enwik8_prefix(mirror)
        if name == "enwik8_prefix"
        else _read(fetch(name, mirror=mirror))
    )
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _read(path: Path) -> bytes:
    """The content a registry checksum covers: gunzipped,
    unzipped or the file as is."""
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes())
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            return archive.read("enwik8")
    return path.read_bytes()


def _enwik8_prefix(mirror: str | Path | None) -> bytes:
    try:
        return _read(fetch("enwik8_prefix", mirror=mirror))
    except DownloadError as missing:
        # Not mirrored: cut it from the full enwik8 (a 36 MB
        # download) and check the cut.
        data = _read(fetch("enwik8", mirror=mirror))[:PREFIX_BYTES]
        expected = REGISTRY["enwik8_prefix"][0].sha256
        if hashlib.sha256(data).hexdigest() != expected:
            message = (
                f"the first {PREFIX_BYTES:,} bytes of enwik8 do not match "
                "enwik8_prefix"
            )
            raise ChecksumError(message) from missing
        return data


def split_percents(name: str) -> tuple[int, ...]:
    """Percent of the stream in (train, val[, test]) for a dataset, in order."""
    return (90, 10) if name == "tinyshakespeare" else (90, 5, 5)


def load_splits(
    name: str, *, mirror: str | Path | None = None
) -> dict[str, torch.Tensor]:
    """Contiguous splits ``{"train", "val"[, "test"]}`` of a
    dataset, uint8 views ``(n,)``."""
    data = load_bytes(name, mirror=mirror)
    percents = split_percents(name)
    n = len(data)
    # Integer boundaries rounded down; the last split takes the rest
    # (enwik8: exact 90M/5M/5M).
    bounds = [0]
    for percent in percents[:-1]:
        bounds.append(bounds[-1] + n * percent // 100)
    bounds.append(n)
    names = ("train", "val", "test")[: len(percents)]
    return {
        s: data[a:b] for s, a, b in zip(names, bounds[:-1], bounds[1:], strict=True)
    }


def random_windows(
    data: torch.Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of random windows for next-byte prediction.

    data: uint8 ``(n,)``; returns ``(x, y)``, both int64
        ``(batch_size, block_size)``, where ``y[b, t] = x[b, t + 1]``: the byte
        following each position of a window that starts at a uniformly random offset
        in ``[0, n - block_size - 1]``.
    """
    if data.dim() != 1:
        raise ValueError(
            f"data must be a 1-D byte tensor, got shape {tuple(data.shape)}"
        )
    if batch_size < 1 or block_size < 1:
        raise ValueError(
            f"batch_size={batch_size} and block_size={block_size} must be >= 1"
        )
    if len(data) < block_size + 1:
        raise ValueError(
            f"a window of {block_size} + 1 bytes does not fit in {len(data)} "
            "bytes; use a smaller block_size"
        )
    starts = torch.randint(
        len(data) - block_size, (batch_size,), generator=generator
    )
    offsets = torch.arange(block_size + 1)
    windows = data[starts[:, None] + offsets].long()  # (batch, block + 1)
    return windows[:, :-1], windows[:, 1:]
