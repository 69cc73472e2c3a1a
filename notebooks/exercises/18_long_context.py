"""Chapter 18 exercises (Longer contexts): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=18
or  python -m annotated_transformer.exercises 18
"""

from __future__ import annotations

from torch import Tensor


def strided_mask(n: int, stride: int) -> Tensor:
    """The strided sparse pattern in one head, bool (n, n), True = may attend:
    query i reads key j when 0 ≤ i − j < stride, or when j ≤ i and
    (i − j) % stride == 0."""
    raise NotImplementedError


def rel_shift(x: Tensor) -> Tensor:
    """Scores against distances -> scores against keys (Transformer-XL).

    x: (..., qlen, klen), column t the distance klen − 1 − t; the queries are the
    last qlen positions of the klen keys. returns (..., qlen, klen) with
    out[..., i, j] = x[..., i, j + qlen − 1 − i] wherever j ≤ klen − qlen + i
    """
    raise NotImplementedError


def relative_bias(table: Tensor, n: int) -> Tensor:
    """A learned relative-position bias: table (H, D + 1) -> (H, n, n) with
    out[h, i, j] = table[h, min(i − j, D)] for j ≤ i and −inf for j > i."""
    raise NotImplementedError


def update_memory(memory: Tensor | None, hidden: Tensor, mem_len: int) -> Tensor:
    """Transformer-XL's memory for the next segment.

    memory: (b, m, d), or None for the first segment; hidden: (b, n, d)
    returns (b, min(mem_len, m + n), d): the last mem_len states of both, no
    gradient
    """
    raise NotImplementedError
