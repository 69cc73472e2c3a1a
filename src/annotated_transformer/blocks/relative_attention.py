"""Relative positions (Dai et al. 2019, Transformer-XL): attention whose scores
depend on the distance between query and key, not on absolute positions.

A score is content plus position: ``(q_i + u)·k_j + (q_i + v)·W_R r_{i-j}``, with
``r`` the sinusoids of the distance ``i - j`` and ``u``, ``v`` learned biases
shared by every position. :func:`rel_shift` turns one product with all
distances into the per-pair table without a gather.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.blocks.masks import subsequent_mask
from annotated_transformer.blocks.positional import sinusoids


def relative_positions(klen: int, d_model: int) -> Tensor:
    """Sinusoids of the distances klen − 1, klen − 2, …, 0, in that order.

    returns (klen, d_model), float32: row t is R_{klen−1−t}, the sinusoidal
        encoding of distance klen − 1 − t
    """
    if klen < 1 or d_model < 2 or d_model % 2 != 0:
        raise ValueError(
            f"klen={klen} must be positive and d_model={d_model} positive and even"
        )
    return sinusoids(klen, d_model).flip(0)


def rel_shift(x: Tensor) -> Tensor:
    """Turn scores against distances into scores against keys (the relative shift).

    x: (..., qlen, klen), x[..., i, t] = score of query i against distance
        klen − 1 − t; query i is key position m + i, m = klen − qlen (the memory)
    returns (..., qlen, klen), out[..., i, j] = x[..., i, j + qlen − 1 − i], the
        score against distance m + i − j, for every key j ≤ m + i (the later
        entries, hidden by the causal mask, are meaningless)

    Pad a zero column in front, read the numbers as (klen + 1, qlen), drop the first
    row, read the rest as (qlen, klen): row i moves left by qlen − 1 − i. One pad
    and two views, no gather.
    """
    *lead, qlen, klen = x.shape
    padded = F.pad(x, (1, 0)).reshape(*lead, klen + 1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)


class RelativeMultiHeadAttention(nn.Module):
    """Multi-head attention with Transformer-XL's relative scores and memory.

    x: (batch, len, d_model), the current segment
    memory: (batch, mem_len, d_model) or None, the previous segment's states,
        detached; keys and values come from [memory; x], klen = mem_len + len
    mask: bool (len, klen) or (batch or 1, len, klen), True = may attend, on top of
        the causal mask (the relative scores cover distances ≥ 0 only)
    returns (batch, len, d_model)
    """

    def __init__(self, d_model: int, h: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model, self.h, self.d_k = d_model, h, d_model // h
        self.w_q, self.w_k, self.w_v, self.w_r = (
            nn.Linear(d_model, d_model, bias=False) for _ in range(4)
        )
        self.w_o = nn.Linear(d_model, d_model)
        # u: the content bias (a query-independent preference
        # for some keys' content);
        # v: the position bias (a query-independent preference for some distances).
        self.u = nn.Parameter(torch.randn(h, self.d_k) * 0.02)
        self.v = nn.Parameter(torch.randn(h, self.d_k) * 0.02)
        self.dropout = nn.Dropout(dropout)

    def _split_heads(self, x: Tensor) -> Tensor:
        """(..., len, d_model) -> (..., h, len, d_k)."""
        return x.unflatten(-1, (self.h, self.d_k)).transpose(-3, -2)

    def _mask(self, mask: Tensor | None, x: Tensor, klen: int) -> Tensor:
        """The causal mask (1, len, klen), and the caller's if given."""
        causal = subsequent_mask(
            x.size(1), offset=klen - x.size(1), device=x.device
        )
        return causal if mask is None else mask & causal

    def forward(
        self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None
    ) -> Tensor:
        context = x if memory is None else torch.cat([memory.detach(), x], dim=1)
        klen = context.size(1)  # mem_len + len
        mask = self._mask(mask, x, klen).unsqueeze(1)  # (batch|1, 1, len, klen)

        q = self._split_heads(self.w_q(x))  # (batch, h, len, d_k)
        k = self._split_heads(self.w_k(context))
        v = self._split_heads(self.w_v(context))
        # (klen, d_model), distances descending
        distances = relative_positions(klen, self.d_model).to(x)
        r = self._split_heads(self.w_r(distances))  # (h, klen, d_k)
        # (batch, h, len, klen)
        content = (q + self.u[:, None]) @ k.transpose(-2, -1)
        # (batch, h, len, klen): column j holds distance m + i − j
        position = rel_shift((q + self.v[:, None]) @ r.transpose(-2, -1))
        scores = (content + position) / math.sqrt(self.d_k)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = self.dropout(scores.softmax(dim=-1))
        # (batch, len, h · d_k): concatenate the heads
        out = (weights @ v).transpose(1, 2).flatten(2)
        return self.w_o(out)
