"""Rotary position embeddings, RoPE (Su et al. 2021): position as a rotation.

In every layer, pair i of the features of a query or key at position m turns by
the angle mθᵢ (θᵢ: the sinusoids' frequencies), x ↦ R(m) x:

    (x₂ᵢ, x₂ᵢ₊₁) ↦ (x₂ᵢ cos mθᵢ − x₂ᵢ₊₁ sin mθᵢ,  x₂ᵢ sin mθᵢ + x₂ᵢ₊₁ cos mθᵢ),
    θᵢ = base^(−2i/d)  (base 10000 by default).

Why: rotations compose, ⟨R(m) q, R(n) k⟩ = qᵀ R(n − m) k, so a score depends on
the positions only through their offset n − m.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rope_tables(
    positions: Tensor,
    d: int,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """cos(m θᵢ) and sin(m θᵢ) for every position m, θᵢ = base^(−2i/d), i < d/2.

    positions: (..., len), integer; d: the even width of the vectors to rotate
    dtype: of the angles and tables (float32 unless the vectors are float64)
    returns (cos, sin), each (..., len, d/2)
    """
    if d < 2 or d % 2 != 0:
        raise ValueError(
            "RoPE rotates pairs of features, so the width must be a positive even "
            f"number, got d={d}; choose d_model / h even"
        )
    # (d/2,)
    pair = torch.arange(0, d, 2, dtype=dtype, device=positions.device)
    theta = base ** (-pair / d)
    angles = positions.to(dtype).unsqueeze(-1) * theta  # (..., len, d/2)
    return angles.cos(), angles.sin()


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (x₂ᵢ, x₂ᵢ₊₁) of ``x`` by the angle of the given cos, sin.

    x: (..., len, d); cos, sin: broadcastable to (..., len, d/2)
    returns (..., len, d), in x's dtype (computed in the tables' dtype if wider)
    """
    if x.size(-1) != 2 * cos.size(-1):
        raise ValueError(
            f"x has {x.size(-1)} features but the tables rotate "
            f"{2 * cos.size(-1)}; build them with rope_tables(positions, "
            "x.size(-1))"
        )
    pairs = x.to(torch.promote_types(x.dtype, cos.dtype)).unflatten(-1, (-1, 2))
    # (..., len, d/2): the first and second member of each pair
    x1, x2 = pairs.unbind(-1)
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """RoPE: rotate pair i of the vector at position m by m θᵢ, θᵢ = base^(−2i/d).

    x: (..., len, d) with d even; positions: integer, broadcastable to (..., len)
    returns (..., len, d)
    """
    if positions.dim() == 0 or positions.size(-1) != x.size(-2):
        raise ValueError(
            f"positions {tuple(positions.shape)} must give one position per "
            f"vector: x has len={x.size(-2)} vectors (..., len, d)"
        )
    dtype = torch.promote_types(x.dtype, torch.float32)
    return rotate_pairs(x, *rope_tables(positions, x.size(-1), base, dtype))
