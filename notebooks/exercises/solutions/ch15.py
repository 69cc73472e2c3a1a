"""Reference solutions to chapter 15's exercises (the Transformer today)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last axis: weight ⊙ x / √(mean(x²) + eps).

    x: (..., d); weight: (d,). returns (..., d)
    """
    return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotate pair (x₂ᵢ, x₂ᵢ₊₁) at position m by m θᵢ, θᵢ = base^(−2i/d).

    x: (..., n, d), d even; positions: integer (n,). returns (..., n, d)
    """
    d = x.size(-1)
    pairs = torch.arange(0, d, 2, dtype=torch.float64)  # 2i for i < d/2
    theta = base ** (-pairs / d)  # (d/2,)
    angle = positions.double()[:, None] * theta  # (n, d/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    first, second = x[..., 0::2], x[..., 1::2]  # (..., n, d/2) each
    turned = (first * cos - second * sin, first * sin + second * cos)
    return torch.stack(turned, dim=-1).flatten(-2)  # pairs interleaved again


def alibi_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention with ALiBi: scores − m_h (i − j), m_h = 2^(−8h/H).

    q, k, v: (b, H, n, d_k). returns (b, H, n, d_k)
    """
    heads, n = q.size(1), q.size(2)
    slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=q.dtype) / heads)
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    bias = -slopes[:, None, None] * (i - j).to(q.dtype)  # (H, n, n)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias
    scores = scores.masked_fill(j > i, float("-inf"))
    return scores.softmax(-1) @ v


def grouped_query_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention of H query heads over G key/value heads.

    q: (b, H, n, d_k); k, v: (b, G, n, d_k), G divides H. Query head h reads
    key/value head h // (H / G). returns (b, H, n, d_k)
    """
    group = q.size(1) // k.size(1)
    k = k.repeat_interleave(group, dim=1)  # (b, H, n, d_k)
    v = v.repeat_interleave(group, dim=1)
    n = q.size(2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v
