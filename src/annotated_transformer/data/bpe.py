"""Byte-pair encoding, by hand (Sennrich et al. 2016; the paper's
shared 37k-token vocabulary).

Learning: split the corpus into words, start from single characters, and repeatedly
merge the most frequent adjacent pair of symbols into a new symbol. The list of
merges *is* the model. Encoding a word replays the merges in the order they were
learned.

Decisions, so that ``decode(encode(text)) == text`` for every string:

- Words: :func:`pretokenize` cuts text into runs of word characters or of
  punctuation, each with the single space before it, if any; every other whitespace
  character stands alone. Merges never cross these pieces, and joining the pieces
  gives the text back.
- Whitespace: that leading space is written ``▁`` (as SentencePiece does), so
  ``" the"`` is one token ``▁the``: the tokens themselves say where the spaces were.
- Unknown characters (never seen in training, e.g. an emoji): byte fallback, one
  token ``<0xNN>`` per UTF-8 byte. A literal ``▁`` in the text is also written as
  bytes, so it cannot be confused with a space. Pieces never mix word characters and
  punctuation, so merges can never produce a string like ``<0x41>``: byte tokens are
  unambiguous.
- Ties: among equally frequent pairs, the pair of *older* symbols is merged first:
  characters are ordered by code point, merged symbols by when they were made;
  compare the left symbols, then the right ones. Learning is deterministic, and this
  is the rule of Hugging Face ``tokenizers``' BPE trainer, so the two learn the same
  merges (tested).
"""

from __future__ import annotations

import heapq
import itertools
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

MARK = "▁"  # U+2581, stands for the space before a word
PIECE = re.compile(r" ?\w+| ?[^\w\s]+|\s")
BYTE_TOKENS = tuple(f"<0x{b:02X}>" for b in range(256))
_BYTE_VALUE = {token: b for b, token in enumerate(BYTE_TOKENS)}

Pair = tuple[str, str]


def pretokenize(text: str) -> list[str]:
    """Cut text into the pieces that merges stay within;
    ``"".join(pieces) == text``.

    >>> pretokenize("Two dogs, running.")
    ['Two', ' dogs', ',', ' running', '.']
    """
    return PIECE.findall(text)


def symbols(piece: str, alphabet: set[str]) -> list[str]:
    """A piece as its initial symbols: ``▁`` for the leading space, then
    its characters; characters outside ``alphabet`` (and a literal ``▁``)
    become UTF-8 byte tokens."""
    out = []
    if piece.startswith(" "):
        out.append(MARK)
        piece = piece[1:]
    for ch in piece:
        if ch in alphabet and ch != MARK:
            out.append(ch)
        else:
            out.extend(
                BYTE_TOKENS[b] for b in ch.encode("utf-8", errors="surrogatepass")
            )
    return out


