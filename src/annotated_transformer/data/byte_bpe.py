"""Byte-level BPE, GPT-2's tokenizer (Radford et al. 2019, §2.2).

:class:`~annotated_transformer.data.bpe.BPE` starts from the *characters* of the
training text; GPT-2 starts from the 256 *byte values*, so every byte string has an
encoding and no character is ever unknown. The merges are learned the same way
(:func:`~annotated_transformer.data.bpe.learn_merges`); only the symbols change.

- Pieces: the text is cut into pieces (``PATTERNS``: ``"words"``, as
  :func:`~annotated_transformer.data.bpe.pretokenize` cuts it, or ``"gpt2"``,
  GPT-2's own, which also splits off English contractions) and merges stay inside
  them, so the bytes of one character share a piece. A byte that is not valid
  UTF-8 stands alone (``surrogateescape``): ``decode(encode(data)) == data``.
- Bytes as symbols: a piece's bytes are held as the Latin-1 string with one
  character per byte, so merged symbols are ordinary strings.
- Ties: among equally frequent pairs, the pair of *older* symbols is merged first.
  Hugging Face ``tokenizers`` orders the bytes by GPT-2's printable stand-ins
  (:func:`byte_stand_ins`) instead, so where pairs tie the two may pick different
  merges.
- Special tokens (``<|endoftext|>``) are cut out before the pieces: never merged
  into, each encoded as its one id.
- Ids: byte b is id b, then each merged symbol in the order it was learned, then
  the special tokens. :meth:`ByteBPE.from_files` reads GPT-2's published
  ``vocab.json`` and ``merges.txt`` instead, and keeps their ids.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import regex
import torch
from torch import Tensor

from annotated_transformer.data.bpe import PIECE, learn_merges, merge_word

Pair = tuple[str, str]

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"""
GPT2_PATTERN += r"""|\s+(?!\S)|\s+"""  # runs of spaces but the last, other spaces
PATTERNS = {"words": PIECE, "gpt2": regex.compile(GPT2_PATTERN)}


def byte_pieces(data: bytes, pattern: str = "words") -> list[str]:
    """The pieces of ``data``'s text, each as Latin-1: one character per byte.

    >>> byte_pieces("café".encode())
    ['cafÃ©']
    """
    text = data.decode("utf-8", errors="surrogateescape")
    return [_latin1(piece) for piece in PATTERNS[pattern].findall(text)]


def _latin1(text: str) -> str:
    """A text's UTF-8 bytes (invalid ones as they were) as a Latin-1 string."""
    return text.encode("utf-8", errors="surrogateescape").decode("latin-1")


def split_special(data: bytes, special: Sequence[str]) -> list[bytes]:
    """``data`` cut around the special tokens: [text, special, text, …, text]."""
    if not special:
        return [data]
    longest_first = sorted((s.encode() for s in special), key=len, reverse=True)
    return re.split(b"(" + b"|".join(map(re.escape, longest_first)) + b")", data)


def byte_stand_ins() -> list[str]:
    """GPT-2's printable character for each byte, as its files write tokens.

    The 188 bytes that Latin-1 prints (``!`` … ``~``, ``¡`` … ``¬``, ``®`` … ``ÿ``)
    stand for themselves; the other 68 (controls, the space, the soft hyphen) get
    chr(256 + n), n = 0, 1, … in byte order: the space (the 33rd) is ``Ġ`` (U+0120).
    """
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    others = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(others)) for b in range(256)]


