"""Byte-level BPE, GPT-2's tokenizer (Radford et al. 2019, §2.2), on the package's BPE learner.

Chapter 12's :class:`~annotated_transformer.bpe.BPE` starts from the *characters* of the
training text and spells unseen ones in bytes. GPT-2 starts from the 256 *byte values*: every
byte string has an encoding, no character is ever unknown, and the base vocabulary is 256
whatever the script. The merges are learned exactly as chapter 12 learns them
(:func:`~annotated_transformer.bpe.learn_merges`, same tie rule); only the symbols change.

- Bytes as symbols: a byte string is viewed as the Latin-1 string with one character per byte
  (``bytes.decode("latin-1")`` is a bijection), so merged symbols are ordinary strings.
- Pieces: merges stay inside the pieces of :func:`~annotated_transformer.bpe.pretokenize`
  applied to that Latin-1 view (runs of word characters or of punctuation, each with the
  space before it). On ASCII text, such as Tiny Shakespeare, these are the pieces of the text
  itself. GPT-2 cuts the *Unicode* text with a similar regular expression (which also splits
  off English contractions such as ``'s`` and keeps runs of spaces together). Unlike chapter
  12 the space is kept as the byte 0x20: ``" the"`` is one token.
- Ids: byte b is id b; each distinct merged symbol gets the next id in the order it was
  learned, so the vocabulary is 256 + (number of merges).

``decode(encode(data)) == data`` for every byte string.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from annotated_transformer.bpe import learn_merges, merge_word, pretokenize

Pair = tuple[str, str]


def byte_pieces(data: bytes) -> list[str]:
    """The pieces of ``data``, each a Latin-1 string with one character per byte."""
    return pretokenize(data.decode("latin-1"))


class ByteBPE:
    """A learned byte-level BPE: the ordered merges of byte strings (as Latin-1 strings).

    encode(data: bytes) -> ids; decode(ids) -> bytes; ``vocab`` ids in all;
    ``token_bytes`` (vocab,): how many bytes each id stands for.
    """

    def __init__(self, merges: Sequence[Pair]) -> None:
        self.merges = [(a, b) for a, b in merges]
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        symbols = [chr(b) for b in range(256)] + [a + b for a, b in self.merges]
        self.symbols = list(dict.fromkeys(symbols))  # id -> symbol (a merge may repeat one)
        self.ids = {symbol: i for i, symbol in enumerate(self.symbols)}
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def learn(cls, data: bytes, num_merges: int, min_frequency: int = 2) -> ByteBPE:
        """Learn up to ``num_merges`` merges of pairs seen at least ``min_frequency`` times."""
        if num_merges < 0 or min_frequency < 1:
            raise ValueError(
                f"need num_merges >= 0 and min_frequency >= 1, got {num_merges}, {min_frequency}"
            )
        words = Counter(tuple(piece) for piece in byte_pieces(data))
        return cls(learn_merges(dict(words), num_merges, min_frequency))

    @property
    def vocab(self) -> int:
        return len(self.symbols)

    @property
    def token_bytes(self) -> Tensor:
        """int64 (vocab,): the number of bytes of each token."""
        return torch.tensor([len(symbol) for symbol in self.symbols])

    def _encode_piece(self, piece: str) -> list[int]:
        word = list(piece)
        while len(word) > 1:  # apply the earliest-learned merge present, as learning did
            never = len(self.ranks)
            rank, pair = min((self.ranks.get(p, never), p) for p in itertools.pairwise(word))
            if rank == never:
                break
            word = merge_word(word, pair)
        return [self.ids[symbol] for symbol in word]

    def encode(self, data: bytes) -> list[int]:
        """Bytes -> token ids."""
        ids = []
        for piece in byte_pieces(data):
            if piece not in self._cache:
                if len(self._cache) > 100_000:
                    self._cache.clear()
                self._cache[piece] = self._encode_piece(piece)
            ids.extend(self._cache[piece])
        return ids

    def decode(self, ids: Iterable[int]) -> bytes:
        """Token ids -> the bytes they stand for."""
        return "".join(self.symbols[i] for i in ids).encode("latin-1")

    def to_dict(self) -> dict[str, list]:
        """The merges as plain lists of strings (checkpoint state)."""
        return {"merges": [list(pair) for pair in self.merges]}

    @classmethod
    def from_dict(cls, data: dict[str, list]) -> ByteBPE:
        return cls([(a, b) for a, b in data["merges"]])