def merge_word(word: Sequence[str], pair: Pair) -> list[str]:
    """Replace each occurrence of ``pair`` in ``word``, left to
    right, by the joined symbol."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == pair[0] and word[i + 1] == pair[1]:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def _pairs(word: Sequence[str]) -> Iterable[Pair]:
    """Adjacent pairs that may merge (byte-fallback tokens never do)."""
    for pair in itertools.pairwise(word):
        if pair[0] not in _BYTE_VALUE and pair[1] not in _BYTE_VALUE:
            yield pair


def _symbol_ages(words: Iterable[Sequence[str]]) -> dict[str, int]:
    """Tie-break order of the initial symbols: by code point
    (merged ones are appended)."""
    return {
        symbol: age
        for age, symbol in enumerate(sorted({s for w in words for s in w}))
    }


def learn_merges_naive(
    words: dict[tuple[str, ...], int], num_merges: int, min_frequency: int = 2
) -> list[Pair]:
    """The algorithm as written in the paper: recount every pair after every merge.

    words: symbol tuple -> frequency. Clear, and
        O(merges × corpus): for teaching and tests.
    """
    words = dict(words)
    age = _symbol_ages(words)
    merges: list[Pair] = []
    while len(merges) < num_merges:
        counts: Counter[Pair] = Counter()
        for word, n in words.items():
            for pair in _pairs(word):
                counts[pair] += n
        if not counts:
            break
        best = min(
            counts, key=lambda pair: (-counts[pair], age[pair[0]], age[pair[1]])
        )
        if counts[best] < min_frequency:
            break
        merges.append(best)
        age.setdefault(best[0] + best[1], len(age))
        words = {tuple(merge_word(word, best)): n for word, n in words.items()}
    return merges


def learn_merges(
    words: dict[tuple[str, ...], int], num_merges: int, min_frequency: int = 2
) -> list[Pair]:
    """The same merges as :func:`learn_merges_naive`, fast: pair counts are
    updated only for the words that contain the merged pair, and a heap
    finds the most frequent pair.

    Heap entries go stale when a count changes; a popped entry is used only if its
    count is still current (a fresh entry was pushed at every change).
    """
    vocab = [list(word) for word in words]
    freq = list(words.values())
    counts: defaultdict[Pair, int] = defaultdict(int)
    # pair -> words that contain it
    where: defaultdict[Pair, set[int]] = defaultdict(set)
    for idx, word in enumerate(vocab):
        for pair in _pairs(word):
            counts[pair] += freq[idx]
            where[pair].add(idx)
    age = _symbol_ages(vocab)
    heap = [(-n, age[a], age[b], (a, b)) for (a, b), n in counts.items()]
    heapq.heapify(heap)
    merges: list[Pair] = []
    while heap and len(merges) < num_merges:
        neg, _, _, best = heapq.heappop(heap)
        if counts.get(best, 0) != -neg:
            continue  # stale entry
        if -neg < min_frequency:
            break
        merges.append(best)
        age.setdefault(best[0] + best[1], len(age))
        changed = set()
        for idx in where.pop(best):
            old, n = vocab[idx], freq[idx]
            new = merge_word(old, best)
            if len(new) == len(old):
                continue  # the pair left this word through an earlier merge
            for pair in _pairs(old):
                counts[pair] -= n
                changed.add(pair)
            for pair in _pairs(new):
                counts[pair] += n
                where[pair].add(idx)
                changed.add(pair)
            vocab[idx] = new
        for pair in changed:
            if counts[pair] > 0:
                heapq.heappush(
                    heap, (-counts[pair], age[pair[0]], age[pair[1]], pair)
                )
            else:
                del counts[pair]
    return merges


class BPE:
    """A learned byte-pair encoding: an alphabet of characters
    plus an ordered merge list.

    encode(text) -> tokens; decode(tokens) -> text; ``tokens`` lists every token
    encode can produce (alphabet, ``▁``, merged symbols, 256 byte tokens): build
    a :class:`Vocab` from it.
    """

    def __init__(self, merges: Sequence[Pair], alphabet: Iterable[str]) -> None:
        self.merges = [tuple(pair) for pair in merges]
        self.alphabet = set(alphabet) | {MARK}
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        self._cache: dict[str, list[str]] = {}

    @classmethod
    def learn(
        cls, texts: Iterable[str], num_merges: int, min_frequency: int = 2
    ) -> BPE:
        """Learn up to ``num_merges`` merges of pairs seen at least
        ``min_frequency`` times."""
        if num_merges < 0 or min_frequency < 1:
            raise ValueError(
                f"need num_merges >= 0 and min_frequency >= 1, got {num_merges}, "
                f"{min_frequency}"
            )
        pieces = Counter(piece for text in texts for piece in pretokenize(text))
        alphabet = {ch for piece in pieces for ch in piece if ch != " "}
        alphabet.discard(MARK)  # a literal ▁ is spelled in bytes
        words: Counter[tuple[str, ...]] = Counter()
        for piece, n in pieces.items():
            words[tuple(symbols(piece, alphabet))] += n
        return cls(learn_merges(dict(words), num_merges, min_frequency), alphabet)

    def _encode_piece(self, piece: str) -> list[str]:
        word = symbols(piece, self.alphabet)
        never = len(self.ranks)
        while len(word) > 1:
            # Apply the earliest-learned merge present, as training did.
            rank, pair = min(
                ((self.ranks.get(p, never), p) for p in _pairs(word)),
                default=(never, None),
            )
            if pair is None or rank == never:
                break
            word = merge_word(word, pair)
        return word

    def encode(self, text: str) -> list[str]:
        """Text -> BPE tokens."""
        tokens = []
        for piece in pretokenize(text):
            if piece not in self._cache:
                if len(self._cache) > 100_000:
                    self._cache.clear()
                self._cache[piece] = self._encode_piece(piece)
            tokens.extend(self._cache[piece])
        return tokens

    @staticmethod
    def decode(tokens: Iterable[str]) -> str:
        """BPE tokens -> text: ``▁`` becomes a space, byte tokens
        are reassembled as UTF-8."""
        buffer = bytearray()
        for token in tokens:
            if token in _BYTE_VALUE:
                buffer.append(_BYTE_VALUE[token])
            else:
                buffer += token.replace(MARK, " ").encode(
                    "utf-8", errors="surrogatepass"
                )
        return buffer.decode("utf-8", errors="surrogatepass")

    @property
    def tokens(self) -> list[str]:
        """Every token :meth:`encode` can output, without
        repeats, in a fixed order."""
        merged = (a + b for a, b in self.merges)
        return list(dict.fromkeys([*sorted(self.alphabet), *merged, *BYTE_TOKENS]))

    def to_dict(self) -> dict[str, list]:
        """The alphabet and the ordered merges as plain lists
        (JSON, checkpoint configs)."""
        return {
            "alphabet": sorted(self.alphabet),
            "merges": [list(p) for p in self.merges],
        }

    @classmethod
    def from_dict(cls, data: dict[str, list]) -> BPE:
        return cls([tuple(p) for p in data["merges"]], data["alphabet"])

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON."""
        Path(path).write_text(
            json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8"
        )

    @classmethod
    def load(cls, path: str | Path) -> BPE:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
