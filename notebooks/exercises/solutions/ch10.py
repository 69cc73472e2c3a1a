"""Reference solutions to chapter 10's exercises (translation on Multi30k)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from annotated_transformer.data.vocab import Vocab


def train_vocab(
    splits: dict[str, list[list[str]]],
    min_freq: int = 2,
) -> Vocab:
    """The vocabulary of the *training* split: other words become <unk>."""
    return Vocab.build(splits["train"], min_freq=min_freq)


def brevity_penalty(hyp_len: int, ref_len: int) -> float:
    """BP: 1 for an output longer than the references, else e^(1−r/c)."""
    if hyp_len == 0:
        return 0.0
    if hyp_len > ref_len:
        return 1.0
    return math.exp(1 - ref_len / hyp_len)


def corpus_bleu(
    hypotheses: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
) -> float:
    """Corpus BLEU (0–100) of token lists, one reference each, no smoothing.

    BLEU = BP · exp(¼ Σₙ log pₙ) for n = 1 … 4, where pₙ = (clipped n-gram
    matches) / (n-grams of the hypotheses), both summed over the whole corpus
    before dividing.
    """

    def ngrams(tokens: Sequence[str], n: int) -> Counter:
        starts = range(len(tokens) - n + 1)
        return Counter(tuple(tokens[i : i + n]) for i in starts)

    matches, totals = [0] * 4, [0] * 4
    for hyp, ref in zip(hypotheses, references, strict=True):
        for n in range(1, 5):
            hyp_counts, ref_counts = ngrams(hyp, n), ngrams(ref, n)
            clipped = (min(c, ref_counts[g]) for g, c in hyp_counts.items())
            matches[n - 1] += sum(clipped)
            totals[n - 1] += sum(hyp_counts.values())
    if min(matches) == 0:
        return 0.0  # a precision of 0: the geometric mean is 0
    precisions = [m / t for m, t in zip(matches, totals, strict=True)]
    mean = math.exp(sum(math.log(p) for p in precisions) / 4)
    hyp_len = sum(len(h) for h in hypotheses)
    ref_len = sum(len(r) for r in references)
    return 100 * brevity_penalty(hyp_len, ref_len) * mean


def token_budget_batches(
    lengths: Sequence[int],
    max_tokens: int,
) -> list[list[int]]:
    """Indices sorted by length, cut greedily under a token budget.

    Each batch holds len(batch) · longest <= max_tokens; batches come out in
    order of length; a sequence longer than the budget makes a batch alone.
    """
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        # sorted by length, so sequence i is the longest of the batch it joins
        if batch and (len(batch) + 1) * lengths[i] > max_tokens:
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches
