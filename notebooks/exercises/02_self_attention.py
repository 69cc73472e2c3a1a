"""Chapter 02 exercises (Self-attention from scratch): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=02
or  python -m annotated_transformer.exercises 02
"""

from torch import Tensor


def split_heads(x: Tensor, h: int) -> Tensor:
    """Fold the heads into their own axis.

    x: (batch, len, d_model); h heads of d_k = d_model / h features each
    returns (batch, h, len, d_k): [b, i, t] is head i's block of x[b, t],
    features i·d_k .. (i+1)·d_k
    """
    raise NotImplementedError


def einsum_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Scaled dot-product attention with two einsums and a boolean mask.

    q: (batch, h, q_len, d_k); k: (batch, h, k_len, d_k);
    v: (batch, h, k_len, d_v)
    mask: bool, broadcastable to (batch, h, q_len, k_len); True = may attend
    returns (batch, h, q_len, d_v)
    """
    raise NotImplementedError


def attention_entropy(weights: Tensor) -> Tensor:
    """The entropy of each row of attention weights, in nats.

    weights: (..., k_len), rows summing to 1, zeros allowed (masked keys)
    returns (...): H = -Σ_j w_j log w_j, with 0 · log 0 = 0
    """
    raise NotImplementedError


def causal_attention_loop(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention one query at a time: position i attends to keys 0..i.

    q, k: (len, d_k); v: (len, d_v) -> (len, d_v)
    """
    raise NotImplementedError
