"""Embeddings: a table lookup scaled by √d_model, with clear errors for bad ids."""

import math

import pytest
import torch

from annotated_transformer.blocks.embeddings import (
    Embeddings,
    TokenAndPosition,
    check_ids,
)
from annotated_transformer.blocks.positional import PositionalEncoding
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)


def test_lookup_times_sqrt_d_model():
    torch.manual_seed(0)
    emb = Embeddings(d_model=16, vocab=10)
    ids = torch.tensor([[1, 2, 9], [0, 0, 3]])
    expected = torch.stack(
        [torch.stack([emb.lut.weight[int(i)] for i in row]) for row in ids]
    )
    torch.testing.assert_close(emb(ids), expected * math.sqrt(16))


@pytest.mark.parametrize("bad", [10, 57, -1])
def test_out_of_range_ids_raise_with_sizes(bad):
    """Checked where ids enter (check_ids), not in every forward pass."""
    with pytest.raises(ValueError, match=r"\[0, 10\).*size 10"):
        check_ids(torch.tensor([[1, bad]]), vocab=10)
    check_ids(torch.tensor([[0, 9]]), vocab=10)  # the edges are fine


def test_float_ids_raise():
    """At the model's door, not in the embedding layer."""
    model = Transformer(TransformerConfig(10, 10, N=1, d_model=4, d_ff=8, h=2))
    with pytest.raises(ValueError, match="src must hold integer token ids"):
        model.encode(torch.tensor([[1.0, 2.0]]), None)


def test_token_and_position_passes_the_offset():
    torch.manual_seed(0)
    embed = TokenAndPosition(
        Embeddings(8, 20), PositionalEncoding(8, 0.0, max_len=30)
    )
    ids = torch.randint(0, 20, (2, 7))
    torch.testing.assert_close(embed(ids[:, 3:], 3), embed(ids)[:, 3:])
