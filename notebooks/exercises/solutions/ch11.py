"""Reference solutions to chapter 11's exercises (attention maps)."""

from __future__ import annotations

import torch
from torch import Tensor

from annotated_transformer.models.encoder_decoder import EncoderDecoder


def encoder_attention_maps(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor,
) -> list[Tensor]:
    """Each encoder layer's self-attention weights, in eval mode.

    returns one (b, h, n, n) map per layer; the model is left in its mode
    """
    modules = [layer.self_attn for layer in model.encoder.layers]
    was_training = model.training
    model.eval()  # dropout off: the weights the trained model really uses
    try:
        for module in modules:
            module.keep_attention = True
        with torch.no_grad():
            model.encode(src, src_mask)
        return [module.attn for module in modules]
    finally:
        for module in modules:
            module.keep_attention = False
        model.train(was_training)


def normalised_entropy(weights: Tensor, mask: Tensor) -> Tensor:
    """How spread out each head's attention is: 0 one key, 1 uniform.

    weights: (..., q, k), rows summing to 1; mask: bool (q, k), True = visible
    Per row: −Σⱼ pⱼ log₂ pⱼ (0 · log 0 = 0) over log₂ of its visible keys;
    then the mean over the rows that see two keys or more. returns (...)
    """
    terms = torch.where(weights > 0, weights * torch.log2(weights), 0.0)
    entropy = -terms.sum(-1)  # (..., q), in bits
    visible = mask.sum(-1)  # (q,)
    rows = visible >= 2  # a row with one key has nothing to spread over
    return (entropy[..., rows] / torch.log2(visible[rows].double())).mean(-1)


def attention_rollout(maps: list[Tensor]) -> Tensor:
    """Abnar and Zuidema's rollout; maps (h, n, n), the bottom layer first.

    Each layer: the mean over the heads plus the identity (the residual
    connection), rows renormalised to 1; then the product of the layers, the
    top one on the left: R = Â_L ⋯ Â_1, (n, n).
    """
    n = maps[0].size(-1)
    rollout = torch.eye(n, dtype=maps[0].dtype)
    for weights in maps:
        layer = weights.mean(0) + torch.eye(n, dtype=weights.dtype)
        layer = layer / layer.sum(-1, keepdim=True)
        rollout = layer @ rollout
    return rollout
