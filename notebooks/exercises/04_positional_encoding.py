"""Chapter 04 exercises (Positional encoding): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=04
or  python -m annotated_transformer.exercises 04
"""

from torch import Tensor


def sinusoidal(positions: Tensor, d_model: int) -> Tensor:
    """The paper's encoding at any positions, fractional ones included.

    positions: (n,) float; returns (n, d_model) float64:
    PE[pos, 2i] = sin(pos ω_i), PE[pos, 2i + 1] = cos(pos ω_i),
    ω_i = 10000^(-2i / d_model)
    """
    raise NotImplementedError


def pe_dot(k: int, d_model: int) -> float:
    """PE[pos] · PE[pos + k] in closed form, Σ_i cos(k ω_i), for every pos."""
    raise NotImplementedError


def rotate_by(pe: Tensor, k: int) -> Tensor:
    """Move encodings k positions on by turning each (sin, cos) pair by k ω_i.

    pe: (..., d_model), the encodings of some positions pos
    returns the encodings of pos + k
    """
    raise NotImplementedError


def relative_offset(pe_a: Tensor, pe_b: Tensor, max_offset: int) -> int:
    """The offset k, |k| <= max_offset, with pe_b the encoding of pos + k when
    pe_a is the encoding of pos (both (d_model,), float64)."""
    raise NotImplementedError
