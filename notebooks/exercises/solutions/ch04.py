"""Reference solutions of chapter 04's exercises."""

import math

import torch
from torch import Tensor


def sinusoidal(positions: Tensor, d_model: int) -> Tensor:
    """The paper's encoding at any positions, fractional ones included.

    positions: (n,) float; returns (n, d_model) float64:
    PE[pos, 2i] = sin(pos ω_i), PE[pos, 2i + 1] = cos(pos ω_i),
    ω_i = 10000^(-2i / d_model)
    """
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    omega = 10000.0 ** (-two_i / d_model)  # (d/2,)
    angles = positions.to(torch.float64)[:, None] * omega  # (n, d/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)


def pe_dot(k: int, d_model: int) -> float:
    """PE[pos] · PE[pos + k] in closed form, Σ_i cos(k ω_i), for every pos."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    omega = 10000.0 ** (-two_i / d_model)
    return float((k * omega).cos().sum())


def rotate_by(pe: Tensor, k: int) -> Tensor:
    """Move encodings k positions on by turning each (sin, cos) pair by k ω_i.

    pe: (..., d_model), the encodings of some positions pos
    returns the encodings of pos + k
    """
    d_model = pe.size(-1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    omega = 10000.0 ** (-two_i / d_model)
    theta = k * omega.to(pe.dtype)  # (d/2,)
    sin, cos = pe[..., 0::2], pe[..., 1::2]  # (..., d/2) each
    new_sin = sin * theta.cos() + cos * theta.sin()
    new_cos = cos * theta.cos() - sin * theta.sin()
    return torch.stack([new_sin, new_cos], dim=-1).flatten(-2)


def relative_offset(pe_a: Tensor, pe_b: Tensor, max_offset: int) -> int:
    """The offset k, |k| <= max_offset, with pe_b the encoding of pos + k when
    pe_a is the encoding of pos (both (d_model,), float64)."""
    d_model = pe_a.size(-1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    omega = 10000.0 ** (-two_i / d_model)
    angle_a = torch.atan2(pe_a[0::2], pe_a[1::2])  # pos ω_i (mod 2π)
    angle_b = torch.atan2(pe_b[0::2], pe_b[1::2])
    turn = torch.remainder(angle_b - angle_a + math.pi, 2 * math.pi) - math.pi
    slow = int((omega * max_offset < math.pi).nonzero()[0])  # cannot wrap
    return round(float(turn[slow] / omega[slow]))
