"""Checks of chapter 14's exercises: bits per byte, temperature, order 0, leak."""

from __future__ import annotations

import math
from collections import Counter
from types import ModuleType

import torch

from annotated_transformer.exercises.grading import (
    assert_equal,
    exercise,
    rng,
    seed,
)
from annotated_transformer.exercises.inputs import Peeking, decoder_lm
from annotated_transformer.exercises.protocol import build

CHAPTER = "14"


@exercise(
    chapter=CHAPTER,
    name="bits_per_byte",
    question="Score twice as much text with the same model: should the number "
    "double? A model that knows nothing (uniform over 256 bytes) pays exactly 8 "
    "bits a byte.",
    title="Find the bug: total bits reported as bits per byte",
    hint="bits per byte is the total divided by the number of bytes scored: a "
    "mean, not a sum.",
)
def check_bits_per_byte(m: ModuleType) -> None:
    targets = torch.randint(0, 256, (2, 10))
    uniform = m.bits_per_byte(torch.zeros(2, 10, 256), targets)
    assert math.isclose(uniform, 8.0, rel_tol=1e-6), (
        f"a uniform model scores 8 bits per byte, yours {uniform:.4g}"
    )
    gen = rng(0)
    logits = torch.randn(3, 7, 256, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, 256, (3, 7), generator=gen)
    log_p = logits.log_softmax(-1).gather(-1, targets[..., None])
    expected = -log_p.mean().item() / math.log(2)
    got = m.bits_per_byte(logits, targets)
    assert math.isclose(got, expected, rel_tol=1e-6), (
        f"expected {expected:.4f} bits per byte (mean −log₂ p), got {got:.4f}"
    )
    doubled = m.bits_per_byte(logits.repeat(2, 1, 1), targets.repeat(2, 1))
    assert math.isclose(doubled, got, rel_tol=1e-6), (
        "the same text scored twice must cost the same bits per byte"
    )


@exercise(
    chapter=CHAPTER,
    name="temperature_for_entropy",
    title="A temperature for a target entropy",
    hint="The entropy of softmax(logits / T) grows with T, from 0 to log₂ V: "
    "bisect on T (or on log T, since T may span decades) until it matches.",
)
def check_temperature_for_entropy(m: ModuleType) -> None:
    gen = rng(1)
    logits = 3 * torch.randn(256, generator=gen, dtype=torch.float64)
    for bits in (0.5, 2.0, 5.0, 7.5):
        t = m.temperature_for_entropy(logits, bits)
        p = (logits / t).softmax(-1)
        got = -torch.xlogy(p, p).sum().item() / math.log(2)  # 0 log 0 = 0
        assert abs(got - bits) < 1e-4, (
            f"at your temperature {t:.4g} the distribution has {got:.4f} bits, "
            f"not {bits}; expected to within 1e-4 bits"
        )


@exercise(
    chapter=CHAPTER,
    name="unigram_bits_per_byte",
    title="The order-0 yardstick",
    hint="Count each of the 256 byte values in the training text, add one to "
    "every count, and average −log₂ of each scored byte's frequency.",
)
def check_unigram_bits_per_byte(m: ModuleType) -> None:
    gen = rng(2)  # random bytes, most from a few values: counts far from uniform
    common = torch.randint(0, 256, (8,), generator=gen)
    picks = torch.randint(0, 8, (300,), generator=gen)
    rare = torch.randint(0, 256, (300,), generator=gen)
    data = torch.where(torch.rand(300, generator=gen) < 0.8, common[picks], rare)
    data[torch.randint(0, 300, (12,), generator=gen)] = 0  # NUL bytes too
    random = bytes(data[:200].tolist()), bytes(data[200:].tolist())
    fixed = b"abracadabra, the cat sat on the mat", b"a bad cat \xff"
    for train, text in (fixed, random, (b"", b"xyz"), (b"\x00", b"\x00\x00")):
        counts = Counter(train)
        total = len(train) + 256
        bits = [-math.log2((counts[b] + 1) / total) for b in text[1:]]
        expected = sum(bits) / len(bits)
        got = m.unigram_bits_per_byte(train, text)
        assert math.isclose(got, expected, rel_tol=1e-9), (
            f"on {len(train)} training bytes and {len(text)} bytes to score: "
            f"expected {expected:.6f} bits per byte (add-one counts, bytes after "
            f"the first), got {got:.6f}"
        )


@exercise(
    chapter=CHAPTER,
    name="influence",
    title="The leak test",
    hint="Run the model once, then once per position j with byte j changed (to "
    "any other byte); compare the logits row by row, under torch.no_grad().",
)
def check_influence(m: ModuleType) -> None:
    torch.manual_seed(seed(0))
    model = build(decoder_lm, 256, 16, 2, 2, 8, 32, causal=True)
    x = torch.tensor([list(b"[[link]]")])
    n = x.size(1)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    assert_equal(m.influence(model, x), causal, "the causal model's influence")
    torch.manual_seed(seed(0))
    blind = build(decoder_lm, 256, 16, 2, 2, 8, 32, causal=False)
    assert_equal(
        m.influence(blind, x),
        torch.ones(n, n, dtype=torch.bool),
        "without its mask, every position reads every byte",
    )
    j = torch.arange(n)
    peeking = torch.ones(n, n, dtype=torch.bool).tril(1) & (j >= 1)[None, :]
    assert_equal(
        m.influence(build(Peeking, model), x),
        peeking,
        "a model that reads one byte ahead: its influence matrix",
    )
