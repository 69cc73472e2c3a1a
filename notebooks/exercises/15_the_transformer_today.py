"""Chapter 15 exercises (The Transformer today): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=15
or  python -m annotated_transformer.exercises 15
"""

from __future__ import annotations

from torch import Tensor


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last axis of x (..., d), with the gain weight (d,)."""
    raise NotImplementedError


def rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary embeddings: turn pair (x₂ᵢ, x₂ᵢ₊₁) of the vector at position m by
    m·θᵢ, θᵢ = base^(−2i/d).

    x: (..., n, d), d even; positions: integer (n,). returns (..., n, d)
    """
    raise NotImplementedError


def alibi_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention with ALiBi: q, k, v (b, H, n, d_k) -> (b, H, n, d_k).

    Head h = 1..H adds −m_h · (i − j) to its scaled scores, m_h = 2^(−8h/H).
    """
    raise NotImplementedError


def grouped_query_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal grouped-query attention, H query heads over G key/value heads.

    q: (b, H, n, d_k); k, v: (b, G, n, d_k), G divides H; returns (b, H, n, d_k)
    """
    raise NotImplementedError
