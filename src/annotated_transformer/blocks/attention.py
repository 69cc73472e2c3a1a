"""Scaled dot-product and multi-head attention (Vaswani et al. 2017, §3.2).

:func:`attention` and :class:`MultiHeadedAttention` as the paper has them;
:class:`CachedAttention`, the same module with a key/value cache and PyTorch's
fused kernel, is the one that trains. Masks are bool, ``True`` = *may attend*
(the convention of ``scaled_dot_product_attention``); shapes and masks are
checked where they enter a model, not here.
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.blocks.kv_cache import KVCache


def check_heads(h: int, d_model: int) -> None:
    """Raise a ValueError unless h heads split d_model features evenly."""
    if h <= 0 or d_model % h != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by h={h} heads; "
            "choose h so that every head gets d_model / h features (e.g. h=8 "
            "for 512)"
        )


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout: nn.Module | None = None,
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention, softmax(Q Kᵀ / √d_k) V (eq. 1).

    query: (..., q_len, d_k); key: (..., k_len, d_k); value: (..., k_len, d_v)
    mask:  bool, broadcastable to (..., q_len, k_len); True = may attend
    dropout: applied to the attention weights, as in the paper's reference code
    returns (output (..., q_len, d_v), weights (..., q_len, k_len))
    """
    # Dot products grow like √d_k; dividing keeps the softmax out of its flat tails.
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        # -inf gives masked keys a weight of exactly 0 after the softmax.
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


class MultiHeadedAttention(nn.Module):
    """h attention heads in parallel, each on its own d_k = d_model / h (§3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    query: (batch, q_len, d_model); key, value: (batch, k_len, d_model)
    mask:  bool (batch or 1, 1 or q_len, k_len); True = may attend
    returns (batch, q_len, d_model); the weights (batch, h, q_len, k_len) stay in
        ``attn``, to be drawn
    """

    def __init__(self, h: int, d_model: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.h, self.d_k = h, d_model // h
        # W^Q, W^K, W^V (every head at once, d_model → d_model), then W^O
        self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)
        self.attn: Tensor | None = None

    def split(self, x: Tensor) -> Tensor:
        """(batch, len, d_model) -> (batch, h, len, d_k): a head per slice."""
        return x.view(x.size(0), -1, self.h, self.d_k).transpose(1, 2)

    def merge(self, x: Tensor) -> Tensor:
        """(batch, h, len, d_k) -> (batch, len, h · d_k): concatenate the heads."""
        return x.transpose(1, 2).reshape(x.size(0), -1, self.h * self.d_k)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
    ) -> Tensor:
        if mask is not None:
            # The same mask for every head: (batch, 1, q_len or 1, k_len).
            mask = mask.unsqueeze(1)
        q = self.split(self.linears[0](query))
        k = self.split(self.linears[1](key))
        v = self.split(self.linears[2](value))
        x, self.attn = attention(q, k, v, mask, self.dropout)
        return self.linears[3](self.merge(x))


class CachedAttention(MultiHeadedAttention):
    """:class:`MultiHeadedAttention` as training uses it: with a key/value cache,
    and PyTorch's fused kernel unless the weights are wanted.

    cache: the earlier keys/values; then key/value hold only the new positions and
        k_len counts the cached ones too. A static cache (the source memory) is
        projected once.
    ``keep_attention = True`` runs :func:`attention` and keeps the weights in
    ``attn`` (for attention maps); otherwise ``attn`` is None.
    """

    keep_attention = False

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        q = self.split(self.linears[0](query))
        if cache is not None and cache.ready:
            # The source memory, projected at the first step.
            k, v = cache.key, cache.value
        else:
            k = self.split(self.linears[1](key))
            v = self.split(self.linears[2](value))
            if cache is not None:
                k, v = cache.update(k, v)
        if mask is not None:
            mask = mask.unsqueeze(1)
        if self.keep_attention:
            x, self.attn = attention(q, k, v, mask, self.dropout)
        else:
            p = self.dropout.p if self.training else 0.0
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            self.attn = None
        return self.linears[3](self.merge(x))
