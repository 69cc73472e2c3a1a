"""Reference solutions of chapter 01's exercises."""

import torch
from torch import Tensor


def context_vectors(s: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
    """Dot-product attention of decoder states over encoder states.

    s: (m, d) decoder states; h: (n, d) encoder states
    returns (alpha (m, n), the softmax of s·h over j;
             c (m, d), c_i = Σ_j alpha_ij h_j)
    """
    alpha = (s @ h.T).softmax(dim=-1)
    return alpha, alpha @ h


def additive_scores(
    s: Tensor,
    h: Tensor,
    W: Tensor,
    U: Tensor,
    v: Tensor,
) -> Tensor:
    """Bahdanau's alignment scores e_ij = vᵀ tanh(W s_i + U h_j).

    s: (m, d_s); h: (n, d_h); W: (d_a, d_s); U: (d_a, d_h); v: (d_a,)
    returns e: (m, n)
    """
    queries = s @ W.T  # (m, d_a)
    keys = h @ U.T  # (n, d_a)
    return torch.tanh(queries[:, None, :] + keys[None, :, :]) @ v  # (m, n)


def multi_head_self_attention(
    X: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor, W_o: Tensor, h: int
) -> Tensor:
    """Multi-head self-attention of one sequence, a loop over heads.

    X: (n, d_model); W_q, W_k, W_v, W_o: (d_model, d_model), applied as X @ W;
    head i uses columns i·d_k .. (i+1)·d_k of W_q, W_k, W_v, d_k = d_model / h
    returns Concat(head_1, ..., head_h) @ W_o: (n, d_model)
    """
    d_k = X.size(-1) // h
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    heads = []
    for i in range(h):
        block = slice(i * d_k, (i + 1) * d_k)
        weights = (Q[:, block] @ K[:, block].T / d_k**0.5).softmax(dim=-1)
        heads.append(weights @ V[:, block])
    return torch.cat(heads, dim=-1) @ W_o


def attention_pool(X: Tensor, q: Tensor) -> Tensor:
    """One learned query summarises a set: softmax(X q / √d) ᵀ X.

    X: (n, d) the set's vectors; q: (d,) the query
    returns (d,), the same for any order of the rows of X
    """
    weights = (X @ q / X.size(-1) ** 0.5).softmax(dim=0)  # (n,)
    return weights @ X
