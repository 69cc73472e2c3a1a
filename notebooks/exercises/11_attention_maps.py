"""Chapter 11 exercises (Attention maps): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=11
or  python -m annotated_transformer.exercises 11
"""

from __future__ import annotations

import torch
from torch import Tensor

from annotated_transformer.models.encoder_decoder import EncoderDecoder


def encoder_attention_maps(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor,
) -> list[Tensor]:
    """Find the bug: each encoder layer's self-attention weights, (b, h, n, n)."""
    modules = [layer.self_attn for layer in model.encoder.layers]
    for module in modules:
        module.keep_attention = True
    with torch.no_grad():
        model.encode(src, src_mask)
    maps = [module.attn for module in modules]
    for module in modules:
        module.keep_attention = False
    return maps


def normalised_entropy(weights: Tensor, mask: Tensor) -> Tensor:
    """How spread out each head's attention is, from 0 (one key) to 1 (uniform).

    weights: (..., q, k), rows summing to 1; mask: bool (q, k), True = visible.
    returns (...): the mean, over the rows that see two keys or more, of each row's
    entropy in bits divided by the largest entropy its visible keys allow
    """
    raise NotImplementedError


def attention_rollout(maps: list[Tensor]) -> Tensor:
    """Attention rollout (Abnar and Zuidema 2020) through a stack of layers.

    maps: one (h, n, n) self-attention map per layer, the bottom layer first
    returns (n, n): how much of position j flows into position i at the top
    """
    raise NotImplementedError
