"""Token embeddings: a learned vector per token id (Vaswani et al. 2017, §3.4).

:class:`TokenAndPosition` adds the positions, with the ``offset`` that cached
decoding needs (which ``nn.Sequential`` cannot pass through).
"""

from __future__ import annotations

import math

from torch import Tensor, nn


class Embeddings(nn.Module):
    """Token ids -> vectors: lut(x) · √d_model.

    x: integer (batch, len), ids in [0, vocab); returns (batch, len, d_model)

    Why × √d_model: the paper shares this matrix with the pre-softmax projection,
    whose weights are about 1/√d_model (rows of norm near 1); scaled, a word is not
    drowned by its sinusoidal position vector, of norm √(d_model / 2).
    """

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x: Tensor) -> Tensor:
        return self.lut(x) * math.sqrt(self.d_model)


def check_ids(ids: Tensor, vocab: int) -> None:
    """Raise a ValueError unless every id lies in [0, vocab).

    It reads the values (a GPU wait), so it runs once where ids enter, not per pass.
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

    tokens: integer (batch, len); offset: the first token's position (0, or
        ``cache.length`` with a cache), or each token's, (batch, len)
    returns (batch, len, d_model)
    """

    def __init__(self, embed: nn.Module, position: nn.Module) -> None:
        super().__init__()
        self.embed = embed
        self.position = position

    def forward(self, tokens: Tensor, offset: int | Tensor = 0) -> Tensor:
        return self.position(self.embed(tokens), offset)
