"""Checks of chapter 02's exercises (Self-attention from scratch)."""

import math
from types import ModuleType

import torch
import torch.nn.functional as F

from annotated_transformer.exercises.grading import (
    assert_close,
    assert_equal,
    exercise,
    forbidden,
    integers,
    rng,
)


@exercise(
    chapter="02",
    name="split_heads",
    title="Fold the heads into their own axis",
    hint="view the last axis as (h, d_k), giving (batch, len, h, d_k), then swap "
    "the len and h axes with transpose(1, 2).",
)
def check_split_heads(m: ModuleType) -> None:
    batch, length, h, d_k = integers(0, 2, 5, 4)
    d_model = h * d_k
    x = torch.randperm(batch * length * d_model, generator=rng(1))
    x = x.view(batch, length, d_model)
    expected = torch.empty(batch, h, length, d_k, dtype=x.dtype)
    for b in range(batch):
        for i in range(h):
            for t in range(length):
                expected[b, i, t] = x[b, t, i * d_k : (i + 1) * d_k]
    assert_equal(m.split_heads(x, h), expected, f"split_heads(x, {h})")


@exercise(
    chapter="02",
    name="einsum_attention",
    title="Attention with einsum and a mask",
    hint="name the axes: the scores are 'bhqd,bhkd->bhqk', the output "
    "'bhqk,bhkd->bhqd'; divide by √d_k and fill the masked scores (where mask is "
    "False) with -inf before the softmax.",
)
def check_einsum_attention(m: ModuleType) -> None:
    g = rng(0)
    q = torch.randn(2, 3, 5, 4, generator=g)
    k = torch.randn(2, 3, 6, 4, generator=g)
    v = torch.randn(2, 3, 6, 7, generator=g)
    keys = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])  # 2 padded keys
    mask = keys[:, None, None, :] & torch.ones(5, 6, dtype=torch.bool).tril(1)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_close(m.einsum_attention(q, k, v, mask), expected, "the output")


@exercise(
    chapter="02",
    name="attention_entropy",
    title="How peaked is the attention? Its entropy",
    hint="H = -Σ w log w over the last axis; a weight of exactly 0 (a masked key) "
    "must add 0, but 0 * log 0 is 0 * -inf = NaN: torch.xlogy(w, w) is w log w "
    "with 0 where w is 0.",
)
def check_attention_entropy(m: ModuleType) -> None:
    g = rng(1)
    weights = torch.randn(2, 3, 5, generator=g).softmax(-1)
    weights[0, 0] = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0])  # two masked keys
    weights[1, 2] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])  # all on one key
    expected = torch.tensor(
        [
            [-sum(w * math.log(w) for w in row.tolist() if w > 0) for row in rows]
            for rows in weights
        ],
    )
    actual = m.attention_entropy(weights)
    assert_close(actual, expected, "the entropies")
    assert_close(actual[0, 0], torch.tensor(math.log(2)), "two equal weights' H")


@exercise(
    chapter="02",
    name="causal_attention_loop",
    title="Causal attention, one query at a time",
    hint="for query i take the keys and values 0..i (slices k[: i + 1]); scores "
    "k[: i + 1] @ q[i] / √d_k, softmax, weighted sum; stack the rows.",
)
def check_causal_attention_loop(m: ModuleType) -> None:
    g = rng(2)
    q, k = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    v = torch.randn(6, 3, generator=g)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with forbidden(
        "scaled_dot_product", "multi_head_attention", why="one query at a time"
    ):
        got = m.causal_attention_loop(q, k, v)
    assert_close(got, expected, "the output")
