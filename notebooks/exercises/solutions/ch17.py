"""Reference solutions to chapter 17's exercises (GPT-2's recipe)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def token_bits_per_byte(
    log_probs: Tensor,
    targets: Tensor,
    token_bytes: Tensor,
) -> float:
    """Bits per byte of a model over tokens: Σ −log₂ p(target) / Σ bytes.

    log_probs: (n, V) natural-log probabilities; targets: (n,); token_bytes:
    (V,), the length in bytes of every token.
    """
    nats = -log_probs.double().gather(1, targets[:, None]).sum().item()
    return nats / math.log(2) / token_bytes[targets].sum().item()


def gpt2_parameters(
    vocab: int,
    d_model: int,
    N: int,
    max_len: int,
    d_ff: int,
) -> int:
    """Parameters of GPT2LM, counted matrix by matrix.

    The tied token table, learned positions, N pre-norm blocks with biases
    everywhere (2 LayerNorms, W^Q W^K W^V W^O, a GELU MLP of two layers) and a
    final LayerNorm.
    """
    norm = 2 * d_model
    attention = 4 * (d_model * d_model + d_model)
    mlp = d_model * d_ff + d_ff + d_ff * d_model + d_model
    tables = vocab * d_model + max_len * d_model  # tokens (tied), positions
    return tables + N * (2 * norm + attention + mlp) + norm


def gelu(x: Tensor, approximate: bool = False) -> Tensor:
    """GELU(x) = x Φ(x); with ``approximate``, GPT-2's tanh form of it."""
    if approximate:
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1 + torch.tanh(inner))
    return x * (1 + torch.erf(x / math.sqrt(2))) / 2
