"""Reference solutions to chapter 14's exercises (character-level generation)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def bits_per_byte(logits: Tensor, targets: Tensor) -> float:
    """Mean bits per predicted byte; logits (..., 256), targets (...) true bytes."""
    flat = logits.reshape(-1, logits.size(-1)).double()
    nats = F.cross_entropy(flat, targets.reshape(-1), reduction="sum").item()
    return nats / targets.numel() / math.log(2)  # the mean, not the total


def top_p_distribution(logits: Tensor, p: float) -> Tensor:
    """Top-p (nucleus) sampling's distribution: logits (b, V) -> probs (b, V).

    Keeps, per row, the fewest most likely tokens whose probabilities add up to at
    least p, and renormalises them; every other token gets 0.
    """
    probs = logits.softmax(-1)
    sorted_probs, order = probs.sort(-1, descending=True)
    before = sorted_probs.cumsum(-1) - sorted_probs  # the mass of the tokens above
    keep_sorted = before < p  # needed while the tokens above fall short of p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)


def unigram_bits_per_byte(train: bytes, text: bytes) -> float:
    """Bits per byte of ``text[1:]`` under add-one byte frequencies of ``train``."""
    seen = torch.tensor(list(train), dtype=torch.long)
    counts = torch.bincount(seen, minlength=256).double() + 1  # add one
    bits = -(counts / counts.sum()).log2()  # (256,): the cost of each byte value
    scored = torch.tensor(list(text[1:]), dtype=torch.long)
    return bits[scored].mean().item()


def influence(model: nn.Module, x: Tensor) -> Tensor:
    """The leak test: out[i, j] is True when the logits at position i change when
    byte j of ``x`` (1, n) changes. returns bool (n, n)."""
    n = x.size(1)
    out = torch.zeros(n, n, dtype=torch.bool)
    with torch.no_grad():
        reference = model(x)[0]  # (n, vocab)
        for j in range(n):
            changed = x.clone()
            changed[0, j] = (changed[0, j] + 1) % 256
            out[:, j] = (model(changed)[0] != reference).any(-1)
    return out
