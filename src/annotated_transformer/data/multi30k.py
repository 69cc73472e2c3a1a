"""Multi30k task 1: German→English image descriptions (Elliott et al. 2016).

Splits (sentence pairs): train 29,000 · val 1,014 · test2016 1,000 (the standard
test set) · test2017 1,000 · test2018 1,071 · mscoco2017 461. Files are the raw,
untokenized sentences of ``multi30k/dataset``, ``data/task1/raw/``, fetched and
verified by ``download.fetch``.

Choices, differing from some tutorials (said here so results
can be compared honestly):

- Tokens come from spaCy's rule-based tokenizers, ``spacy.blank("de")`` /
  ``spacy.blank("en")`` (no model download; the Annotated Transformer used the
  ``*_core_*_sm`` pipelines, whose tokenizers follow the same rules).
- Case is kept by default (``lower=False``), as in the Annotated Transformer, so the
  output can be scored with standard, cased, detokenized sacreBLEU. ``lower=True``
  gives the lower-cased setup of many Multi30k tutorials.
- Vocabularies are built from the TRAIN split only, keeping tokens seen at least
  twice. The Annotated Transformer built them from train + val + test, which leaks
  test words into the vocabulary.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

from annotated_transformer.data.download import fetch
from annotated_transformer.data.vocab import Vocab

SPLITS = {
    "train": "train",
    "val": "val",
    "test2016": "test_2016_flickr",
    "test2017": "test_2017_flickr",
    "test2018": "test_2018_flickr",
    "mscoco2017": "test_2017_mscoco",
}
LANGUAGES = ("de", "en")


def read_lines(path: Path) -> list[str]:
    """The lines of a gzip'd UTF-8 text file, without line endings
    (one sentence a line)."""
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        text = f.read()
    # split on "\n" only: str.splitlines would also split on
    # rare Unicode separators.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def load_split(
    split: str, *, mirror: str | Path | None = None
) -> tuple[list[str], list[str]]:
    """Raw sentences of one split as parallel lists
    ``(german, english)``; line i ↔ line i."""
    if split not in SPLITS:
        raise ValueError(
            f"unknown Multi30k split {split!r}; use one of {', '.join(SPLITS)}"
        )
    de, en = (
        read_lines(fetch(f"multi30k/{SPLITS[split]}.{lang}", mirror=mirror))
        for lang in LANGUAGES
    )
    if len(de) != len(en):
        raise ValueError(
            f"{split}: {len(de)} German but {len(en)} English lines; refetch the "
            "data"
        )
    return de, en


@cache
def _blank(lang: str):
    import spacy  # imported on first use: it takes a second to load

    if lang not in LANGUAGES:
        raise ValueError(
            f"no tokenizer for language {lang!r}; use one of {LANGUAGES}"
        )
    return spacy.blank(lang)


def tokenize(
    sentences: Iterable[str], lang: str, *, lower: bool = False
) -> list[list[str]]:
    """spaCy rule-based tokens of each sentence (``lang`` "de" or "en"),
    optionally lower-cased."""
    docs = _blank(lang).tokenizer.pipe(sentences, batch_size=1000)
    if lower:
        return [[t.text.lower() for t in doc if not t.is_space] for doc in docs]
    return [[t.text for t in doc if not t.is_space] for doc in docs]


def build_vocabs(
    train_de: Iterable[Sequence[str]],
    train_en: Iterable[Sequence[str]],
    min_freq: int = 2,
) -> tuple[Vocab, Vocab]:
    """Source and target vocabularies from the TRAIN token lists,
    tokens seen >= ``min_freq``.

    Specials first (``<pad>``, ``<unk>``, ``<s>``, ``</s>``);
    unseen tokens map to ``<unk>``.
    """
    return Vocab.build(train_de, min_freq=min_freq), Vocab.build(
        train_en, min_freq=min_freq
    )


_NO_SPACE_BEFORE = {
    ".",
    ",",
    "!",
    "?",
    ";",
    ":",
    ")",
    "]",
    "}",
    "%",
    "...",
    "n't",
    "'",
}
_NO_SPACE_AFTER = {"(", "[", "{", "$", "#"}
_CLITIC = re.compile(r"^'(s|re|ll|ve|m|d)$", re.IGNORECASE)


def detokenize(tokens: Sequence[str]) -> str:
    """Join English tokens (as split by spaCy) into text: the
    inverse of ``tokenize`` mostly.

    Punctuation and clitics (``n't``, ``'s``) attach to the word before, opening
    brackets to the word after, in-word hyphens to both sides (spaCy splits
    "brown-haired"), and straight double quotes alternate between opening and
    closing.
    """
    out: list[str] = []
    glue_next = False
    quotes_open = False
    for token in tokens:
        glue = glue_next or not out
        glue_next = False
        if (
            token in _NO_SPACE_BEFORE
            or _CLITIC.match(token)
            or token.lower() == "n't"
        ):
            glue = True
        elif token in ("-", "/") and out:
            glue = glue_next = True
        elif token == '"':
            if quotes_open:
                glue = True
            else:
                glue_next = True
            quotes_open = not quotes_open
        if token in _NO_SPACE_AFTER:
            glue_next = True
        out.append(token if glue else " " + token)
    return "".join(out)
