"""Grouped-query attention (Ainslie et al. 2023): fewer key/value than query heads.

h query heads share ``kv_heads`` key/value heads, in groups of h / kv_heads
(d_k = d_model / h):

    head_j = softmax(Q_j K_gᵀ / √d_k) V_g,  g = ⌊j · kv_heads / h⌋.

Why: in long generations the key/value cache, not the weights, fills the memory
and bounds the speed; it (and W^K, W^V) shrinks by h / kv_heads. ``kv_heads = h``
is multi-head attention, ``kv_heads = 1`` multi-query attention (Shazeer 2019).
Causal self-attention of a decoder-only model; :class:`RotaryAttention` rotates
queries and keys (keys before they are cached, so never again),
:class:`ALiBiAttention` adds ALiBi's distance penalties to the scores.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.blocks.alibi import alibi_bias
from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.blocks.masks import subsequent_mask
from annotated_transformer.blocks.positional import PositionTerms
from annotated_transformer.blocks.rope import rope_tables, rotate_pairs


class AttentionSizes(Protocol):
    """The fields of a model's config an attention is built from."""

    d_model: int
    h: int
    kv_heads: int
    dropout: float
    bias: bool
    rope_base: float


class GroupedQueryAttention(nn.Module):
    """Causal self-attention, h query heads sharing ``kv_heads`` key/value heads.

    W^Q: d_model → h·d_k; W^K, W^V: d_model → kv_heads·d_k; W^O: h·d_k → d_model;
    biases only if ``config.bias``; ``config.dropout`` on the attention weights. No
    positions inside: the subclasses add them.
    """

    # It takes a mask for left-padded rows (sparse attention does not).
    takes_padding = True

    def __init__(self, config: AttentionSizes) -> None:
        super().__init__()
        c = config
        self.d_model, self.h, self.kv_heads = c.d_model, c.h, c.kv_heads
        self.d_k = c.d_model // c.h
        self.w_q = nn.Linear(c.d_model, c.h * self.d_k, bias=c.bias)
        self.w_k = nn.Linear(c.d_model, c.kv_heads * self.d_k, bias=c.bias)
        self.w_v = nn.Linear(c.d_model, c.kv_heads * self.d_k, bias=c.bias)
        self.w_o = nn.Linear(c.h * self.d_k, c.d_model, bias=c.bias)
        self.dropout_p = c.dropout

    def _split_heads(self, x: Tensor, heads: int) -> Tensor:
        """(batch, len, heads · d_k) -> (batch, heads, len, d_k)."""
        return x.unflatten(-1, (heads, self.d_k)).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        cache: KVCache | None = None,
        terms: PositionTerms = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        """Each position attends to itself and every earlier one.

        x: (batch, new, d_model), after the ``cache.length`` cached positions
        terms: RoPE's tables or ALiBi's bias, made once for all layers (or here)
        mask: bool (batch, new, past + new), True = may attend, for left-padded
            rows; it replaces the causal mask, which it includes
        returns (batch, new, d_model)
        """
        past = 0 if cache is None else cache.length
        # (batch, h, new, d_k) and (batch, kv_heads, new, d_k)
        q = self._split_heads(self.w_q(x), self.h)
        k = self._split_heads(self.w_k(x), self.kv_heads)
        v = self._split_heads(self.w_v(x), self.kv_heads)
        q, k = self.positioned(q, k, terms, past)
        if cache is not None:
            # (batch, kv_heads, past + new, d_k)
            k, v = cache.update(k, v)
        scores_mask, causal = self.scores_mask(q, terms, mask, past)
        # Query head j uses key/value head j // (h / kv_heads): enable_gqa.
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=scores_mask,
            dropout_p=self.dropout_p if self.training else 0.0,
            is_causal=causal,
            enable_gqa=True,
        )
        return self.w_o(out.transpose(1, 2).flatten(2))

    def positioned(
        self, q: Tensor, k: Tensor, terms: PositionTerms, past: int
    ) -> tuple[Tensor, Tensor]:
        """The queries and keys with their positions: unchanged here."""
        return q, k

    def scores_mask(
        self, q: Tensor, terms: PositionTerms, mask: Tensor | None, past: int
    ) -> tuple[Tensor | None, bool]:
        """SDPA's ``attn_mask`` and ``is_causal``: new query i (position past + i)
        sees keys 0 … past + i. SDPA's is_causal aligns the triangle top-left, right
        only without cached keys; after them, the offset mask."""
        if mask is not None:
            # (batch, 1, new, past + new): the same for every head
            return mask.unsqueeze(1), False
        if past == 0:
            return None, True
        return subsequent_mask(q.size(-2), past, q.device).unsqueeze(1), False


class RotaryAttention(GroupedQueryAttention):
    """Grouped-query attention that rotates queries and keys by their positions
    (RoPE); d_model / h must be even.

    terms: (cos, sin) of positions past … past + new − 1, (new, d_k / 2), or
    (batch, 1, new, d_k / 2) for left-padded rows, each row's own positions
    """

    def __init__(self, config: AttentionSizes) -> None:
        super().__init__(config)
        # The base of the angles θᵢ = base^(−2i/d_k).
        self.base = config.rope_base

    def positioned(
        self, q: Tensor, k: Tensor, terms: PositionTerms, past: int
    ) -> tuple[Tensor, Tensor]:
        """q and k, each pair of features turned by its position's angle."""
        if terms is None:
            positions = torch.arange(past, past + q.size(-2), device=q.device)
            dtype = torch.promote_types(q.dtype, torch.float32)
            terms = rope_tables(positions, self.d_k, self.base, dtype)
        return rotate_pairs(q, *terms), rotate_pairs(k, *terms)


class ALiBiAttention(GroupedQueryAttention):
    """Grouped-query attention whose scores get ALiBi's penalty −m_h · (i − j).

    terms: :func:`~annotated_transformer.blocks.alibi.alibi_bias`'s
    (h, new, past + new), which carries the causal mask as −inf
    """

    def scores_mask(
        self, q: Tensor, terms: PositionTerms, mask: Tensor | None, past: int
    ) -> tuple[Tensor | None, bool]:
        """The bias, −inf where a padded row's mask hides a key."""
        if terms is None:
            terms = alibi_bias(self.h, q.size(-2), past, q.device)
        bias = terms.to(q.dtype)
        if mask is not None:
            bias = bias.masked_fill(~mask.unsqueeze(1), float("-inf"))
        return bias, False
