"""Reference solutions to chapter 14's exercises (generating characters)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def bits_per_byte(logits: Tensor, targets: Tensor) -> float:
    """Mean bits per predicted byte: logits (..., 256), targets (...)."""
    flat = logits.reshape(-1, logits.size(-1)).double()
    nats = F.cross_entropy(flat, targets.reshape(-1), reduction="sum").item()
    return nats / targets.numel() / math.log(2)  # the mean, not the total


def temperature_for_entropy(logits: Tensor, bits: float) -> float:
    """The temperature T at which softmax(logits / T) has ``bits`` of entropy.

    logits: (V,), not all equal; 0 < bits < log₂ V. The entropy grows with T,
    from 0 bits (T → 0, all mass on the largest logit) to log₂ V (T → ∞,
    uniform), so bisect on log T.
    """

    def entropy(t: float) -> float:
        p = (logits.double() / t).softmax(-1)
        return -(p * p.clamp_min(1e-300).log2()).sum().item()

    low, high = 1e-3, 1e3
    for _ in range(100):
        middle = math.sqrt(low * high)  # bisect in log space: T spans decades
        if entropy(middle) < bits:
            low = middle
        else:
            high = middle
    return math.sqrt(low * high)


def unigram_bits_per_byte(train: bytes, text: bytes) -> float:
    """Bits per byte of ``text[1:]`` by add-one byte counts of ``train``."""
    seen = torch.tensor(list(train), dtype=torch.long)
    counts = torch.bincount(seen, minlength=256).double() + 1  # add one
    bits = -(counts / counts.sum()).log2()  # (256,): each byte value's cost
    scored = torch.tensor(list(text[1:]), dtype=torch.long)
    return bits[scored].mean().item()


def influence(model: nn.Module, x: Tensor) -> Tensor:
    """The leak test of a language model on bytes ``x`` (1, n).

    returns bool (n, n): out[i, j] is True when changing byte j changes the
    logits at position i
    """
    n = x.size(1)
    out = torch.zeros(n, n, dtype=torch.bool)
    with torch.no_grad():
        reference = model(x)[0]  # (n, vocab)
        for j in range(n):
            changed = x.clone()
            changed[0, j] = (changed[0, j] + 1) % 256
            out[:, j] = (model(changed)[0] != reference).any(-1)
    return out
