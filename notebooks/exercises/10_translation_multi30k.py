"""Chapter 10 exercises (German→English on Multi30k): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=10
or  python -m annotated_transformer.exercises 10
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from annotated_transformer.data.vocab import Vocab


def train_vocab(splits: dict[str, list[list[str]]], min_freq: int = 2) -> Vocab:
    """Find the bug: the vocabulary of the token lists in ``splits``.

    splits: {"train": [...], "val": [...], "test2016": [...]}, each a list of
    sentences, each a list of tokens. Keep the tokens seen at least ``min_freq`` times.
    """
    everything = itertools.chain.from_iterable(splits.values())
    return Vocab.build(everything, min_freq=min_freq)


def brevity_penalty(hyp_len: int, ref_len: int) -> float:
    """BLEU's brevity penalty BP for ``hyp_len`` (c) output tokens against
    ``ref_len`` (r) reference tokens, summed over a corpus.
    returns a float in [0, 1]
    """
    raise NotImplementedError


def corpus_bleu(
    hypotheses: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
) -> float:
    """Corpus BLEU (0–100) of token lists, one reference per hypothesis.

    n-grams of 1 to 4 tokens, uniform weights, no smoothing, no lower-casing: the
    BLEU of sacreBLEU with tokenize="none" and smooth_method="none".
    """
    raise NotImplementedError


def token_budget_batches(
    lengths: Sequence[int],
    max_tokens: int,
) -> list[list[int]]:
    """Cut the indices 0..len(lengths)-1 into batches under a token budget.

    Sort by length; fill each batch while len(batch) · longest <= max_tokens (a
    sequence longer than the budget makes a batch on its own). returns the batches
    in order of length, each a list of indices
    """
    raise NotImplementedError
