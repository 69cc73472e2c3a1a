"""The Transformer's layers and stacks (Vaswani et al. 2017, §3.1).

The encoder-decoder's pre-norm layers as the Annotated Transformer codes them (and
its decoder with a key/value cache), and Bloem's post-norm :class:`TransformerBlock`
for encoder-only and decoder-only models. The stacks use ``nn.LayerNorm``, Ba et
al.'s exact formula as ``nn.Transformer`` has it, not the original's, which divides
by the unbiased std + ε (harvardnlp/annotated-transformer #122).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Protocol

from torch import Tensor, nn
from torch.nn import Module

from annotated_transformer.blocks.attention import CachedAttention
from annotated_transformer.blocks.feed_forward import PositionwiseFeedForward
from annotated_transformer.blocks.kv_cache import DecoderCache, KVCache
from annotated_transformer.blocks.masks import subsequent_mask


def clones(module: nn.Module, N: int) -> nn.ModuleList:
    """N independent copies of ``module``: same initial weights, trained apart."""
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


class SublayerConnection(nn.Module):
    """Pre-norm residual connection: x + dropout(sublayer(norm(x))).

    The paper writes post-norm, LayerNorm(x + Sublayer(x)); normalising first, as
    the Annotated Transformer's code does, keeps an identity path from input to
    output that trains deep stacks without a careful warm-up.
    x: (batch, len, d_model) -> same
    """

    def __init__(self, d_model: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return x + self.dropout(sublayer(self.norm(x)))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a pre-norm residual connection.

    x: (batch, src_len, d_model); mask: bool (batch, 1, src_len)
    returns (batch, src_len, d_model)
    """

    def __init__(
        self, d_model: int, self_attn: Module, feed_forward: Module, dropout: float
    ) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(d_model, dropout), 2)
        self.d_model = d_model

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class Encoder(nn.Module):
    """N encoder layers, then a final norm (with pre-norm, the last residual sum is
    otherwise never normalised). x: (batch, src_len, d_model) -> same."""

    def __init__(self, layer: EncoderLayer, N: int) -> None:
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = nn.LayerNorm(layer.d_model)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder memory, feed-forward.

    x: (batch, tgt_len, d_model); memory: (batch, src_len, d_model)
    src_mask: bool (batch, 1, src_len)
    tgt_mask: bool (batch or 1, tgt_len, tgt_len)
    returns (batch, tgt_len, d_model)
    """

    def __init__(
        self,
        d_model: int,
        self_attn: Module,
        src_attn: Module,
        feed_forward: Module,
        dropout: float,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(d_model, dropout), 3)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        tgt_mask: Tensor | None,
    ) -> Tensor:
        m = memory
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask))
        return self.sublayer[2](x, self.feed_forward)


class Decoder(nn.Module):
    """N decoder layers, then a final norm. x: (batch, tgt_len, d_model) -> same."""

    def __init__(self, layer: DecoderLayer, N: int) -> None:
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = nn.LayerNorm(layer.d_model)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        tgt_mask: Tensor | None,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


class CachedDecoderLayer(DecoderLayer):
    """:class:`DecoderLayer` whose attentions read and extend a key/value cache.

    cache: this layer's ``(self_kv, src_kv)``, or None; with it, x holds only the
        new positions (batch, new, d_model) and tgt_mask is (batch or 1, new,
        past + new)
    """

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        tgt_mask: Tensor | None,
        cache: tuple[KVCache, KVCache] | None = None,
    ) -> Tensor:
        self_kv, src_kv = (None, None) if cache is None else cache
        m = memory
        x = self.sublayer[0](
            x, lambda x: self.self_attn(x, x, x, tgt_mask, self_kv)
        )
        x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask, src_kv))
        return self.sublayer[2](x, self.feed_forward)


class CachedDecoder(Decoder):
    """:class:`Decoder` of :class:`CachedDecoderLayer`; layer i gets
    ``cache.layers[i]`` of a :class:`DecoderCache`."""

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        tgt_mask: Tensor | None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        for i, layer in enumerate(self.layers):
            kv = None if cache is None else cache.layers[i]
            x = layer(x, memory, src_mask, tgt_mask, kv)
        return self.norm(x)


class BlockConfig(Protocol):
    """The fields of a model's config a :class:`TransformerBlock` is built from."""

    d_model: int
    h: int
    d_ff: int
    dropout: float
    attn_dropout: float
    causal: bool


class TransformerBlock(nn.Module):
    """Bloem's post-norm block for encoder-only and decoder-only models.

    x = LayerNorm(x + dropout(SelfAttention(x))); x = LayerNorm(x + dropout(FFN(x)))
    as in the paper's text (§3.1, §5.4) and ``nn.TransformerEncoderLayer``.

    config: ``causal`` also hides the future (a decoder-only language model),
        ``attn_dropout`` drops attention weights
    x: (batch, len, d_model); mask: bool (batch or 1, 1 or len, past + len)
    cache: a :class:`KVCache` for generation; then x holds only the new positions
    returns (batch, len, d_model)
    """

    def __init__(self, config: BlockConfig) -> None:
        super().__init__()
        c = config
        self.attention = CachedAttention(c.h, c.d_model, c.attn_dropout)
        self.feed_forward = PositionwiseFeedForward(c.d_model, c.d_ff, c.dropout)
        self.norm1 = nn.LayerNorm(c.d_model)
        self.norm2 = nn.LayerNorm(c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        self.causal = c.causal

    def forward(
        self, x: Tensor, mask: Tensor | None = None, cache: KVCache | None = None
    ) -> Tensor:
        if self.causal:
            past = 0 if cache is None else cache.length
            future = subsequent_mask(x.size(1), offset=past, device=x.device)
            mask = future if mask is None else mask & future
        x = self.norm1(x + self.dropout(self.attention(x, x, x, mask, cache=cache)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))
