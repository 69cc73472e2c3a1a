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
    """Sinusoids of the distances klen − 1, klen − 2, ..., 0,
    in that (descending) order.

    returns (klen, d_model), float32: row t is the vector R_{klen−1−t} (sin on even
        features, cos on odd ones, the frequencies of
        :func:`~annotated_transformer.blocks.positional.sinusoids`)
    """
    if klen < 1 or d_model < 2 or d_model % 2 != 0:
        raise ValueError(
            f"klen={klen} must be positive and d_model={d_model} positive and even"
        )
    return sinusoids(klen, d_model).flip(0)


def rel_shift(x: Tensor) -> Tensor:
    """Turn scores against distances into scores against keys:
    the relative-shift trick.

    x: (..., qlen, klen), x[..., i, t] = score of query i against distance
        klen − 1 − t (columns as in :func:`relative_positions`); the queries are the
        last qlen of the klen keys, so query i sits at key position m + i with
        m = klen − qlen (the memory length).
    returns (..., qlen, klen), out[..., i, j] = score against distance m + i − j,
        i.e. out[..., i, j] = x[..., i, j + qlen − 1 − i], for every key j ≤ m + i;
        the entries for j > m + i (future keys, which the causal mask hides) are
        meaningless.

    Derivation. Row i must move left by qlen − 1 − i: the
    further up the row, the further.
    1. Pad a zero column in front: P (qlen, klen + 1), P[i,
       s] = x[i, s − 1], P[i, 0] = 0.
    2. Read P's qlen·(klen + 1) numbers, row-major, as a (klen + 1, qlen)
       matrix and drop its first row: this drops the first qlen numbers, so
       flat index f becomes f − qlen.
    3. Read the remaining qlen·klen numbers as (qlen, klen). Entry (i, j) is flat
       index i·klen + j + qlen of P = i·(klen + 1) + s with s = j + qlen − i: that
       is P[i, s] as long as s ≤ klen, i.e. x[i, j + qlen − 1 − i]. Every row loses
       i more leading numbers than the row above, which is exactly the shift we
       need; no gather, one pad and two views.
    """
    *lead, qlen, klen = x.shape
    padded = F.pad(x, (1, 0)).reshape(*lead, klen + 1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)


class RelativeMultiHeadAttention(nn.Module):
    """Multi-head attention with Transformer-XL's relative
    position scores and memory.

    forward(x, memory=None, mask=None):
    x: (batch, len, d_model), the current segment (queries,
        and the newest keys/values)
    memory: (batch, mem_len, d_model) or None, the previous segment's hidden
        states; detached, so no gradient reaches it. Keys and values come from
        [memory; x], klen = mem_len + len.
    mask: bool (len, klen) or (batch or 1, len, klen), True = may attend; None means
        causal (query i sees keys j ≤ mem_len + i). It may hide more, never a future
        key: the relative scores cover distances ≥ 0 only.
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
        """The causal mask, (1, len, klen), and the caller's if given: a future key
        stays hidden whatever it says."""
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
