"""Sparse Transformer patterns against their definitions (Python loops),
two-layer reach, pair counts, and block-sparse attention against dense attention
with the same mask (float64)."""

import pytest
import torch
import torch.nn.functional as F

from annotated_transformer.blocks.sparse_attention import (
    attended_pairs,
    fixed_masks,
    fixed_pairs,
    fixed_sparse_attention,
    reaches_all_earlier,
    strided_masks,
    strided_pairs,
    strided_sparse_attention,
    two_layer_reach,
)

SIZES = [(1, 1), (7, 1), (7, 3), (12, 4), (16, 4), (10, 10)]  # (n, stride)


def from_rule(n, rule):
    return torch.tensor(
        [[rule(i, j) for j in range(n)] for i in range(n)], dtype=torch.bool
    )


@pytest.mark.parametrize(("n", "stride"), SIZES)
def test_strided_masks_match_definition(n, stride):
    local, strided = strided_masks(n, stride)
    assert torch.equal(local, from_rule(n, lambda i, j: 0 <= i - j < stride))
    assert torch.equal(
        strided, from_rule(n, lambda i, j: j <= i and (i - j) % stride == 0)
    )


@pytest.mark.parametrize(
    ("n", "stride", "c"), [(1, 1, 1), (7, 3, 1), (12, 4, 2), (9, 3, 3)]
)
def test_fixed_masks_match_definition(n, stride, c):
    block, summary = fixed_masks(n, stride, c)
    assert torch.equal(
        block, from_rule(n, lambda i, j: j <= i and j // stride == i // stride)
    )
    assert torch.equal(
        summary, from_rule(n, lambda i, j: j <= i and j % stride >= stride - c)
    )


def test_masks_are_causal():
    future = ~torch.ones(11, 11, dtype=torch.bool).tril()
    for mask in (*strided_masks(11, 3), *fixed_masks(11, 3, 2)):
        assert not (mask & future).any()


def test_two_layer_reach_is_the_path_relation():
    g = torch.Generator().manual_seed(0)
    first, second = (torch.rand(6, 6, generator=g) < 0.3 for _ in range(2))
    expected = from_rule(
        6, lambda i, j: any(second[i, k] and first[k, j] for k in range(6))
    )
    assert torch.equal(two_layer_reach(first, second), expected)


@pytest.mark.parametrize(("n", "stride"), [(16, 4), (15, 4), (30, 5), (9, 2)])
def test_strided_two_layers_reach_every_earlier_position(n, stride):
    local, strided = strided_masks(n, stride)
    assert reaches_all_earlier(local, strided)  # local below strided
    assert reaches_all_earlier(strided, local)  # and the other order
    assert not reaches_all_earlier(local, local)  # one pattern alone does not
    assert not reaches_all_earlier(strided, strided)


@pytest.mark.parametrize(
    ("n", "stride", "c"), [(16, 4, 1), (15, 4, 2), (30, 5, 1), (12, 3, 3)]
)
def test_fixed_block_then_union_reaches_every_earlier_position(n, stride, c):
    block, summary = fixed_masks(n, stride, c)
    assert reaches_all_earlier(block, block | summary)
    # With c < stride, block then summary misses keys of i's own block (at the start
    # of a block, i reads no summary key of its block but possibly itself), and
    # summary then block misses the non-summary keys of earlier blocks. With
    # c = stride, summary is all of j ≤ i.
    assert reaches_all_earlier(block, summary) == (c == stride)
    assert reaches_all_earlier(summary, block) == (c == stride)


@pytest.mark.parametrize(
    ("n", "stride", "c"), [(4, 4, 1), (12, 4, 1), (16, 4, 2), (30, 5, 3)]
)
def test_pair_counts_closed_forms(n, stride, c):
    local, strided = strided_masks(n, stride)
    block, summary = fixed_masks(n, stride, c)
    assert strided_pairs(n, stride) == attended_pairs(local | strided)
    assert fixed_pairs(n, stride, c) == attended_pairs(block | summary)


def test_pairs_grow_like_n_sqrt_n_with_stride_sqrt_n():
    for n in (64, 256, 1024, 4096):
        stride = int(n**0.5)
        dense = n * (n + 1) // 2
        assert strided_pairs(n, stride) <= 2 * n * stride < dense
        assert fixed_pairs(n, stride, 1) <= n * stride < dense


def qkv(n, d_k=5, d_v=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(2, 3, n, d, generator=g, dtype=torch.float64)
        for d in (d_k, d_k, d_v)
    ]


def dense(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize(
    ("n", "stride"), [(4, 4), (12, 4), (12, 3), (10, 1), (18, 6)]
)
def test_strided_sparse_attention_equals_dense(n, stride):
    q, k, v = (t.requires_grad_() for t in qkv(n))
    local, strided = strided_masks(n, stride)
    out = strided_sparse_attention(q, k, v, stride)
    expected = dense(q, k, v, local | strided)
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize(
    ("n", "stride", "c"),
    [(4, 4, 1), (12, 4, 1), (12, 4, 2), (12, 3, 3), (10, 1, 1), (18, 6, 2)],
)
def test_fixed_sparse_attention_equals_dense(n, stride, c):
    q, k, v = (t.requires_grad_() for t in qkv(n))
    block, summary = fixed_masks(n, stride, c)
    out = fixed_sparse_attention(q, k, v, stride, c)
    expected = dense(q, k, v, block | summary)
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)


def test_sparse_attention_gradcheck():
    q, k, v = (t[:1, :1].detach().requires_grad_() for t in qkv(6, d_k=2, d_v=2))
    assert torch.autograd.gradcheck(
        lambda *t: strided_sparse_attention(*t, 2), (q, k, v)
    )
    assert torch.autograd.gradcheck(
        lambda *t: fixed_sparse_attention(*t, 3, 1), (q, k, v)
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: strided_masks(0, 2), "must be positive"),
        (lambda: fixed_masks(8, 4, 0), "summary positions per block"),
        (lambda: fixed_masks(8, 4, 5), "summary positions per block"),
        (lambda: strided_pairs(10, 4), "multiple of stride"),
        (lambda: strided_sparse_attention(*qkv(10), 4), "multiple of stride"),
        (
            lambda: fixed_sparse_attention(*qkv(10), 5, 6),
            "summary positions per block",
        ),
        (
            lambda: fixed_sparse_attention(*qkv(8)[:2], qkv(6)[2], 4, 1),
            r"\(batch, heads, n",
        ),
        (lambda: two_layer_reach(torch.ones(3, 3), torch.ones(3, 4)), "square"),
    ],
)
def test_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_no_square_score_matrix_is_formed(monkeypatch):
    """Every product the sparse functions form has at most
    n·(2·stride + m) entries per head."""
    n, stride = 64, 8
    q, k, v = qkv(n)
    sizes = []
    matmul = torch.Tensor.__matmul__

    def spy(a, b):
        result = matmul(a, b)
        sizes.append(result[0, 0].numel())  # entries per (batch, head)
        return result

    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    strided_sparse_attention(q, k, v, stride)
    fixed_sparse_attention(q, k, v, stride, 1)
    assert sizes and max(sizes) <= n * (2 * stride + n // stride) < n * n
