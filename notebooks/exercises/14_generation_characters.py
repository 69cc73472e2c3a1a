"""Chapter 14 exercises (Character-level generation): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=14
or  python -m annotated_transformer.exercises 14
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn


def bits_per_byte(logits: Tensor, targets: Tensor) -> float:
    """Find the bug: bits per byte; logits (..., 256), targets (...) true bytes."""
    flat = logits.reshape(-1, logits.size(-1)).double()
    nats = F.cross_entropy(flat, targets.reshape(-1), reduction="sum").item()
    return nats / math.log(2)


def temperature_for_entropy(logits: Tensor, bits: float) -> float:
    """The temperature T at which softmax(logits / T) has an entropy of ``bits``.

    logits: (V,), not all equal; 0 < bits < log₂ V (the entropy in bits)
    """
    raise NotImplementedError


def unigram_bits_per_byte(train: bytes, text: bytes) -> float:
    """Bits per byte of ``text[1:]`` under add-one byte frequencies of ``train``."""
    raise NotImplementedError


def influence(model: nn.Module, x: Tensor) -> Tensor:
    """The leak test of a language model.

    model: maps byte ids (1, n) to logits (1, n, 256), in eval mode; x: (1, n)
    returns bool (n, n): out[i, j] is True when changing byte j of x changes the
    logits at position i
    """
    raise NotImplementedError
