"""Grouped-query attention (Ainslie et al. 2023): fewer
key/value heads than query heads.

When a decoder generates, every layer keeps the keys and values of all earlier
positions in its cache (:mod:`~annotated_transformer.blocks.kv_cache`),
``2 · heads · d_k`` numbers per position and layer. For long contexts and large
batches that cache, not the weights, fills the accelerator's memory, and reading it
back at every step bounds the decoding speed.

Grouped-query attention keeps h query heads but only ``kv_heads`` key/value heads,
shared by groups of h / kv_heads query heads: query head j attends with key/value
head ⌊j / (h / kv_heads)⌋,

    head_j = softmax(Q_j K_gᵀ / √d_k) V_g,  g = ⌊j · kv_heads / h⌋,
        d_k = d_model / h.

The cache (and W^K, W^V) shrink by h / kv_heads. ``kv_heads = h`` is ordinary
multi-head attention; ``kv_heads = 1`` is multi-query attention (Shazeer 2019).
Llama 2 70B and later use groups of 8.

This module is the self-attention of a decoder-only model: causal, with optional
rotary position embeddings (:mod:`~annotated_transformer.blocks.rope`) on the
queries and keys, or ALiBi's distance penalties
(:mod:`~annotated_transformer.blocks.alibi`) on the scores. Keys are rotated
*before* they are cached, each by its own absolute position, so cached keys never
need to be rotated again.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.blocks.alibi import alibi_bias
from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.blocks.masks import subsequent_mask
from annotated_transformer.blocks.rope import rope_tables, rotate_pairs


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with h query heads sharing
    ``kv_heads`` key/value heads.

    Projections W^Q (d_model → h·d_k), W^K and W^V (d_model → kv_heads·d_k), W^O
    (h·d_k → d_model), without biases unless ``bias=True``. ``dropout`` applies to
    the attention weights. ``rope=True`` rotates queries and keys by their positions
    (base ``rope_base``); ``alibi=True`` adds ALiBi's penalty −m_h · (i − j) to the
    scores instead.
    """

    def __init__(
        self,
        d_model: int,
        h: int,
        kv_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
        rope: bool = True,
        rope_base: float = 10000.0,
        alibi: bool = False,
    ) -> None:
        super().__init__()
        if rope and alibi:
            raise ValueError(
                "choose one way to give positions: rope=True or alibi=True"
            )
        if h < 1 or d_model % h != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by h={h} heads; "
                "choose h so that every head gets d_model / h features"
            )
        if kv_heads < 1 or h % kv_heads != 0:
            raise ValueError(
                f"h={h} query heads cannot be split into groups for "
                f"kv_heads={kv_heads}; kv_heads must divide h (1: multi-query, h: "
                "multi-head)"
            )
        self.d_model, self.h, self.kv_heads = d_model, h, kv_heads
        self.d_k = d_model // h
        if rope and self.d_k % 2 != 0:
            raise ValueError(
                f"RoPE rotates pairs of features but each head has d_k={self.d_k}; "
                "choose d_model / h even"
            )
        self.w_q = nn.Linear(d_model, h * self.d_k, bias=bias)
        self.w_k = nn.Linear(d_model, kv_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, kv_heads * self.d_k, bias=bias)
        self.w_o = nn.Linear(h * self.d_k, d_model, bias=bias)
        self.dropout_p = dropout
        self.rope, self.rope_base, self.alibi = rope, rope_base, alibi

    def _split_heads(self, x: Tensor, heads: int) -> Tensor:
        """(batch, len, heads · d_k) -> (batch, heads, len, d_k)."""
        return x.unflatten(-1, (heads, self.d_k)).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        cache: KVCache | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
        alibi: Tensor | None = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        """Each position attends to itself and every earlier one.

        x: (batch, new, d_model); with a cache, the new positions follow
            ``cache.length`` cached ones, whose keys and values (batch, kv_heads,
            past, d_k) the call extends.
        rope: optional (cos, sin) tables (new, d_k / 2) for positions
            past … past + new − 1, from
            :func:`~annotated_transformer.blocks.rope.rope_tables` (a model computes
            them once for all its layers); computed here when omitted. alibi:
            likewise, the bias (h, new, past + new) of
            :func:`~annotated_transformer.blocks.alibi.alibi_bias`.
        Left-padded rows: the tables are (batch, 1, new, d_k / 2), each row's own
        positions, and mask, bool (batch, new, past + new), True = may attend,
        replaces the causal mask (it includes it, see
        :func:`~annotated_transformer.blocks.masks.left_padding_mask`).
        returns (batch, new, d_model)
        """
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(
                f"x must be (batch, len, d_model={self.d_model}), got "
                f"{tuple(x.shape)}"
            )
        past, new = (0 if cache is None else cache.length), x.size(1)
        q = self._split_heads(self.w_q(x), self.h)  # (batch, h, new, d_k)
        # (batch, kv_heads, new, d_k)
        k = self._split_heads(self.w_k(x), self.kv_heads)
        v = self._split_heads(self.w_v(x), self.kv_heads)
        if self.rope:
            if rope is None:
                positions = torch.arange(past, past + new, device=x.device)
                dtype = torch.promote_types(x.dtype, torch.float32)
                rope = rope_tables(positions, self.d_k, self.rope_base, dtype)
            q, k = rotate_pairs(q, *rope), rotate_pairs(k, *rope)
        elif rope is not None:
            raise ValueError(
                "rope tables were given to an attention built with rope=False"
            )
        if cache is not None:
            k, v = cache.update(k, v)  # (batch, kv_heads, past + new, d_k)
        # New query i (position past + i) sees keys 0 … past + i. Without a cache
        # that is the usual lower triangle (is_causal); SDPA's is_causal aligns it
        # top-left, which would be wrong for new queries after cached keys, so those
        # get the offset mask instead. ALiBi's bias carries the causal mask as −inf,
        # for any past.
        keep = None if mask is None else mask.unsqueeze(1)  # (batch, 1, new, all)
        if self.alibi:
            if alibi is None:
                alibi = alibi_bias(self.h, new, past, x.device)
            scores_mask = alibi.to(q.dtype)  # (h, new, past + new)
            if keep is not None:
                scores_mask = scores_mask.masked_fill(~keep, float("-inf"))
        elif alibi is not None:
            raise ValueError(
                "an ALiBi bias was given to an attention built with alibi=False"
            )
        elif keep is not None:
            scores_mask = keep
        else:
            future = None if past == 0 else subsequent_mask(new, past, x.device)
            scores_mask = None if future is None else future.unsqueeze(1)
        # (batch, h, new, d_k)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=scores_mask,
            dropout_p=self.dropout_p if self.training else 0.0,
            is_causal=past == 0 and not self.alibi and mask is None,
            enable_gqa=True,  # query head j uses key/value head j // (h / kv_heads)
        )
        return self.w_o(out.transpose(1, 2).flatten(2))
