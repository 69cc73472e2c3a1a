"""Reference solutions to chapter 13's exercises (sentiment on IMDb)."""

from __future__ import annotations

import math

from torch import Tensor


def masked_mean(x: Tensor, real: Tensor) -> Tensor:
    """The mean of each sequence's real positions.

    x: (b, n, d); real: bool (b, n), False at padding. returns (b, d)
    """
    weights = real.unsqueeze(-1).to(x.dtype)  # (b, n, 1): 1 token, 0 padding
    return (x * weights).sum(1) / weights.sum(1)


def head_and_tail(ids: list[int], max_len: int, tail: int) -> list[int]:
    """A review cut to ``max_len`` tokens: its head and its tail.

    The first max_len − tail tokens, then the last ``tail``; a review that
    fits stays whole.
    """
    if len(ids) <= max_len:
        return list(ids)
    head = list(ids[: max_len - tail])
    return head + list(ids[len(ids) - tail :])  # ids[-0:] would be all


def accuracy_and_standard_error(
    predictions: Tensor,
    labels: Tensor,
) -> tuple[float, float]:
    """Accuracy p of class ids against labels, and its standard error.

    returns (p, √(p (1 − p) / n)), both fractions
    """
    correct = (predictions == labels).double()
    p = correct.mean().item()
    return p, math.sqrt(p * (1 - p) / correct.numel())
