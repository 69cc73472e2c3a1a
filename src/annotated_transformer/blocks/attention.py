"""Scaled dot-product attention and multi-head attention
(Vaswani et al. 2017, §3.2).

Two implementations of the same function live here:

- :func:`attention` is the textbook form, matmul → softmax → matmul, written out so
  the reader sees every step and can look at the attention weights;
- :class:`MultiHeadedAttention` runs PyTorch's fused
  ``scaled_dot_product_attention`` when the weights are not needed (faster, less
  memory), and the explicit form when they are (``keep_attention = True``, e.g. to
  draw attention maps). Tests check that both agree.

Masks are boolean and ``True`` means *may attend*, the convention of
``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.blocks.kv_cache import KVCache


def check_mask(mask: Tensor, scores_shape: torch.Size | tuple[int, ...]) -> None:
    """Raise a ValueError unless ``mask`` is boolean and fits ``scores_shape``.

    Only the dtype and the shape: a check that reads the mask's *values* would, on a
    GPU, wait for the device in every layer. Whether every query row has a key to
    attend to is checked once per batch, where the batch is built
    (:func:`~annotated_transformer.blocks.masks.check_rows`).

    scores_shape: ``(..., q_len, k_len)``, the shape of the attention scores.
    """
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be boolean (True = may attend), got dtype {mask.dtype}"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, tuple(scores_shape))
    except RuntimeError:
        shape = None
    if shape != tuple(scores_shape):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} cannot broadcast to the attention "
            f"scores {tuple(scores_shape)} (..., q_len, k_len)"
        )


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout: nn.Dropout | None = None,
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention, softmax(Q Kᵀ / √d_k) V
    (Vaswani et al. 2017, eq. 1).

    query: (..., q_len, d_k); key: (..., k_len, d_k); value: (..., k_len, d_v)
    mask:  bool, broadcastable to (..., q_len, k_len); True = may attend
    dropout: applied to the attention weights, as in the paper's reference code
    returns (output (..., q_len, d_v), weights (..., q_len, k_len))
    """
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"query has d_k={query.size(-1)} features but key has {key.size(-1)}; "
            "queries and keys must have the same width to be compared by a dot "
            "product"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(
            f"key has {key.size(-2)} positions but value has {value.size(-2)}; "
            "each key needs exactly one value"
        )
    d_k = query.size(-1)
    # Dot products grow like √d_k; dividing keeps the softmax out of
    # its flat, saturated tails.
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., q_len, k_len)
    if mask is not None:
        check_mask(mask, scores.shape)
        # -inf gives masked keys a weight of exactly 0 after the softmax.
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


class MultiHeadedAttention(nn.Module):
    """h attention heads in parallel, each on its own
    d_k = d_model / h slice (§3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    ``linears`` holds the four projections W^Q, W^K, W^V (all heads at once,
    d_model → d_model) and W^O, in that order, as in the Annotated Transformer.

    Set ``keep_attention = True`` to run the explicit path and keep the weights in
    ``attn`` ``(batch, h, q_len, k_len)`` for plotting; otherwise the fused kernel
    runs and ``attn`` is None.
    """

    def __init__(self, h: int, d_model: int, dropout: float = 0.1) -> None:
        super().__init__()
        if h <= 0 or d_model % h != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by h={h} heads; "
                "choose h so that every head gets d_model / h features (e.g. h=8 "
                "for 512)"
            )
        self.h = h
        self.d_k = d_model // h
        self.d_model = d_model
        self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)
        self.keep_attention = False
        self.attn: Tensor | None = None

    def _split_heads(self, x: Tensor) -> Tensor:
        """(batch, len, d_model) -> (batch, h, len, d_k): fold the
        heads next to the batch."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.h, self.d_k).transpose(1, 2)

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.dim() != 3 or x.size(-1) != self.d_model:
                raise ValueError(
                    f"{name} must be (batch, len, d_model={self.d_model}), got "
                    f"{tuple(x.shape)}"
                )
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key {tuple(key.shape)} and value {tuple(value.shape)} must have "
                "the same batch size and number of positions"
            )
        if query.size(0) != key.size(0):
            raise ValueError(
                f"query has batch size {query.size(0)} but key/value have "
                f"{key.size(0)}"
            )

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Attend from ``query`` to ``key``/``value``.

        query: (batch, q_len, d_model); key, value: (batch, k_len, d_model)
        mask:  bool (batch or 1, 1 or q_len, k_len); True = may attend. (batch, 1,
               k_len) hides padding, (batch or 1, q_len, k_len) also hides the
               future.
        cache: during incremental decoding, earlier keys/values (see
               :mod:`kv_cache`); with a cache, k_len counts the cached positions
               too.
        returns (batch, q_len, d_model)
        """
        self._check_inputs(query, key, value)
        q = self._split_heads(self.linears[0](query))  # (batch, h, q_len, d_k)
        if cache is not None and cache.ready:
            k, v = (
                cache.key,
                cache.value,
            )  # source memory, projected at the first step
        else:
            k = self._split_heads(self.linears[1](key))
            v = self._split_heads(self.linears[2](value))
            if cache is not None:
                k, v = cache.update(k, v)
        if mask is not None:
            if mask.dim() != 3:
                raise ValueError(
                    f"mask must be (batch, 1, k_len) or (batch, q_len, k_len), "
                    f"got shape {tuple(mask.shape)}"
                )
            mask = mask.unsqueeze(
                1
            )  # same mask for every head: (batch, 1, q_len|1, k_len)
            check_mask(mask, (q.size(0), self.h, q.size(2), k.size(2)))

        if self.keep_attention:
            x, self.attn = attention(q, k, v, mask=mask, dropout=self.dropout)
        else:
            p = self.dropout.p if self.training else 0.0
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            self.attn = None
        # (batch, h, q_len, d_k) -> (batch, q_len, h * d_k): concatenate the heads.
        x = x.transpose(1, 2).reshape(query.size(0), -1, self.h * self.d_k)
        return self.linears[3](x)
