"""Chapter 16 exercises (BERT and GPT-2): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=16
or  python -m annotated_transformer.exercises 16
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


def mask_exactly(
    tokens: Tensor,
    mask_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    p: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """The original BERT's masking of ``tokens`` (b, n): returns (inputs, labels).

    In each row select exactly max(1, round(p · k)) of its k ordinary tokens (ids
    not in special_ids and not mask_id); of those, 80 % become mask_id, 10 % a
    random ordinary id, 10 % stay. labels: the original id where selected, -100
    elsewhere.
    Draw every random number from ``generator``.
    """
    raise NotImplementedError


def load_matching(model: nn.Module, state: dict[str, Tensor]) -> list[str]:
    """Start ``model`` from a pretrained ``state`` (a state dict).

    Copy every tensor of ``state`` whose name and shape match one of the model's;
    returns the sorted names of the model's tensors that were not loaded
    """
    raise NotImplementedError


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
