"""Positions: attention alone cannot tell word order (Vaswani et al. 2017, §3.5).

Self-attention is permutation-equivariant, so each token's embedding gets a vector
that depends only on its position: fixed sinusoids (the paper's), PE(pos, 2i) =
sin(pos·ω_i), PE(pos, 2i+1) = cos(pos·ω_i), ω_i = 10000^(−2i/d_model), or a learned
vector per position. ``offset`` is the first position (``cache.length`` when
decoding with a cache), or a (batch, len) tensor of each token's own position.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import Tensor, nn

from annotated_transformer.blocks.alibi import alibi_bias
from annotated_transformer.blocks.rope import rope_tables

# What a model's positions give every layer's attention: RoPE's (cos, sin) tables,
# ALiBi's bias, or nothing.
PositionTerms = tuple[Tensor, Tensor] | Tensor | None


class PositionSizes(Protocol):
    """The fields of a model's config its positions are built from."""

    d_model: int
    h: int
    max_len: int
    rope_base: float


def check_positions(length: int, offset: int | Tensor, max_len: int) -> None:
    """Raise a ValueError unless ``length`` tokens from ``offset`` (or at the
    positions of a (batch, length) long tensor) fit ``max_len`` positions."""
    if isinstance(offset, Tensor):
        if (
            offset.dim() != 2
            or offset.size(1) != length
            or offset.dtype != torch.long
        ):
            raise ValueError(
                f"positions must be a long tensor of shape (batch, {length}), got "
                f"{offset.dtype} {tuple(offset.shape)}"
            )
        if (
            offset.numel()
            and not 0 <= int(offset.min()) <= int(offset.max()) < max_len
        ):
            raise ValueError(f"positions must lie in [0, max_len={max_len})")
        return
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if offset + length > max_len:
        raise ValueError(
            f"positions {offset}..{offset + length - 1} (offset={offset} + "
            f"len={length}) exceed the positional table of max_len={max_len}; "
            "build the model with a larger max_len or feed shorter sequences"
        )


def position_ids(offset: int | Tensor, x: Tensor) -> Tensor:
    """x's positions, offset … offset + len − 1 (len,), or offset, (batch, len)."""
    if isinstance(offset, Tensor):
        return offset
    return torch.arange(offset, offset + x.size(1), device=x.device)


def sinusoids(max_len: int, d_model: int) -> Tensor:
    """The sinusoidal table, (max_len, d_model): sin on even features, cos on odd.

    Pair i has angular frequency ω_i = 10000^(-2i/d_model): wavelengths from 2π to
    10000·2π, so near positions differ in the fast pairs, distant ones in the slow.
    """
    # (max_len, 1)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    # exp(-2i·ln(10000)/d) = 10000^(-2i/d), computed in log space for accuracy.
    omega = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32)
        * -(math.log(10000.0) / d_model)
    )
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * omega)
    pe[:, 1::2] = torch.cos(position * omega)
    return pe


class PositionalEncoding(nn.Module):
    """Add fixed sinusoidal position vectors, then dropout (§3.5 and §5.4).

    x: (batch, len, d_model) -> dropout(x + PE[offset : offset + len]), same shape
    """

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        # A buffer follows .to(device) but is not trained; not persistent: it is
        # recomputed exactly from (max_len, d_model), checkpoints need not carry it.
        pe = sinusoids(max_len, d_model).unsqueeze(0)
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        return self.dropout(x + self.pe[0, position_ids(offset, x)])


class PositionalEmbedding(nn.Module):
    """Add a learned vector per position, then dropout (Bloem's ``former``, BERT,
    GPT-2).

    x: (batch, len, d_model) -> dropout(x + P[offset : offset + len]), same shape,
    P a trained (max_len, d_model) table: no position past max_len was trained.
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        return self.dropout(x + self.embedding(position_ids(offset, x)))


# The ways a decoder-only model (``ModernDecoderLM``) is told positions, one class
# each, named in its config (``ModernConfig.positions``). Each is the model's
# ``position`` part: ``forward(x, positions)`` adds to the token vectors what it
# adds (maybe nothing), and ``terms(positions, past, x)`` gives what every layer's
# attention applies (maybe nothing; the config's ``attention`` class applies it).


class NoPositions(nn.Module):
    """No position information at all: causal attention alone (an ablation)."""

    def __init__(self, config: PositionSizes) -> None:
        super().__init__()

    def forward(self, x: Tensor, positions: int | Tensor) -> Tensor:
        return x

    def terms(self, positions: Tensor, past: int, x: Tensor) -> PositionTerms:
        """Nothing for the attention."""
        return None

    def extend(self, max_len: int) -> None:
        """Accept contexts up to ``max_len`` (nothing to outgrow here)."""


class LearnedPositions(NoPositions):
    """A learned vector per position, added to the input (GPT-2's); its state-dict
    key is :class:`PositionalEmbedding`'s, ``embedding.weight``."""

    def __init__(self, config: PositionSizes) -> None:
        super().__init__(config)
        self.max_len = config.max_len
        self.embedding = nn.Embedding(config.max_len, config.d_model)

    def forward(self, x: Tensor, positions: int | Tensor) -> Tensor:
        return x + self.embedding(position_ids(positions, x))

    def extend(self, max_len: int) -> None:
        raise ValueError(
            "learned positions have no vector past position "
            f"{self.max_len - 1}: a model with them cannot read a longer context"
        )


class SinusoidalPositions(NoPositions):
    """The paper's sinusoids, added to the input."""

    def __init__(self, config: PositionSizes) -> None:
        super().__init__(config)
        self.d_model = config.d_model
        pe = sinusoids(config.max_len, config.d_model)
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x: Tensor, positions: int | Tensor) -> Tensor:
        return x + self.pe[position_ids(positions, x)]

    def extend(self, max_len: int) -> None:
        self.pe = sinusoids(max_len, self.d_model).to(self.pe.device)


class RotaryPositions(NoPositions):
    """RoPE: nothing added to the input; every layer rotates its queries and keys
    by their positions (:mod:`~annotated_transformer.blocks.rope`)."""

    def __init__(self, config: PositionSizes) -> None:
        super().__init__(config)
        self.d_k, self.base = config.d_model // config.h, config.rope_base

    def terms(self, positions: Tensor, past: int, x: Tensor) -> PositionTerms:
        """(cos, sin), (len, d_k / 2), or one per row, (batch, 1, len, d_k / 2)."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        cos, sin = rope_tables(positions, self.d_k, self.base, dtype)
        if positions.dim() == 2:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return cos, sin


class ALiBiPositions(NoPositions):
    """ALiBi: nothing added to the input; every layer's scores get the distance
    penalty of :mod:`~annotated_transformer.blocks.alibi`."""

    def __init__(self, config: PositionSizes) -> None:
        super().__init__(config)
        self.h = config.h

    def terms(self, positions: Tensor, past: int, x: Tensor) -> PositionTerms:
        """ALiBi's bias (h, len, past + len)."""
        return alibi_bias(self.h, x.size(1), past, x.device)
