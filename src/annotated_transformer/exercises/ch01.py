"""Checks of chapter 01's exercises (From RNNs to attention)."""

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.exercises.grading import (
    assert_close,
    exercise,
    integers,
    rng,
)


def _softmax(scores: list[float]) -> torch.Tensor:
    """exp(e_j) / Σ_k exp(e_k), written out."""
    exps = torch.tensor(scores, dtype=torch.float64).exp()
    return exps / exps.sum()


@exercise(
    chapter="01",
    name="context_vectors",
    title="Alignment weights and context vectors",
    hint="the scores s_i·h_j of all pairs are one matrix product, s @ h.T; the "
    "softmax runs over the encoder positions j (the last axis); then weight the "
    "rows of h.",
)
def check_context_vectors(m: ModuleType) -> None:
    g = rng(0)
    s, h = torch.randn(4, 6, generator=g), torch.randn(5, 6, generator=g)
    alpha, c = m.context_vectors(s, h)
    rows = [_softmax([float(s[i] @ h[j]) for j in range(5)]) for i in range(4)]
    assert_close(alpha, torch.stack(rows), "alpha")
    expected_c = F.scaled_dot_product_attention(s, h, h, scale=1.0)
    assert_close(c, expected_c, "c")


@exercise(
    chapter="01",
    name="additive_scores",
    title="Bahdanau's additive scores",
    hint="compute W s_i for every i, (m, d_a), and U h_j for every j, (n, d_a); "
    "add them for every pair by broadcasting (m, 1, d_a) + (1, n, d_a); tanh; "
    "then multiply by v.",
)
def check_additive_scores(m: ModuleType) -> None:
    g = rng(1)
    s, h = torch.randn(3, 4, generator=g), torch.randn(5, 6, generator=g)
    W, U = torch.randn(7, 4, generator=g), torch.randn(7, 6, generator=g)
    v = torch.randn(7, generator=g)
    pair = [[v @ torch.tanh(W @ s_i + U @ h_j) for h_j in h] for s_i in s]
    expected = torch.tensor(pair)
    assert_close(m.additive_scores(s, h, W, U, v), expected, "e")


@exercise(
    chapter="01",
    name="multi_head_self_attention",
    title="Multi-head self-attention from plain matrices",
    hint="Q = X @ W_q (all heads at once); head i reads the feature block "
    "i*d_k:(i+1)*d_k of Q, K and V and scales its scores by √d_k (not √d_model); "
    "concatenate the heads' outputs along the features before @ W_o.",
)
def check_multi_head_self_attention(m: ModuleType) -> None:
    g = rng(2)
    n, heads, width = integers(4, 2, 7, 1) + integers(5, 2, 4, 2)  # this run's
    # and other heads and widths again: no one size passes both
    for h, d_k in [(heads, width), (heads % 3 + 2, width % 3 + 2)]:
        d_model = h * d_k
        X = torch.randn(n, d_model, generator=g)
        W_q, W_k, W_v, W_o = torch.randn(4, d_model, d_model, generator=g) / 4
        reference = nn.MultiheadAttention(d_model, h, bias=False, batch_first=True)
        with torch.no_grad():  # nn.Linear computes x @ weight.T, so weight = W.T
            reference.in_proj_weight.copy_(torch.cat([W_q.T, W_k.T, W_v.T]))
            reference.out_proj.weight.copy_(W_o.T)
            expected = reference(X, X, X, need_weights=False)[0]
        actual = m.multi_head_self_attention(X, W_q, W_k, W_v, W_o, h)
        what = f"the output, {h} heads of {d_k} (against nn.MultiheadAttention)"
        assert_close(actual, expected, what)


@exercise(
    chapter="01",
    name="attention_pool",
    title="Attention pooling: one query for a whole set",
    hint="the three steps of attention with a single query: scores X @ q / √d "
    "(one per row of X), softmax over the rows, the weighted sum of the rows.",
)
def check_attention_pool(m: ModuleType) -> None:
    g = rng(3)
    X, q = torch.randn(6, 8, generator=g), torch.randn(8, generator=g)
    expected = F.scaled_dot_product_attention(q[None], X, X)[0]
    pooled = m.attention_pool(X, q)
    assert_close(pooled, expected, "the pooled vector")
    shuffled = m.attention_pool(X[torch.randperm(6, generator=g)], q)
    assert_close(shuffled, pooled, "the pooled vector of X shuffled")
