"""Attention against PyTorch's own implementations, gradients,
masks and error messages."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.blocks.attention import (
    CachedAttention,
    MultiHeadedAttention,
    attention,
)
from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.blocks.masks import check_rows
from annotated_transformer.models.encoder_decoder import make_model

B, H, Q, K, D = 2, 4, 5, 7, 8
D_MODEL = H * D


def qkv(q_len=Q, k_len=K, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, q_len, D, generator=g, dtype=dtype),
        torch.randn(B, H, k_len, D, generator=g, dtype=dtype),
        torch.randn(B, H, k_len, D, generator=g, dtype=dtype),
    )


def padding(lengths, k_len=K):
    """(batch, 1, 1, k_len) key-padding mask, True for real tokens."""
    return (torch.arange(k_len)[None, :] < torch.tensor(lengths)[:, None])[
        :, None, None, :
    ]


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


@pytest.mark.parametrize(
    "mask",
    [None, padding([7, 3]), causal(K)[-Q:], padding([7, 3]) & causal(K)[-Q:]],
    ids=["none", "padding", "causal", "both"],
)
def test_attention_matches_sdpa(mask):
    q, k, v = qkv()
    out, weights = attention(q, k, v, mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert weights.shape == (B, H, Q, K)


def test_weights_are_distributions_and_masked_keys_get_zero():
    q, k, v = qkv()
    mask = padding([7, 3]) & causal(K)[-Q:]
    _, weights = attention(q, k, v, mask=mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, Q))
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()
    assert (weights.masked_select(mask.expand_as(weights)) > 0).all()


def test_attention_gradcheck_float64():
    q, k, v = (
        t.requires_grad_() for t in qkv(q_len=3, k_len=4, dtype=torch.float64)
    )
    mask = padding([4, 2], k_len=4)
    assert torch.autograd.gradcheck(
        lambda a, b, c: attention(a, b, c, mask)[0], (q, k, v)
    )


def mha_pair(seed=0, cls=CachedAttention):
    """Our module and nn.MultiheadAttention holding the same weights."""
    torch.manual_seed(seed)
    ours = cls(H, D_MODEL, dropout=0.0).eval()
    ref = nn.MultiheadAttention(D_MODEL, H, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        wq, wk, wv, wo = ours.linears
        ref.in_proj_weight.copy_(torch.cat([wq.weight, wk.weight, wv.weight]))
        ref.in_proj_bias.copy_(torch.cat([wq.bias, wk.bias, wv.bias]))
        ref.out_proj.weight.copy_(wo.weight)
        ref.out_proj.bias.copy_(wo.bias)
    return ours, ref


@pytest.mark.parametrize(
    ("cls", "keep_attention"),
    [
        (MultiHeadedAttention, True),
        (CachedAttention, False),
        (CachedAttention, True),
    ],
    ids=["2017", "fused", "explicit"],
)
@pytest.mark.parametrize("masking", ["none", "padding", "causal"])
def test_mha_matches_nn_multihead_attention(cls, keep_attention, masking):
    """The chapter's module, and the runner's on both of its paths, against
    PyTorch's (weights kept by the 2017 one always, by the runner's on demand)."""
    ours, ref = mha_pair(cls=cls)
    if cls is CachedAttention:
        ours.keep_attention = keep_attention
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, K, D_MODEL, generator=g)
    lengths = torch.tensor([K, 4])
    real = torch.arange(K)[None, :] < lengths[:, None]  # (batch, k_len)
    if masking == "none":
        mask, ref_kwargs = None, {}
    elif masking == "padding":
        mask, ref_kwargs = real[:, None, :], {"key_padding_mask": ~real}
    else:
        mask, ref_kwargs = (
            causal(K)[None],
            {"attn_mask": ~causal(K)},
        )  # nn: True = blocked
    out = ours(x, x, x, mask=mask)
    expected, ref_weights = ref(x, x, x, average_attn_weights=False, **ref_kwargs)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    if keep_attention:
        torch.testing.assert_close(ours.attn, ref_weights, atol=1e-6, rtol=1e-5)
    else:
        assert ours.attn is None


def test_mha_gradcheck_float64():
    torch.manual_seed(0)
    mha = MultiHeadedAttention(2, 4, dropout=0.0).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    mask = causal(3)[None]
    assert torch.autograd.gradcheck(lambda t: mha(t, t, t, mask), (x,))


def test_simple_and_cached_attention_agree_with_the_same_weights():
    """The 2017 module (explicit) and the runner's (fused kernel): one state dict,
    the same outputs, with and without a mask."""
    simple, _ = mha_pair(cls=MultiHeadedAttention)
    full = CachedAttention(H, D_MODEL, dropout=0.0).eval()
    full.load_state_dict(simple.state_dict())
    x, memory = torch.randn(B, Q, D_MODEL), torch.randn(B, K, D_MODEL)
    for mask in (None, padding([7, 3])[:, 0], causal(Q)[None]):
        kv = x if mask is not None and mask.size(-1) == Q else memory
        torch.testing.assert_close(
            full(x, kv, kv, mask), simple(x, kv, kv, mask), atol=1e-6, rtol=1e-5
        )


def test_incremental_decoding_with_cache_equals_causal_attention():
    ours, _ = mha_pair()
    x = torch.randn(B, 6, D_MODEL)
    full = ours(x, x, x, mask=causal(6)[None])
    cache = KVCache()
    steps = [
        ours(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache)
        for t in range(6)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 6


def test_static_cache_projects_memory_once():
    ours, _ = mha_pair()
    memory = torch.randn(B, K, D_MODEL)
    y = torch.randn(B, 1, D_MODEL)
    cache = KVCache(static=True)
    first = ours(y, memory, memory, cache=cache)
    # Later steps may pass anything as key/value: the cached projections are used.
    again = ours(y, memory[:, :1], memory[:, :1], cache=cache)
    torch.testing.assert_close(first, again)
    torch.testing.assert_close(first, ours(y, memory, memory))


def test_dropout_only_in_training_mode():
    torch.manual_seed(0)
    mha = MultiHeadedAttention(H, D_MODEL, dropout=0.5)
    x = torch.randn(B, K, D_MODEL)
    mha.eval()
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x))
    mha.train()
    assert not torch.allclose(mha(x, x, x), mha(x, x, x))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: make_model(11, 11, d_model=512, h=3),
            "d_model=512 is not divisible by h=3",
        ),
        (
            lambda: check_rows(torch.zeros(1, 1, 1, K, dtype=torch.bool)),
            "no key it may attend to",
        ),
    ],
    ids=["heads", "empty-row"],
)
def test_bad_input_gets_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
