"""Chapter 01 exercises (From RNNs to attention): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=01
or  python -m annotated_transformer.exercises 01
"""

from torch import Tensor


def context_vectors(s: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
    """Dot-product attention of decoder states over encoder states.

    s: (m, d) decoder states; h: (n, d) encoder states
    returns (alpha (m, n), the softmax of s·h over j;
             c (m, d), c_i = Σ_j alpha_ij h_j)
    """
    raise NotImplementedError


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
    raise NotImplementedError


def multi_head_self_attention(
    X: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor, W_o: Tensor, h: int
) -> Tensor:
    """Multi-head self-attention of one sequence, a loop over heads.

    X: (n, d_model); W_q, W_k, W_v, W_o: (d_model, d_model), applied as X @ W;
    head i uses columns i·d_k .. (i+1)·d_k of W_q, W_k, W_v, d_k = d_model / h
    returns Concat(head_1, ..., head_h) @ W_o: (n, d_model)
    """
    raise NotImplementedError


def attention_pool(X: Tensor, q: Tensor) -> Tensor:
    """One learned query summarises a set: softmax(X q / √d) ᵀ X.

    X: (n, d) the set's vectors; q: (d,) the query
    returns (d,), the same for any order of the rows of X
    """
    raise NotImplementedError
