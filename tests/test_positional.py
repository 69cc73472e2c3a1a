"""Positional encodings against the paper's formula and the rotation property."""

import math

import pytest
import torch

from annotated_transformer.blocks.positional import (
    PositionalEmbedding,
    PositionalEncoding,
    check_positions,
    sinusoids,
)
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)


def test_sinusoids_match_the_formula():
    max_len, d = 100, 16
    pe = sinusoids(max_len, d)
    expected = torch.zeros(max_len, d, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            expected[pos, 2 * i] = math.sin(angle)
            expected[pos, 2 * i + 1] = math.cos(angle)
    torch.testing.assert_close(pe.double(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("k", [1, 3, 17])
def test_offset_is_a_rotation_that_depends_only_on_k(k):
    """PE(pos + k) = R(k) PE(pos), R(k) block-diagonal with
    2×2 rotations by ω_i k."""
    max_len, d = 64, 12
    pe = sinusoids(max_len, d).double()
    R = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        w = 1 / 10000 ** (2 * i / d)
        c, s = math.cos(w * k), math.sin(w * k)
        # (sin(a + b), cos(a + b)) = (sin a cos b + cos a sin b,
        # cos a cos b - sin a sin b)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]])
    rotated = pe[: max_len - k] @ R.T
    torch.testing.assert_close(rotated, pe[k:], atol=1e-5, rtol=0)


def test_forward_adds_the_table_from_offset():
    torch.manual_seed(0)
    module = PositionalEncoding(8, dropout=0.1, max_len=20).eval()
    x = torch.randn(2, 10, 8)
    torch.testing.assert_close(module(x), x + sinusoids(20, 8)[:10])
    torch.testing.assert_close(module(x[:, 4:], offset=4), module(x)[:, 4:])
    assert "pe" not in module.state_dict()  # recomputed, not stored in checkpoints


def test_learned_embedding_offset_and_training():
    torch.manual_seed(0)
    module = PositionalEmbedding(8, max_len=12)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(module(x), x + module.embedding.weight[:5])
    torch.testing.assert_close(module(x[:, 2:], offset=2), module(x)[:, 2:])
    module(x).sum().backward()
    assert module.embedding.weight.grad is not None


def test_too_long_raises_with_sizes():
    """Checked where input enters a model (check_positions), once."""
    with pytest.raises(ValueError, match=r"offset=0 \+ len=11.*max_len=10"):
        check_positions(11, 0, max_len=10)
    with pytest.raises(ValueError, match=r"offset=8 \+ len=3.*max_len=10"):
        check_positions(3, 8, max_len=10)
    with pytest.raises(ValueError, match=r"lie in \[0, max_len=10\)"):
        check_positions(2, torch.tensor([[0, 10]]), max_len=10)
    check_positions(10, 0, max_len=10)  # the last position is fine


def test_odd_d_model_raises():
    with pytest.raises(ValueError, match="d_model=7"):
        Transformer(TransformerConfig(11, 11, d_model=7, h=7))
