"""Reference solutions of chapter 02's exercises."""

import torch
from torch import Tensor


def split_heads(x: Tensor, h: int) -> Tensor:
    """Fold the heads into their own axis.

    x: (batch, len, d_model); h heads of d_k = d_model / h features each
    returns (batch, h, len, d_k): [b, i, t] is head i's block of x[b, t],
    features i·d_k .. (i+1)·d_k
    """
    batch, length, d_model = x.shape
    return x.view(batch, length, h, d_model // h).transpose(1, 2)


def einsum_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Scaled dot-product attention with two einsums and a boolean mask.

    q: (batch, h, q_len, d_k); k: (batch, h, k_len, d_k);
    v: (batch, h, k_len, d_v)
    mask: bool, broadcastable to (batch, h, q_len, k_len); True = may attend
    returns (batch, h, q_len, d_v)
    """
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.size(-1) ** 0.5
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v)


def attention_entropy(weights: Tensor) -> Tensor:
    """The entropy of each row of attention weights, in nats.

    weights: (..., k_len), rows summing to 1, zeros allowed (masked keys)
    returns (...): H = -Σ_j w_j log w_j, with 0 · log 0 = 0
    """
    return -torch.xlogy(weights, weights).sum(dim=-1)


def causal_attention_loop(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention one query at a time: position i attends to keys 0..i.

    q, k: (len, d_k); v: (len, d_v) -> (len, d_v)
    """
    rows = []
    for i in range(q.size(0)):
        scores = k[: i + 1] @ q[i] / q.size(-1) ** 0.5  # (i + 1,)
        rows.append(scores.softmax(dim=0) @ v[: i + 1])
    return torch.stack(rows)
