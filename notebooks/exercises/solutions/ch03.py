"""Reference solutions of chapter 03's exercises."""

import itertools
from collections import Counter

import torch
from torch import Tensor


def count_pairs(corpus: dict[tuple[str, ...], int]) -> Counter:
    """BPE's step 2: how often each pair of adjacent symbols occurs.

    corpus: each word, spelled as a tuple of symbols -> how often it occurs
    returns Counter {(left, right): count}, each pair weighted by its word's
    count
    """
    counts = Counter()
    for word, n in corpus.items():
        for pair in itertools.pairwise(word):
            counts[pair] += n
    return counts


def apply_merges(word: list[str], merges: list[tuple[str, str]]) -> list[str]:
    """BPE encoding: replay the learned merges, in order, on one word.

    word: its symbols, e.g. ["▁", "l", "o", "w"]; merges: in the order learned
    returns the symbols after every merge (each merge joins every occurrence
    of its pair, left to right)
    """
    for left, right in merges:
        merged, i = [], 0
        while i < len(word):
            if word[i : i + 2] == [left, right]:
                merged.append(left + right)
                i += 2
            else:
                merged.append(word[i])
                i += 1
        word = merged
    return word


def scaled_embedding(ids: Tensor, table: Tensor) -> Tensor:
    """The Transformer's token embedding: each id's row, times √d_model.

    ids: integer (batch, len); table: (vocab, d_model)
    returns (batch, len, d_model)
    """
    return table[ids] * table.size(-1) ** 0.5


def frame_signal(signal: Tensor, size: int, hop: int) -> Tensor:
    """Cut a 1-d signal into overlapping frames, the tokens of an audio model.

    signal: (n,); frames of ``size`` samples starting every ``hop`` samples
    returns (n_frames, size), n_frames = 1 + (n - size) // hop; a tail too
    short for a whole frame is dropped
    """
    starts = range(0, signal.size(0) - size + 1, hop)
    return torch.stack([signal[s : s + size] for s in starts])