class ByteBPE:
    """A learned byte-level BPE: ordered merges of byte strings (Latin-1 strings).

    pattern: how text is cut into pieces (``PATTERNS``); special: never split.
    ids: symbol (Latin-1 string; special tokens as their text) -> id, to keep a
    published vocabulary's ids; by default bytes 0–255, merged symbols, specials.
    encode(data: bytes) -> ids; decode(ids) -> bytes; ``vocab`` ids in all;
    ``token_bytes`` (vocab,): how many bytes each id stands for.
    """

    def __init__(
        self,
        merges: Sequence[Pair],
        pattern: str = "words",
        special: Sequence[str] = (),
        ids: dict[str, int] | None = None,
    ) -> None:
        if pattern not in PATTERNS:
            choices = ", ".join(PATTERNS)
            raise ValueError(f"pattern={pattern!r}: use one of {choices}")
        self.merges = [(a, b) for a, b in merges]
        self.pattern, self.special = pattern, list(special)
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        symbols = [chr(b) for b in range(256)] + [a + b for a, b in self.merges]
        symbols += [_latin1(s) for s in self.special]
        if ids is None:  # a merge may repeat a symbol: ids of distinct ones
            ids = {s: i for i, s in enumerate(dict.fromkeys(symbols))}
        missing = [s for s in symbols if s not in ids]
        if missing or sorted(ids.values()) != list(range(len(ids))):
            raise ValueError(
                "the vocabulary must number its tokens 0 … n − 1 and hold every "
                f"byte, merged symbol and special token; missing {missing[:3]}"
            )
        self.ids = ids
        self.symbols = sorted(ids, key=ids.__getitem__)  # id -> symbol
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def learn(
        cls,
        data: bytes,
        num_merges: int,
        min_frequency: int = 2,
        pattern: str = "words",
        special: Sequence[str] = (),
    ) -> ByteBPE:
        """Learn up to ``num_merges`` merges of pairs seen at least
        ``min_frequency`` times; special tokens are cut out first, never merged."""
        if num_merges < 0 or min_frequency < 1:
            need = "need num_merges >= 0 and min_frequency >= 1"
            raise ValueError(f"{need}, got {num_merges}, {min_frequency}")
        texts = split_special(data, special)[::2]  # the text between specials
        pieces = (p for text in texts for p in byte_pieces(text, pattern))
        words = Counter(tuple(piece) for piece in pieces)
        merges = learn_merges(dict(words), num_merges, min_frequency)
        return cls(merges, pattern, special)

    @classmethod
    def from_files(cls, vocab_json: str | Path, merges_txt: str | Path) -> ByteBPE:
        """GPT-2's tokenizer from its published files; GPT-2's pattern.

        vocab_json: token -> id, tokens written with :func:`byte_stand_ins`;
        merges_txt: a ``#version`` line, then one merge ``left right`` a line, in
        order. Tokens neither a byte nor a merge (``<|endoftext|>``) are special.
        """
        stand_ins = byte_stand_ins()
        byte_of = {c: chr(b) for b, c in enumerate(stand_ins)}  # -> Latin-1

        def symbol(token: str) -> str:
            return "".join(byte_of[c] for c in token)

        lines = Path(merges_txt).read_text(encoding="utf-8").splitlines()
        merges = []
        for line in lines:
            if line and not line.startswith("#version"):
                left, right = line.split(" ")
                merges.append((symbol(left), symbol(right)))
        vocab = json.loads(Path(vocab_json).read_text(encoding="utf-8"))
        known = {chr(b) for b in range(256)} | {a + b for a, b in merges}
        ids, special = {}, []
        for token, i in vocab.items():
            if all(c in byte_of for c in token) and symbol(token) in known:
                ids[symbol(token)] = i
            else:
                ids[_latin1(token)] = i
                special.append(token)
        return cls(merges, "gpt2", special, ids)

    @property
    def vocab(self) -> int:
        return len(self.symbols)

    @property
    def token_bytes(self) -> Tensor:
        """int64 (vocab,): the number of bytes of each token."""
        return torch.tensor([len(symbol) for symbol in self.symbols])

    def _encode_piece(self, piece: str) -> list[int]:
        word = list(piece)
        never = len(self.ranks)
        # Apply the earliest-learned merge present, as learning did.
        while len(word) > 1:
            rank, pair = min(
                (self.ranks.get(p, never), p) for p in itertools.pairwise(word)
            )
            if rank == never:
                break
            word = merge_word(word, pair)
        return [self.ids[symbol] for symbol in word]

    def encode(self, data: bytes) -> list[int]:
        """Bytes -> token ids; each special token's text becomes its one id."""
        ids = []
        for k, text in enumerate(split_special(data, self.special)):
            if k % 2:  # a special token
                ids.append(self.ids[text.decode("latin-1")])
                continue
            for piece in byte_pieces(text, self.pattern):
                if piece not in self._cache:
                    if len(self._cache) > 100_000:
                        self._cache.clear()
                    self._cache[piece] = self._encode_piece(piece)
                ids.extend(self._cache[piece])
        return ids

    def decode(self, ids: Iterable[int]) -> bytes:
        """Token ids -> the bytes they stand for."""
        return "".join(self.symbols[i] for i in ids).encode("latin-1")

    def to_dict(self) -> dict[str, list | str]:
        """Merges, pattern, specials and ids as plain data (checkpoint state)."""
        return {
            "merges": [list(pair) for pair in self.merges],
            "pattern": self.pattern,
            "special": self.special,
            "symbols": self.symbols,
        }

    @classmethod
    def from_dict(cls, data: dict) -> ByteBPE:
        """From :meth:`to_dict` (older states hold merges only: the defaults)."""
        merges = [(a, b) for a, b in data["merges"]]
        symbols = data.get("symbols")
        ids = None if symbols is None else {s: i for i, s in enumerate(symbols)}
        pattern, special = data.get("pattern", "words"), data.get("special", ())
        return cls(merges, pattern, special, ids)
