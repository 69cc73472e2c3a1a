"""Checks of chapter 03's exercises (Tokens and embeddings)."""

import math
from collections import Counter
from types import ModuleType

import torch
import torch.nn.functional as F

from annotated_transformer.data.bpe import merge_word
from annotated_transformer.exercises.grading import (
    assert_close,
    assert_equal,
    exercise,
    rng,
)


@exercise(
    chapter="03",
    name="count_pairs",
    title="Count the pairs, as BPE does",
    hint="walk through each word's neighbours (zip(word, word[1:]) or "
    "itertools.pairwise) and add the word's count, not 1, for each pair; a pair "
    "that occurs twice in one word counts twice.",
)
def check_count_pairs(m: ModuleType) -> None:
    corpus = {("l", "o", "w"): 5, ("l", "o", "w", "e", "r"): 2, ("a", "a", "a"): 3}
    expected = {("l", "o"): 7, ("o", "w"): 7, ("w", "e"): 2, ("e", "r"): 2}
    expected[("a", "a")] = 6  # twice in "a a a", a word seen 3 times
    counts = m.count_pairs(corpus)
    assert isinstance(counts, dict), "return a Counter (or a dict) of pairs"
    assert dict(counts) == expected, f"got {dict(counts)}, expected {expected}"
    assert m.count_pairs({("x",): 4}) == Counter(), "a one-symbol word has no pair"
    g = rng(3)
    symbols = ["a", "b", "ab", "▁c"]
    corpus = {}
    for _ in range(12):  # random words of symbols, seen a random number of times
        length = int(torch.randint(1, 7, (1,), generator=g))
        picks = torch.randint(0, 4, (length,), generator=g).tolist()
        word = tuple(symbols[i] for i in picks)
        corpus[word] = int(torch.randint(1, 10, (1,), generator=g))
    expected = {}
    for left in symbols:  # every candidate pair, counted position by position
        for right in symbols:
            n = sum(
                count * sum(w[i : i + 2] == (left, right) for i in range(len(w)))
                for w, count in corpus.items()
            )
            if n:
                expected[(left, right)] = n
    got = m.count_pairs(corpus)
    wrong = f"on the words {corpus}: got {dict(got)}, expected {expected}"
    assert dict(got) == expected, wrong


@exercise(
    chapter="03",
    name="apply_merges",
    title="Encode a word with learned merges",
    hint="go through the merges in the order they were learned; for each, scan "
    "the word left to right and join every occurrence of the pair (skip past a "
    "joined pair, so 'a a a' with the merge a+a gives 'aa a').",
)
def check_apply_merges(m: ModuleType) -> None:
    merges = [("l", "o"), ("lo", "w"), ("e", "r"), ("▁", "low")]
    word = list("▁lower")
    assert m.apply_merges(word, merges) == ["▁low", "er"], "▁lower -> ▁low er"
    assert word == list("▁lower"), "do not change the word you were given"
    assert m.apply_merges(list("aaa"), [("a", "a")]) == ["aa", "a"], "aaa -> aa a"
    assert m.apply_merges(list("ab"), []) == ["a", "b"], "no merges: the characters"
    g = rng(0)
    letters = list("abc")
    merges = [("a", "b"), ("ab", "c"), ("c", "c"), ("b", "a"), ("abc", "a")]
    for _ in range(50):  # random words, against merging one pair at a time
        picks = torch.randint(0, 3, (8,), generator=g).tolist()
        word = [letters[i] for i in picks]
        expected = word
        for pair in merges:
            expected = merge_word(expected, pair)
        assert m.apply_merges(word, merges) == expected, f"{''.join(word)}"


@exercise(
    chapter="03",
    name="scaled_embedding",
    title="The embedding, scaled by √d_model",
    hint="indexing the table with the ids, table[ids], looks every id up at once; "
    "then multiply by the square root of d_model, the table's second size.",
)
def check_scaled_embedding(m: ModuleType) -> None:
    g = rng(1)
    table = torch.randn(11, 16, generator=g)
    ids = torch.randint(0, 11, (2, 5), generator=g)
    expected = F.embedding(ids, table) * math.sqrt(16)
    assert_close(m.scaled_embedding(ids, table), expected, "the embeddings")


@exercise(
    chapter="03",
    name="frame_signal",
    title="Frames of a signal as tokens",
    hint="frame f holds samples f*hop .. f*hop + size - 1; there are 1 + (n - "
    "size) // hop whole frames; signal.unfold(0, size, hop) does it in one call, "
    "but a loop over the starts is fine too.",
)
def check_frame_signal(m: ModuleType) -> None:
    signal = torch.arange(10.0)
    expected = torch.tensor([[0.0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]])
    assert_equal(m.frame_signal(signal, 4, 3), expected, "frames of 4, hop 3")
    g = rng(2)
    signal = torch.randn(101, generator=g)
    frames = m.frame_signal(signal, 16, 5)
    expected = torch.stack([signal[s : s + 16] for s in range(0, 101 - 16 + 1, 5)])
    assert_equal(frames, expected, "frames of 16, hop 5, of 101 samples")
