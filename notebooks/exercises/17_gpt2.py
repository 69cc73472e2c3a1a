"""Chapter 17 exercises (GPT-2's recipe): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=17
or  python -m annotated_transformer.exercises 17
"""

from __future__ import annotations

from torch import Tensor


def token_bits_per_byte(
    log_probs: Tensor,
    targets: Tensor,
    token_bytes: Tensor,
) -> float:
    """Bits per byte of a model over tokens.

    log_probs: (n, V) natural-log probabilities of the next token at n positions;
    targets: (n,) the true tokens; token_bytes: (V,) each token's length in bytes
    """
    raise NotImplementedError


def gpt2_parameters(
    vocab: int,
    d_model: int,
    N: int,
    max_len: int,
    d_ff: int,
) -> int:
    """The number of parameters of ``GPT2LM(vocab, d_model, h, N, max_len,
    d_ff)`` (any h)."""
    raise NotImplementedError


def gelu(x: Tensor, approximate: bool = False) -> Tensor:
    """GELU(x) = x Φ(x), Φ the standard normal CDF; with ``approximate``, GPT-2's
    tanh form 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))). Elementwise."""
    raise NotImplementedError
