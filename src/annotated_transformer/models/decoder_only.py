"""The decoder-only language model built from the 2017 blocks: a causal stack
that predicts the next token (a byte model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from annotated_transformer.blocks.attention import check_heads
from annotated_transformer.blocks.embeddings import TokenAndPosition
from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.blocks.layers import TransformerBlock
from annotated_transformer.blocks.masks import (
    check_tokens,
    left_padding_mask,
    left_padding_positions,
)
from annotated_transformer.blocks.positional import PositionalEmbedding


def check_sizes(config: object, names: tuple[str, ...]) -> None:
    """One line for a size of ``config`` that must be a positive integer."""
    for name in names:
        value = getattr(config, name)
        if value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")


@dataclass(frozen=True)
class DecoderConfig:
    """The decoder-only model's sizes, checked once: the one object the model is
    built from (``DecoderLM(config)``).

    max_len: the longest context (the position table's length); dropout: also on
    the attention weights. Its blocks are causal.
    """

    vocab: int = 256
    d_model: int = 128
    h: int = 4
    N: int = 4
    max_len: int = 256
    d_ff: int = 512
    dropout: float = 0.1

    causal: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_sizes(self, ("vocab", "N", "max_len", "d_ff"))
        check_heads(self.h, self.d_model)

    @property
    def attn_dropout(self) -> float:
        """The attention weights drop at ``dropout`` too."""
        return self.dropout


def check_lm_input(
    x: Tensor,
    cache: list[KVCache] | None,
    n_blocks: int,
    max_len: int,
    mask: Tensor | None = None,
    takes_padding: bool = True,
) -> int:
    """Raise a ValueError unless ``x`` (batch, len) fits a decoder-only LM of
    ``n_blocks`` blocks and a context of ``max_len``; return the number of cached
    positions (the position of x's first token).

    ``cache``: one :class:`KVCache` per block; ``mask``: bool (batch, past + len),
    only for a model whose attention ``takes_padding``. Shapes only: the ids'
    values are checked where they enter (``embeddings.check_ids``).
    """
    check_tokens(x, "x")
    if cache is not None and len(cache) != n_blocks:
        raise ValueError(
            f"the cache has {len(cache)} layers but the model has {n_blocks} "
            "blocks; build it with model.new_cache()"
        )
    past = 0 if cache is None else cache[0].length
    if x.size(1) < 1:
        raise ValueError(
            "x has no positions: give at least one byte (batch, len >= 1)"
        )
    if past + x.size(1) > max_len:
        raise ValueError(
            f"{past} cached + {x.size(1)} new = {past + x.size(1)} positions "
            f"exceed the model's context of max_len={max_len}; feed at most the "
            f"last {max_len} bytes (sampling.sample crops the context for you)"
        )
    if mask is not None and not takes_padding:
        raise ValueError(
            "this model's sparse attention takes no padding mask: give prompts of "
            "one length, without left padding"
        )
    shape = (x.size(0), past + x.size(1))
    if mask is not None and (mask.dtype, tuple(mask.shape)) != (torch.bool, shape):
        raise ValueError(
            f"mask must be bool (batch, cached + new) = {shape}, True at tokens "
            f"and False at left padding; got {mask.dtype} {tuple(mask.shape)}"
        )
    return past


class DecoderLM(nn.Module):
    """A decoder-only (GPT-style) language model over bytes: predict each next byte.

    logits = W · blocks(embed(x) + P[positions]) + b, N causal post-norm blocks
    (:class:`~annotated_transformer.blocks.layers.TransformerBlock`): the paper's
    decoder without the encoder and its source attention.

    x: integer (batch, len), ids in [0, vocab); positions start at
        ``cache[0].length`` (0 without a cache) and stay below ``max_len``.
    cache: from :meth:`new_cache`, one :class:`KVCache` per block; x then holds
        only the new bytes, and the cache is extended in place.
    mask: bool (batch, past + len), False at the padding on the left of shorter
        prompts: never attended to; each row's positions start at its first token.
    returns logits (batch, len, vocab), the scores of each position's next byte
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        c = self.config = config
        self.vocab, self.max_len = c.vocab, c.max_len
        # Learned positions, unscaled token vectors: both start
        # N(0, 1), on the same scale.
        self.embed = TokenAndPosition(
            nn.Embedding(c.vocab, c.d_model),
            PositionalEmbedding(c.d_model, c.max_len, c.dropout),
        )
        self.blocks = nn.ModuleList(TransformerBlock(c) for _ in range(c.N))
        self.to_logits = nn.Linear(c.d_model, c.vocab)

    def new_cache(self) -> list[KVCache]:
        """An empty key/value cache: one growing :class:`KVCache` per block."""
        return [KVCache() for _ in self.blocks]

    def forward(
        self,
        x: Tensor,
        cache: list[KVCache] | None = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        past = check_lm_input(x, cache, len(self.blocks), self.max_len, mask)
        if mask is None:
            h, keys = self.embed(x, past), None  # (batch, len, d_model)
        else:  # left padding: each row's own positions, padded keys hidden
            h = self.embed(x, left_padding_positions(mask, x.size(1)))
            keys = left_padding_mask(mask, x.size(1))  # (batch, len, past + len)
        for i, block in enumerate(self.blocks):
            h = block(h, keys, cache=None if cache is None else cache[i])
        return self.to_logits(h)  # (batch, len, vocab)
