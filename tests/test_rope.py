"""Rotary position embeddings against explicit rotation matrices and
their defining properties."""

import math

import pytest
import torch

from annotated_transformer.blocks.positional import sinusoids
from annotated_transformer.blocks.rope import apply_rope, rope_tables, rotate_pairs

D = 8


def rotation_matrix(m: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """R(m), (d, d): block-diagonal, the 2×2 rotation by
    m·base^(−2i/d) in block i."""
    R = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        angle = m * base ** (-2 * i / d)
        c, s = math.cos(angle), math.sin(angle)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    return R


def randn(*shape):
    return torch.randn(
        *shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )


@pytest.mark.parametrize("base", [10000.0, 100.0])
def test_equals_explicit_rotation_matrices(base):
    x = randn(2, 3, 6, D)  # (batch, heads, len, d)
    positions = torch.tensor([0, 1, 2, 7, 50, 1000])
    expected = torch.stack(
        [
            x[:, :, j] @ rotation_matrix(int(m), D, base).T
            for j, m in enumerate(positions)
        ],
        dim=2,
    )
    torch.testing.assert_close(apply_rope(x, positions, base), expected)


def test_scores_depend_only_on_the_offset():
    q, k = randn(2, D).unbind(0)

    def score(m, n):
        rq = apply_rope(q[None], torch.tensor([m]))[0]
        rk = apply_rope(k[None], torch.tensor([n]))[0]
        return rq @ rk

    for offset in (0, 3, -5):
        scores = torch.stack([score(m, m + offset) for m in (0, 4, 11, 300)])
        torch.testing.assert_close(scores, scores[:1].expand(4))
    assert not torch.allclose(
        score(0, 3), score(0, 0)
    )  # the offset itself does matter


def test_preserves_norms_and_position_zero_is_the_identity():
    x = randn(4, 5, D)
    rotated = apply_rope(x, torch.arange(5) * 37)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(apply_rope(x, torch.zeros(5, dtype=torch.long)), x)


def test_rotating_the_unit_pairs_gives_the_sinusoids():
    """R(m) (1, 0) = (cos mθᵢ, sin mθᵢ): the paper's PE table with
    each pair's order swapped."""
    ones = torch.tensor([1.0, 0.0]).repeat(D // 2).expand(20, D)  # (len, d)
    rotated = apply_rope(ones, torch.arange(20))
    pe = sinusoids(20, D)
    torch.testing.assert_close(rotated[:, 0::2], pe[:, 1::2], atol=1e-5, rtol=0)
    torch.testing.assert_close(rotated[:, 1::2], pe[:, 0::2], atol=1e-5, rtol=0)


def test_batched_positions_and_reused_tables():
    x = randn(2, 4, D)
    positions = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])  # (batch, len)
    out = apply_rope(x, positions)
    for b in range(2):
        torch.testing.assert_close(out[b], apply_rope(x[b], positions[b]))
    cos, sin = rope_tables(positions, D, dtype=torch.float64)
    assert cos.shape == sin.shape == (2, 4, D // 2)
    torch.testing.assert_close(rotate_pairs(x, cos, sin), out)


def test_low_precision_inputs_keep_their_dtype():
    x = randn(3, D)
    out = apply_rope(x.to(torch.bfloat16), torch.arange(3))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(
        out.double(), apply_rope(x, torch.arange(3)), atol=0.05, rtol=0.02
    )


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="positive even number, got d=7"):
        apply_rope(torch.zeros(3, 7), torch.arange(3))
    with pytest.raises(ValueError, match="one position per vector"):
        apply_rope(torch.zeros(3, D), torch.arange(4))
    cos, sin = rope_tables(torch.arange(3), D)
    with pytest.raises(
        ValueError, match="x has 6 features but the tables rotate 8"
    ):
        rotate_pairs(torch.zeros(3, 6), cos, sin)
