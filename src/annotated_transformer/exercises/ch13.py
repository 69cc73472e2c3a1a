"""Checks of chapter 13's exercises: pooling, truncation, an accuracy's error."""

from __future__ import annotations

import math
import random
import statistics
from types import ModuleType

import torch

from annotated_transformer.exercises.grading import (
    assert_close,
    exercise,
    rng,
    seed,
)

CHAPTER = "13"


@exercise(
    chapter=CHAPTER,
    name="masked_mean",
    title="Mean pooling that ignores padding",
    hint="Weight each position by 1 (a token) or 0 (padding), sum over the "
    "positions and divide by the number of real tokens of that sequence, not by "
    "n.",
)
def check_masked_mean(m: ModuleType) -> None:
    gen = rng(0)
    x = torch.randn(3, 6, 4, generator=gen)
    lengths = [6, 2, 4]
    real = torch.arange(6)[None, :] < torch.tensor(lengths)[:, None]  # (3, 6)
    x[~real] = 1e4  # whatever the padding positions hold must not matter
    expected = torch.stack([x[b, :n].mean(0) for b, n in enumerate(lengths)])
    assert_close(m.masked_mean(x, real), expected, "the pooled vectors")
    alone = m.masked_mean(x[1:2, :2], real[1:2, :2])
    assert_close(alone[0], expected[1], "a review pooled alone, without padding")


@exercise(
    chapter=CHAPTER,
    name="head_and_tail",
    title="Keep the verdict: head and tail truncation",
    hint="A review that fits is returned whole; otherwise its first max_len − "
    "tail tokens followed by its last tail tokens (careful: ids[-0:] is the whole "
    "list).",
)
def check_head_and_tail(m: ModuleType) -> None:
    review = list(range(10))
    cut = m.head_and_tail
    assert cut(review, 12, 3) == review, "a review that fits stays whole"
    assert cut(review, 10, 3) == review, "a review of max_len tokens stays whole"
    assert cut(review, 6, 2) == [0, 1, 2, 3, 8, 9], "head 4 and tail 2"
    assert cut(review, 6, 0) == [0, 1, 2, 3, 4, 5], "tail 0: the head only"
    assert cut(review, 6, 6) == [4, 5, 6, 7, 8, 9], "tail = max_len"
    rng = random.Random(seed(10))
    for _ in range(100):
        ids = [rng.randrange(100) for _ in range(rng.randint(0, 40))]
        max_len = rng.randint(1, 30)
        tail = rng.randint(0, max_len)
        got = cut(ids, max_len, tail)
        assert len(got) == min(len(ids), max_len), "keep min(len, max_len) ids"
        if len(ids) > max_len:
            head = max_len - tail
            assert got[:head] == ids[:head], "the head is wrong"
            assert got[head:] == ids[len(ids) - tail :], "the tail is wrong"


@exercise(
    chapter=CHAPTER,
    name="accuracy_and_standard_error",
    title="How sure is an accuracy?",
    hint="Each review is right (1) or wrong (0): the accuracy is their mean, and "
    "its standard error that of a mean of n Bernoulli draws.",
)
def check_accuracy_and_standard_error(m: ModuleType) -> None:
    gen = rng(1)
    for n in (10, 1000, 25_000):
        labels = torch.randint(0, 2, (n,), generator=gen)
        flip = torch.rand(n, generator=gen) < 0.12
        predictions = torch.where(flip, 1 - labels, labels)
        correct = (predictions == labels).int().tolist()
        accuracy, error = m.accuracy_and_standard_error(predictions, labels)
        expected = statistics.pstdev(correct) / math.sqrt(n)
        assert math.isclose(accuracy, statistics.mean(correct), rel_tol=1e-6), (
            f"{n} reviews: accuracy {accuracy}, expected {statistics.mean(correct)}"
        )
        assert math.isclose(error, expected, rel_tol=1e-6), (
            f"{n} reviews at accuracy {accuracy:.4f}: standard error "
            f"{expected:.6f}, "
            f"yours {error:.6f}"
        )
