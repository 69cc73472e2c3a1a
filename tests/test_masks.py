"""Masks against brute-force definitions, and the padded-row fix for #137."""

import pytest
import torch

from annotated_transformer.blocks.attention import attention
from annotated_transformer.blocks.masks import (
    check_mask,
    make_std_mask,
    padding_mask,
    subsequent_mask,
    target_mask,
    window_mask,
)

PAD = 0


def test_subsequent_mask_is_lower_triangular():
    size = 6
    mask = subsequent_mask(size)
    assert mask.shape == (1, size, size) and mask.dtype == torch.bool
    for i in range(size):
        for j in range(size):
            assert bool(mask[0, i, j]) == (j <= i)


def test_subsequent_mask_with_offset_matches_positions():
    size, offset = 3, 4
    mask = subsequent_mask(size, offset=offset)
    assert mask.shape == (1, size, offset + size)
    for i in range(size):  # query i is absolute position offset + i
        for j in range(offset + size):
            assert bool(mask[0, i, j]) == (j <= offset + i)
    # The last rows of the full square mask are the same thing.
    assert torch.equal(mask, subsequent_mask(offset + size)[:, offset:])


def test_padding_mask():
    tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 9]])
    mask = padding_mask(tokens, PAD)
    assert mask.shape == (2, 1, 4)
    assert mask[:, 0].tolist() == [
        [True, True, False, False],
        [True, False, True, True],
    ]


def brute_force_target_mask(tgt, pad):
    batch, n = tgt.shape
    mask = torch.zeros(batch, n, n, dtype=torch.bool)
    for b in range(batch):
        for i in range(n):
            for j in range(n):
                if tgt[b, i] == pad:
                    mask[b, i, j] = i == j
                else:
                    mask[b, i, j] = j <= i and tgt[b, j] != pad
    return mask


def test_make_std_mask_matches_definition():
    tgt = torch.tensor([[1, 4, 5, 0, 0], [0, 0, 1, 3, 2], [1, 2, 3, 4, 5]])
    assert torch.equal(make_std_mask(tgt, PAD), brute_force_target_mask(tgt, PAD))
    assert target_mask is make_std_mask


def test_real_rows_agree_with_the_original_make_std_mask():
    tgt = torch.tensor([[1, 4, 5, 0, 0], [1, 2, 0, 3, 0]])
    original = (tgt != PAD).unsqueeze(-2) & subsequent_mask(tgt.size(-1))
    ours = make_std_mask(tgt, PAD)
    real = tgt != PAD
    assert torch.equal(ours[real], original[real])


def test_left_padding_gives_no_nan():
    """With left padding, the original mask has an empty row
    (query 0 may see nothing)."""
    tgt = torch.tensor([[0, 0, 1, 2]])
    original = (tgt != PAD).unsqueeze(-2) & subsequent_mask(4)
    assert not bool(original[0, 0].any())
    mask = make_std_mask(tgt, PAD)
    assert bool(mask.any(-1).all())
    q = torch.randn(1, 4, 8)
    out, weights = attention(q, q, q, mask=mask)
    assert torch.isfinite(out).all()
    # Real queries put zero weight on padded keys.
    assert torch.all(weights[0, 2:, :2] == 0)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="positive integer size"):
        subsequent_mask(0)
    with pytest.raises(ValueError, match=r"\(batch, len\)"):
        padding_mask(torch.tensor([1, 2, 0]), PAD)
    with pytest.raises(ValueError, match="integer"):
        make_std_mask(torch.zeros(2, 3), PAD)
    with pytest.raises(ValueError, match=r"k_len=5"):
        check_mask(torch.ones(2, 1, 4, dtype=torch.bool), batch=2, q_len=3, k_len=5)
    with pytest.raises(ValueError, match="boolean"):
        check_mask(torch.ones(2, 1, 5), batch=2, q_len=3, k_len=5)
    check_mask(torch.ones(1, 3, 5, dtype=torch.bool), batch=2, q_len=3, k_len=5)


@pytest.mark.parametrize("size, window", [(1, 0), (6, 0), (6, 2), (5, 9)])
def test_window_mask_matches_definition(size, window):
    want = torch.tensor(
        [[abs(i - j) <= window for j in range(size)] for i in range(size)]
    )
    got = window_mask(size, window)
    assert got.shape == (1, size, size) and got.dtype == torch.bool
    assert torch.equal(got[0], want)
    with pytest.raises(ValueError, match="window=-1 must be >= 0"):
        window_mask(size, -1)
