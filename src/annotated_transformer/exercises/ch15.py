"""Checks of chapter 15's exercises: RMSNorm, RoPE, ALiBi, grouped queries."""

from __future__ import annotations

import math
from types import ModuleType

import torch
import torch.nn.functional as F

from annotated_transformer.exercises.ch05 import NORMS
from annotated_transformer.exercises.grading import (
    assert_close,
    backward,
    exercise,
    forbidden,
    rng,
)

CHAPTER = "15"


@exercise(
    chapter=CHAPTER,
    name="rms_norm",
    title="RMSNorm by hand",
    hint="Divide each vector by the root of the mean of its squared features "
    "(plus eps, inside the root), then multiply by the gain; no mean is "
    "subtracted, no bias added.",
)
def check_rms_norm(m: ModuleType) -> None:
    gen = rng(0)
    x = 3 * torch.randn(2, 5, 8, generator=gen) + 1
    weight = torch.rand(8, generator=gen) + 0.5
    for eps in (1e-6, 0.5):
        x.requires_grad_(True)
        expected = F.rms_norm(x, (8,), weight, eps)
        cotangent = torch.randn(x.shape, generator=gen)
        (want,) = torch.autograd.grad(expected, x, cotangent)
        x.grad = None
        with forbidden(*NORMS, why="by hand"), backward(cotangent):
            got = m.rms_norm(x, weight, eps)
        assert_close(got, expected.detach(), f"RMSNorm with eps={eps}")
        assert_close(x.grad, want, f"the gradient of RMSNorm with eps={eps}")


@exercise(
    chapter=CHAPTER,
    name="rope",
    title="Rotary embeddings",
    hint="Features 2i and 2i+1 form pair i, turned by the angle m·θᵢ with θᵢ = "
    "base^(−2i/d): (a, b) -> (a cos − b sin, a sin + b cos).",
)
def check_rope(m: ModuleType) -> None:
    gen = rng(1)
    x = torch.randn(2, 3, 6, 8, generator=gen, dtype=torch.float64)  # (b, h, n, d)
    positions = torch.tensor([0, 1, 2, 7, 100, 1000])
    # pair i as the complex number x₂ᵢ + i·x₂ᵢ₊₁, turned by e^(i·m·θᵢ)
    pairs = torch.view_as_complex(x.unflatten(-1, (4, 2)).contiguous())
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angle = positions[:, None] * theta  # (n, 4)
    turn = torch.polar(torch.ones_like(angle), angle)
    expected = torch.view_as_real(pairs * turn).flatten(-2)
    got = m.rope(x, positions)
    assert_close(got, expected, "the rotated vectors (pair i as a complex number)")
    q, k = torch.randn(2, 8, generator=gen, dtype=torch.float64)
    scores = []
    for start in (0, 5, 50):
        pair = torch.stack([q, k])[None]  # (1, 2, d): q at start, k at start + 3
        rotated = m.rope(pair, torch.tensor([start, start + 3]))[0]
        scores.append((rotated[0] @ rotated[1]).item())
    assert max(scores) - min(scores) < 1e-9, (
        f"q·k at offset 3 must not depend on where the pair sits; got {scores}"
    )


def _alibi_reference(q, k, v):
    _, heads, n, d = q.shape
    out = torch.zeros_like(q)
    for h in range(heads):
        slope = 2 ** (-8 * (h + 1) / heads)
        for i in range(n):
            # (b, i + 1)
            scores = torch.tensor(
                [(q[:, h, i] * k[:, h, j]).sum(-1).tolist() for j in range(i + 1)],
                dtype=q.dtype,
            ).T / math.sqrt(d)
            scores = scores - slope * torch.arange(i, -1, -1, dtype=q.dtype)
            weights = scores.softmax(-1)  # (b, i + 1)
            out[:, h, i] = torch.einsum("bj,bjd->bd", weights, v[:, h, : i + 1])
    return out


@exercise(
    chapter=CHAPTER,
    name="alibi_attention",
    title="ALiBi added to attention",
    hint="Add −m_h·(i − j) to head h's scaled scores, with m_h = 2^(−8h/H) for h "
    "= 1..H; hide the future keys (j > i) before the softmax.",
)
def check_alibi_attention(m: ModuleType) -> None:
    gen = rng(2)
    q, k, v = torch.randn(3, 2, 4, 6, 8, generator=gen, dtype=torch.float64)
    expected = _alibi_reference(q, k, v)
    assert_close(m.alibi_attention(q, k, v), expected, "the output")


@exercise(
    chapter=CHAPTER,
    name="grouped_query_attention",
    title="Grouped-query attention",
    hint="H / G consecutive query heads share one key/value head: query head h "
    "reads key/value head h // (H / G). The scores are causal and scaled by √d_k.",
)
def check_grouped_query_attention(m: ModuleType) -> None:
    gen = rng(3)
    for kv_heads in (1, 2, 8):
        q = torch.randn(2, 8, 5, 4, generator=gen, dtype=torch.float64)
        k, v = torch.randn(2, 2, kv_heads, 5, 4, generator=gen, dtype=torch.float64)
        sdpa = F.scaled_dot_product_attention
        expected = sdpa(q, k, v, is_causal=True, enable_gqa=True)
        got = m.grouped_query_attention(q, k, v)
        assert_close(got, expected, f"the output with {kv_heads} key/value head(s)")
