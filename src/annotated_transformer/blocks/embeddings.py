"""Token embeddings: a learned vector per vocabulary entry
(Vaswani et al. 2017, §3.4).

- :class:`Embeddings`: look up each token id, scale by √d_model;
- :class:`TokenAndPosition`: embeddings followed by a positional encoding,
  with the position ``offset`` that cached decoding needs (an
  ``nn.Sequential`` cannot pass it through).
"""

from __future__ import annotations

import math

from torch import Tensor, nn


class Embeddings(nn.Module):
    """Token ids -> vectors: lut(x) · √d_model.

    x: integer (batch, len), ids in [0, vocab); returns (batch, len, d_model)

    Why × √d_model: the paper shares this matrix with the pre-softmax projection
    (§3.4), whose weights are small (about 1/√d_model each, so that a logit, a sum
    over d_model products, stays near 1) — the same order as Glorot initialisation
    here. Such rows have a norm near 1, while a sinusoidal position vector has norm
    √(d_model / 2). Multiplying by √d_model puts the token on the same scale as its
    position, so the position does not drown the word.
    """

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x: Tensor) -> Tensor:
        return self.lut(x) * math.sqrt(self.d_model)


def check_ids(ids: Tensor, vocab: int) -> None:
    """Raise a ValueError unless every id lies in [0, vocab).

    Reads the values, so it runs where ids enter from outside (a prompt, a
    hand-made batch), once, not in every forward pass: on a GPU each such
    read waits for the device.
    """
    if ids.numel() > 0:
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocab:
            raise ValueError(
                f"token ids must lie in [0, {vocab}) for a vocabulary of size "
                f"{vocab}, got ids from {low} to {high}; was the vocabulary built "
                "from different data, or the model made with a smaller vocab?"
            )


class TokenAndPosition(nn.Module):
    """Embed tokens, then add positions: position(embed(tokens), offset).

    tokens: integer (batch, len); offset: position of the first token (0, or
        ``cache.length`` when decoding with a cache), or each token's position, a
        (batch, len) tensor (packed rows); returns (batch, len, d_model)
    """

    def __init__(self, embed: nn.Module, position: nn.Module) -> None:
        super().__init__()
        self.embed = embed
        self.position = position

    def forward(self, tokens: Tensor, offset: int | Tensor = 0) -> Tensor:
        return self.position(self.embed(tokens), offset)
