"""Reference solutions to chapter 18's exercises (long contexts)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def strided_mask(n: int, stride: int) -> Tensor:
    """The strided pattern in one head, bool (n, n), True = may attend.

    Query i reads the previous ``stride`` positions (itself included) and
    every position a whole number of strides back.
    """
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    back = i - j  # how far back key j is from query i
    return (back >= 0) & ((back < stride) | (back % stride == 0))


def rel_shift(x: Tensor) -> Tensor:
    """Scores against distances -> scores against keys (Transformer-XL).

    x: (..., qlen, klen), column t = distance klen − 1 − t
    returns (..., qlen, klen), out[..., i, j] = x[..., i, j + qlen − 1 − i]
    wherever j ≤ klen − qlen + i (the rest is left over, hidden by the mask)
    """
    *lead, qlen, klen = x.shape
    padded = F.pad(x, (1, 0))  # a zero column in front: (..., qlen, klen + 1)
    tall = padded.reshape(*lead, klen + 1, qlen)  # the same numbers, reread
    # less its first row, read as (qlen, klen): row i moved qlen − 1 − i left
    return tall[..., 1:, :].reshape(*lead, qlen, klen)


def relative_bias(table: Tensor, n: int) -> Tensor:
    """A learned bias per head and distance, causal.

    table: (H, D + 1). returns (H, n, n),
    out[h, i, j] = table[h, min(i − j, D)] for j ≤ i and −inf for j > i
    """
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    distance = (i - j).clamp(0, table.size(1) - 1)  # (n, n)
    return table[:, distance].masked_fill(j > i, float("-inf"))


def update_memory(
    memory: Tensor | None,
    hidden: Tensor,
    mem_len: int,
) -> Tensor:
    """Transformer-XL's memory for the next segment.

    memory: (b, m, d), or None for the first segment; hidden: (b, n, d)
    returns the last mem_len states of [memory; hidden] along the positions,
    (b, min(mem_len, m + n), d), cut from the autograd graph
    """
    states = hidden if memory is None else torch.cat([memory, hidden], dim=1)
    return states[:, -mem_len:].detach()
