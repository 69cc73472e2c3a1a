"""Layers against hand formulas and PyTorch's own transformer layers."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.blocks.feed_forward import PositionwiseFeedForward
from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.blocks.layers import (
    SublayerConnection,
    TransformerBlock,
    clones,
)
from annotated_transformer.blocks.masks import padding_mask, subsequent_mask
from annotated_transformer.blocks.norms import LayerNorm
from annotated_transformer.models.decoder_only import DecoderConfig
from annotated_transformer.models.encoder_only import EncoderConfig


def test_clones_are_independent_copies():
    layers = clones(nn.Linear(3, 3), 4)
    assert len(layers) == 4
    torch.testing.assert_close(layers[0].weight, layers[3].weight)
    with torch.no_grad():
        layers[0].weight.add_(1.0)
    assert not torch.allclose(layers[0].weight, layers[3].weight)


def test_hand_layer_norm_is_the_original_formula():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 10, dtype=torch.float64)
    norm = LayerNorm(10, eps=1e-6).double()
    with torch.no_grad():
        norm.a_2.uniform_()
        norm.b_2.uniform_()
    n = x.size(-1)
    mean = x.sum(-1, keepdim=True) / n
    std = (((x - mean) ** 2).sum(-1, keepdim=True) / (n - 1)).sqrt()
    torch.testing.assert_close(
        norm(x), norm.a_2 * (x - mean) / (std + 1e-6) + norm.b_2
    )


def test_hand_layer_norm_differs_from_nn_layer_norm_by_bessel_factor():
    """Without eps, unbiased std = biased std · √(n/(n-1)), so
    ours = nn's · √((n-1)/n)."""
    torch.manual_seed(0)
    n = 10
    x = torch.randn(4, n, dtype=torch.float64)
    ours = LayerNorm(n, eps=0.0).double()(x)
    reference = F.layer_norm(x, (n,), eps=0.0)
    torch.testing.assert_close(ours, reference * math.sqrt((n - 1) / n))
    assert not torch.allclose(ours, reference, atol=1e-2)


def test_feed_forward_formula():
    torch.manual_seed(0)
    ff = PositionwiseFeedForward(6, 24, dropout=0.0)
    x = torch.randn(2, 3, 6)
    hidden = torch.clamp(x @ ff.w_1.weight.T + ff.w_1.bias, min=0)
    torch.testing.assert_close(ff(x), hidden @ ff.w_2.weight.T + ff.w_2.bias)


def test_sublayer_connection_is_pre_norm():
    torch.manual_seed(0)
    block = SublayerConnection(6, dropout=0.0)
    x = torch.randn(2, 3, 6)
    f = nn.Linear(6, 6)
    torch.testing.assert_close(block(x, f), x + f(F.layer_norm(x, (6,), eps=1e-5)))


def load_block_into_torch(
    block: TransformerBlock, ref: nn.TransformerEncoderLayer
) -> None:
    """Copy our weights into PyTorch's layer: q, k, v
    projections stack into in_proj."""
    q, k, v, o = block.attention.linears
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(
            torch.cat([q.weight, k.weight, v.weight])
        )
        ref.self_attn.in_proj_bias.copy_(torch.cat([q.bias, k.bias, v.bias]))
        ref.self_attn.out_proj.weight.copy_(o.weight)
        ref.self_attn.out_proj.bias.copy_(o.bias)
        ref.linear1.load_state_dict(block.feed_forward.w_1.state_dict())
        ref.linear2.load_state_dict(block.feed_forward.w_2.state_dict())
        ref.norm1.load_state_dict(block.norm1.state_dict())
        ref.norm2.load_state_dict(block.norm2.state_dict())


@pytest.mark.parametrize("causal", [False, True])
def test_transformer_block_matches_post_norm_torch_layer(causal):
    torch.manual_seed(0)
    d, h, batch, n = 16, 4, 3, 7
    sizes = {"d_model": d, "h": h, "d_ff": 4 * d, "dropout": 0.1}
    config = DecoderConfig(**sizes) if causal else EncoderConfig(**sizes)
    block = TransformerBlock(config).eval()
    for p in block.parameters():  # move LayerNorms off the identity too
        nn.init.normal_(p, std=0.3)
    ref = nn.TransformerEncoderLayer(
        d, h, dim_feedforward=4 * d, dropout=0.1, activation="relu",
        batch_first=True, norm_first=False,
    ).eval()  # fmt: skip
    load_block_into_torch(block, ref)
    x = torch.randn(batch, n, d)
    tokens = torch.ones(batch, n, dtype=torch.long)
    tokens[1, 5:] = 0  # right padding
    mask = padding_mask(tokens, 0)
    ours = block(x, mask)
    kwargs = {"src_key_padding_mask": tokens == 0}
    if causal:
        # PyTorch: True = may NOT attend
        kwargs["src_mask"] = ~subsequent_mask(n)[0]
        kwargs["is_causal"] = True
    expected = ref(x, **kwargs)
    real = tokens != 0
    torch.testing.assert_close(ours[real], expected[real], atol=1e-5, rtol=1e-5)


def test_causal_block_with_cache_matches_full_pass():
    torch.manual_seed(0)
    block = TransformerBlock(DecoderConfig(d_model=16, h=4, d_ff=64)).eval()
    x = torch.randn(2, 6, 16)
    full = block(x)
    cache = KVCache()
    steps = [block(x[:, :2], cache=cache)] + [
        block(x[:, t : t + 1], cache=cache) for t in (2, 3)
    ]
    steps.append(block(x[:, 4:], cache=cache))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 6


def test_causal_block_does_not_leak_the_future():
    torch.manual_seed(0)
    block = TransformerBlock(DecoderConfig(d_model=16, h=4, d_ff=64)).eval()
    x = torch.randn(1, 6, 16)
    y = x.clone()
    y[:, 4:] = torch.randn(1, 2, 16)
    torch.testing.assert_close(block(x)[:, :4], block(y)[:, :4])
