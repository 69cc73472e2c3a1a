"""Reference solutions to chapter 17's exercises (long contexts)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def strided_mask(n: int, stride: int) -> Tensor:
    """The strided pattern in one head, bool (n, n), True = may attend: the previous
    ``stride`` positions (i included) or every stride-th position back."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    back = i - j  # how far back key j is from query i
    return (back >= 0) & ((back < stride) | (back % stride == 0))


def rel_shift(x: Tensor) -> Tensor:
    """Scores against distances -> scores against keys (Transformer-XL).

    x: (..., qlen, klen), column t = distance klen − 1 − t
    returns (..., qlen, klen), out[..., i, j] = x[..., i, j + qlen − 1 − i] wherever
    j ≤ klen − qlen + i (the other entries are left over, hidden by the mask)
    """
    *lead, qlen, klen = x.shape
    padded = F.pad(x, (1, 0))  # a zero column in front: (..., qlen, klen + 1)
    tall = padded.reshape(*lead, klen + 1, qlen)  # the same numbers, read anew
    return tall[..., 1:, :].reshape(*lead, qlen, klen)  # row i moved qlen − 1 − i


def relative_bias(table: Tensor, n: int) -> Tensor:
    """A learned bias per head and distance, causal: table (H, D + 1) ->
    (H, n, n), out[h, i, j] = table[h, min(i − j, D)] for j ≤ i, −inf for j > i."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    distance = (i - j).clamp(0, table.size(1) - 1)  # (n, n)
    return table[:, distance].masked_fill(j > i, float("-inf"))


def update_memory(memory: Tensor | None, hidden: Tensor, mem_len: int) -> Tensor:
    """Transformer-XL's memory for the next segment: the last ``mem_len`` states of
    [memory; hidden] along the positions, cut from the graph.

    memory: (b, m, d) or None (the first segment); hidden: (b, n, d).
    returns (b, min(mem_len, m + n), d), no gradient
    """
    states = hidden if memory is None else torch.cat([memory, hidden], dim=1)
    return states[:, -mem_len:].detach()
