"""IMDb Large Movie Review Dataset v1.0 (Maas et al. 2011):
sentiment of 50,000 reviews.

train and test hold 25,000 reviews each, 12,500 positive (rating 7–10, label 1) and
12,500 negative (rating 1–4, label 0). The loader reads the reviews straight out of
either archive — the canonical ``aclImdb_v1.tar.gz`` or the repackaged
``aclImdb_v1_labeled.tar.gz`` of the data mirror (same texts, no unlabelled
reviews) — or from an extracted folder with the layout
``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``. Reviews are returned sorted by
(label, id), so the order does not depend on which copy was read.

Tokens are lower-cased words (runs of letters/digits, with inner apostrophes:
``don't``) and the marks ``!`` and ``?``; the ``<br />`` line breaks of the HTML
source are removed first.
"""

from __future__ import annotations

import contextlib
import json
import re
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import torch

from annotated_transformer import paths as settings
from annotated_transformer.data.download import fetch, sha256_of
from annotated_transformer.data.vocab import SPECIALS, Vocab
from annotated_transformer.files import atomic_write

SPLITS = ("train", "test")
_MEMBER = re.compile(r"(?:^|/)aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt$")
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*|[!?]")
PER_CLASS = 12_500  # reviews per label in each split

Reviews = tuple[list[str], list[int]]


def load_imdb(
    split: str, *, path: str | Path | None = None, mirror: str | Path | None = None
) -> Reviews:
    """Texts and labels (1 = positive) of the ``"train"`` or ``"test"`` split.

    path: an archive, an extracted ``aclImdb`` folder, or a folder containing one;
        by default an extracted ``imdb/aclImdb`` in the mirror, else
        ``download.fetch("imdb")``.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown IMDb split {split!r}; use 'train' or 'test'")
    texts, labels = _load_all(_locate(path, mirror))[split]
    return list(texts), list(labels)


def _locate(path: str | Path | None, mirror: str | Path | None) -> Path:
    if path is not None:
        path = Path(path).expanduser()
        if not path.exists():
            raise FileNotFoundError(
                f"IMDb data not found at {path}: pass aclImdb_v1.tar.gz, "
                "aclImdb_v1_labeled.tar.gz or an extracted aclImdb folder"
            )
        return path.resolve()
    mirror = Path(mirror) if mirror is not None else settings.data_mirror()
    if mirror is not None and (mirror / "imdb" / "aclImdb").is_dir():
        return (mirror / "imdb" / "aclImdb").resolve()
    return fetch("imdb", mirror=mirror).resolve()


# once per process; across processes the parsed archive is kept as JSON in the cache
@cache
def _load_all(source: Path) -> dict[str, Reviews]:
    """Both splits, each sorted by (label, id), of an archive or folder."""
    parsed = None
    if source.is_file():  # an archive: 3 s to parse, 0.4 s to read back as JSON
        parsed = (
            settings.cache_dir() / "imdb" / f"parsed-{sha256_of(source)[:16]}.json"
        )
    result = None
    if parsed is not None and parsed.is_file():
        with contextlib.suppress(OSError, ValueError):  # unreadable: parsed again
            result = json.loads(parsed.read_text(encoding="utf-8"))
    if not _well_formed(result):  # unreadable, damaged or altered: parse again
        result = _parse(source)
        if parsed is not None:
            atomic_write(
                parsed, json.dumps(result, ensure_ascii=False).encode("utf-8")
            )
    for split, (_texts, labels) in result.items():
        counts = [labels.count(0), labels.count(1)]
        if counts != [PER_CLASS, PER_CLASS]:
            raise ValueError(
                f"{source}: IMDb {split} has {counts[0]} negative and {counts[1]} "
                f"positive reviews, expected {PER_CLASS:,} each; the copy is "
                "incomplete: fetch it again"
            )
    return result


def _well_formed(result: Any) -> bool:
    """Does a parsed cache hold both splits, as texts and labels of one length?"""
    return (
        isinstance(result, dict)
        and sorted(result) == sorted(SPLITS)
        and all(
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(part, list) for part in pair)
            and len(pair[0]) == len(pair[1])
            for pair in result.values()
        )
    )


def _parse(source: Path) -> dict[str, Reviews]:
    found = {split: [] for split in SPLITS}
    for name, text in _read_reviews(source):
        split, sentiment, review_id, _rating = _MEMBER.search(name).groups()
        found[split].append((int(sentiment == "pos"), int(review_id), text))
    result = {}
    for split, rows in found.items():
        rows.sort(key=lambda row: row[:2])
        result[split] = ([row[2] for row in rows], [row[0] for row in rows])
    return result


def _read_reviews(source: Path) -> Iterator[tuple[str, str]]:
    """(member name, text) of every labelled review in an archive or a folder."""
    if source.is_dir():
        for file in sorted(source.rglob("*.txt")):
            name = file.as_posix()
            if _MEMBER.search(name):
                yield name, file.read_text(encoding="utf-8")
        return
    # one streaming pass, nothing extracted
    with tarfile.open(source, "r|*") as archive:
        for member in archive:
            if member.isfile() and _MEMBER.search(member.name):
                yield (
                    member.name,
                    archive.extractfile(member).read().decode("utf-8"),
                )


def tokenize(text: str) -> list[str]:
    """Lower-cased words and ``!``/``?`` of one review, with
    ``<br />`` markup removed."""
    return _WORD.findall(_BREAK.sub(" ", text).lower())


def train_val_split(
    texts: list[str], labels: list[int], val_size: int = 2_500, seed: int = 0
) -> tuple[Reviews, Reviews]:
    """Carve a random validation set of ``val_size`` reviews out
    of the training split."""
    if not 0 < val_size < len(texts) or len(texts) != len(labels):
        raise ValueError(
            f"val_size={val_size} must be between 1 and {len(texts) - 1}, and "
            f"texts ({len(texts)}) and labels ({len(labels)}) must have the same "
            "length"
        )
    order = torch.randperm(
        len(texts), generator=torch.Generator().manual_seed(seed)
    ).tolist()
    val, train = sorted(order[:val_size]), sorted(order[val_size:])
    return ([texts[i] for i in train], [labels[i] for i in train]), (
        [texts[i] for i in val],
        [labels[i] for i in val],
    )


def build_vocab(
    train_tokens: Iterable[Sequence[str]],
    max_size: int = 20_000,
    specials: Sequence[str] = SPECIALS,
) -> Vocab:
    """Vocabulary of the ``max_size`` most frequent TRAIN tokens
    (``specials`` included)."""
    return Vocab.build(train_tokens, specials=specials, max_size=max_size)


def encode(
    tokens: Iterable[Sequence[str]], vocab: Vocab, max_len: int, tail: int = 0
) -> list[list[int]]:
    """Token ids of each review, cut to its first ``max_len`` tokens (reviews
    average ~235), or, with ``tail``, a review longer than ``max_len`` to its first
    ``max_len - tail`` and its last ``tail`` tokens: a review's verdict is often in
    its closing lines (Sun et al. 2019)."""
    if max_len < 1:
        raise ValueError(f"max_len={max_len} must be at least 1")
    if not 0 <= tail < max_len:
        raise ValueError(f"tail={tail} must lie in [0, max_len={max_len})")
    head = max_len - tail
    return [
        vocab.encode([*review[:head], *review[max(head, len(review) - tail) :]])
        for review in tokens
    ]
