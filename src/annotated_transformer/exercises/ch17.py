"""Checks of chapter 17's exercises: bits per byte of a model over tokens, GPT-2's
parameter count, and GELU."""

from __future__ import annotations

import math
from types import ModuleType

import torch

from annotated_transformer.exercises.grading import (
    assert_close,
    exercise,
    integers,
    rng,
)
from annotated_transformer.models.encoder_decoder import count_parameters
from annotated_transformer.models.gpt2 import GPT2LM, GPTConfig

CHAPTER = "17"


@exercise(
    chapter=CHAPTER,
    name="token_bits_per_byte",
    title="Bits per byte from nats per token",
    hint="Add up −ln p of the target tokens, turn nats into bits (÷ ln 2), and "
    "divide by the bytes those target tokens spell, not by the number of tokens.",
)
def check_token_bits_per_byte(m: ModuleType) -> None:
    gen = rng(3)
    log_probs = torch.randn(12, 10, generator=gen).double().log_softmax(-1)
    targets = torch.randint(0, 10, (12,), generator=gen)
    token_bytes = torch.randint(1, 6, (10,), generator=gen)
    nats = [-log_probs[t, int(target)].item() for t, target in enumerate(targets)]
    bits = sum(nats) / math.log(2)
    n_bytes = sum(int(token_bytes[int(target)]) for target in targets)
    got = m.token_bits_per_byte(log_probs, targets, token_bytes)
    assert math.isclose(got, bits / n_bytes, rel_tol=1e-9), (
        f"expected {bits / n_bytes:.6f} bits per byte, got {got:.6f}"
    )
    ones = torch.ones(10, dtype=torch.long)  # tokens of one byte: bits per token
    per_token = m.token_bits_per_byte(log_probs, targets, ones)
    assert math.isclose(per_token, bits / 12, rel_tol=1e-9), (
        "when every token is one byte, bits per byte = bits per token"
    )


def _drawn_gpt2() -> tuple[int, ...]:
    """This run's (vocab, d_model, N, max_len, d_ff); d_model even (2 heads)."""
    vocab, half_d, N, max_len, d_ff = integers(0, 2, 40, 5)
    return vocab, 2 * half_d, N % 4 + 1, max_len, d_ff


@exercise(
    chapter=CHAPTER,
    name="gpt2_parameters",
    title="Count GPT-2's parameters",
    hint="Count matrix by matrix: the (tied) token table, the position table, "
    "then per block two LayerNorms (gain and bias), four d×d projections with "
    "biases and the two-layer MLP with biases; one more LayerNorm at the end. No "
    "output matrix.",
)
def check_gpt2_parameters(m: ModuleType) -> None:
    for vocab, d_model, N, max_len, d_ff in (
        (256, 16, 2, 8, 64),
        (768, 32, 3, 20, 48),
        _drawn_gpt2(),
    ):
        model = GPT2LM(GPTConfig(vocab, d_model, 2, N, max_len, d_ff))
        expected = count_parameters(model)
        got = m.gpt2_parameters(vocab, d_model, N, max_len, d_ff)
        assert got == expected, (
            f"GPT2LM(vocab={vocab}, d_model={d_model}, N={N}, max_len={max_len}, "
            f"d_ff={d_ff}) has {expected:,} parameters, you count {got:,}"
        )


@exercise(
    chapter=CHAPTER,
    name="gelu",
    title="GELU, exact and as GPT-2 computed it",
    hint="Φ(x) = (1 + erf(x / √2)) / 2 (torch.erf); the tanh form is "
    "0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).",
)
def check_gelu(m: ModuleType) -> None:
    x = torch.randn(200, generator=rng(5), dtype=torch.float64) * 3
    exact = [v * (1 + math.erf(v / math.sqrt(2))) / 2 for v in x.tolist()]
    c = math.sqrt(2 / math.pi)
    tanh = [
        0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3))) for v in x.tolist()
    ]
    for approximate, expected in ((False, exact), (True, tanh)):
        got = m.gelu(x, approximate=approximate)
        what = f"gelu(x, approximate={approximate})"
        assert_close(
            got, torch.tensor(expected, dtype=torch.float64), what, 1e-9, 1e-9
        )
