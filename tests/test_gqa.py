"""Grouped-query attention against explicit per-head loops, SDPA on repeated heads
and torch.nn.MultiheadAttention; causality and the key/value cache."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.blocks.grouped_query_attention import (
    GroupedQueryAttention,
    RotaryAttention,
)
from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.blocks.rope import rope_tables
from annotated_transformer.models.modern_decoder import ModernConfig

B, L, D_MODEL = 2, 7, 24


def make(h, kv_heads, seed=0, rope=True, **kwargs):
    torch.manual_seed(seed)
    kind = RotaryAttention if rope else GroupedQueryAttention
    config = ModernConfig(d_model=D_MODEL, h=h, kv_heads=kv_heads, **kwargs)
    return kind(config).double().eval()


def inputs(length=L, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, length, D_MODEL, generator=g, dtype=torch.float64)


def rotate_complex(x, base=10000.0):
    """RoPE as complex multiplication: pair (a, b) at position
    m -> (a + ib) · e^{i m θ_k}."""
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(x.size(-2), dtype=torch.float64)[:, None] * theta
    z = torch.view_as_complex(x.unflatten(-1, (-1, 2)).contiguous()) * torch.polar(
        torch.ones_like(angles), angles
    )
    return torch.view_as_real(z).flatten(-2)


def reference(module, x, rope):
    """Loops over query heads; head j reads key/value head j // (h / kv_heads)."""
    h, kv, d_k = module.h, module.kv_heads, module.d_k
    q = (x @ module.w_q.weight.T).unflatten(-1, (h, d_k))  # (batch, len, h, d_k)
    k = (x @ module.w_k.weight.T).unflatten(-1, (kv, d_k))
    v = (x @ module.w_v.weight.T).unflatten(-1, (kv, d_k))
    causal = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    heads = []
    for j in range(h):
        g = j // (h // kv)
        qj, kg = q[:, :, j], k[:, :, g]
        if rope:
            qj, kg = rotate_complex(qj), rotate_complex(kg)
        scores = (qj @ kg.transpose(-2, -1) / d_k**0.5).masked_fill(
            ~causal, float("-inf")
        )
        heads.append(scores.softmax(-1) @ v[:, :, g])
    return torch.cat(heads, dim=-1) @ module.w_o.weight.T


@pytest.mark.parametrize(("h", "kv_heads"), [(4, 1), (4, 2), (6, 3), (6, 6)])
@pytest.mark.parametrize("rope", [True, False])
def test_matches_explicit_per_head_loop(h, kv_heads, rope):
    module = make(h, kv_heads, rope=rope)
    x = inputs()
    torch.testing.assert_close(module(x), reference(module, x, rope))


def test_matches_sdpa_on_repeated_key_value_heads():
    module = make(6, 2, rope=False)
    x = inputs()
    q = module.w_q(x).unflatten(-1, (6, 4)).transpose(1, 2)  # (batch, h, len, d_k)
    k, v = (
        w(x).unflatten(-1, (2, 4)).transpose(1, 2) for w in (module.w_k, module.w_v)
    )
    k, v = (
        k.repeat_interleave(3, dim=1),
        v.repeat_interleave(3, dim=1),
    )  # (batch, h, len, d_k)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(
        module(x), module.w_o(out.transpose(1, 2).flatten(2))
    )


def test_kv_heads_equal_to_h_is_torch_multi_head_attention():
    module = make(4, 4, rope=False)
    torch_mha = (
        nn.MultiheadAttention(D_MODEL, 4, bias=False, batch_first=True)
        .double()
        .eval()
    )
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(
            torch.cat([module.w_q.weight, module.w_k.weight, module.w_v.weight])
        )
        torch_mha.out_proj.weight.copy_(module.w_o.weight)
    x = inputs()
    future = torch.ones(L, L, dtype=torch.bool).triu(
        1
    )  # nn.MultiheadAttention: True = hidden
    expected, _ = torch_mha(x, x, x, attn_mask=future, need_weights=False)
    torch.testing.assert_close(module(x), expected)


@pytest.mark.parametrize("rope", [True, False])
def test_no_information_flows_from_the_future(rope):
    module = make(4, 2, rope=rope)
    x = inputs()
    changed = x.clone()
    changed[:, 4:] = inputs(seed=2)[:, 4:]
    torch.testing.assert_close(module(changed)[:, :4], module(x)[:, :4])
    assert not torch.allclose(module(changed)[:, 4:], module(x)[:, 4:])


@pytest.mark.parametrize(("h", "kv_heads"), [(4, 1), (4, 2), (4, 4)])
def test_cached_chunks_equal_the_full_sequence_and_cache_kv_heads(h, kv_heads):
    module = make(h, kv_heads)
    x = inputs(length=9)
    cache, outs, start = KVCache(), [], 0
    for size in (
        3,
        1,
        1,
        2,
        1,
        1,
    ):  # a prompt, single steps, and 2 new queries after a cache
        outs.append(module(x[:, start : start + size], cache))
        start += size
    torch.testing.assert_close(torch.cat(outs, dim=1), module(x))
    assert cache.key.shape == cache.value.shape == (B, kv_heads, 9, D_MODEL // h)


def test_precomputed_tables_are_the_default_ones():
    module = make(4, 2)
    x = inputs()
    tables = rope_tables(torch.arange(L), D_MODEL // 4, dtype=torch.float64)
    torch.testing.assert_close(module(x, terms=tables), module(x))


def test_parameter_count_and_biases():
    assert (
        sum(p.numel() for p in make(6, 2).parameters())
        == 2 * 24 * 24 + 2 * 24 * 2 * 4
    )
    with_bias = make(6, 2, bias=True)
    assert (
        sum(p.numel() for p in with_bias.parameters())
        == 2 * 24 * 24 + 2 * 24 * 8 + 2 * 24 + 16
    )


def test_bad_configurations_raise():
    with pytest.raises(ValueError, match="kv_heads must divide h"):
        ModernConfig(d_model=24, h=4, kv_heads=3)
    with pytest.raises(ValueError, match="not divisible by h=5"):
        ModernConfig(d_model=24, h=5, kv_heads=1)
    with pytest.raises(ValueError, match="got d=3; choose d_model / h even"):
        make(8, 2)(torch.zeros(1, 2, 24, dtype=torch.float64))
    make(8, 2, rope=False)  # odd d_k is fine without RoPE
