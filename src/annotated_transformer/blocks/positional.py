"""Positional information: attention alone cannot tell word order
(Vaswani et al. 2017, §3.5).

Self-attention is permutation-equivariant, so the model is told each token's
position by adding a vector that depends only on the position to the token's
embedding:

- :class:`PositionalEncoding`: fixed sinusoids (the paper's choice),
  PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos,
  2i+1) = cos(pos / 10000^(2i/d_model));
- :class:`PositionalEmbedding`: one learned vector per position
  (Bloem's ``former``, BERT, GPT).

Both take ``offset``: during cached decoding the new tokens start at position
``offset = cache.length``, not 0. ``offset`` may also be a (batch, len) tensor
holding each token's own position: rows packed with several sentences restart at 0
for every sentence (:func:`~annotated_transformer.blocks.masks.segment_positions`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def _positions(
    x: Tensor, offset: int | Tensor, d_model: int, max_len: int
) -> Tensor:
    """The positions of x's tokens: (len,) from an int offset, or the
    (batch, len) tensor given."""
    if x.dim() != 3 or x.size(-1) != d_model:
        raise ValueError(
            f"expected input (batch, len, d_model={d_model}), got {tuple(x.shape)}"
        )
    if isinstance(offset, Tensor):
        if offset.shape != x.shape[:2] or offset.dtype != torch.long:
            raise ValueError(
                f"positions must be a long tensor of shape {tuple(x.shape[:2])} "
                f"(batch, len), got {offset.dtype} {tuple(offset.shape)}"
            )
        if (
            offset.numel()
            and not 0 <= int(offset.min()) <= int(offset.max()) < max_len
        ):
            raise ValueError(f"positions must lie in [0, max_len={max_len})")
        return offset
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if offset + x.size(1) > max_len:
        raise ValueError(
            f"positions {offset}..{offset + x.size(1) - 1} (offset={offset} + "
            f"len={x.size(1)}) exceed the positional table of max_len={max_len}; "
            "build the model with a larger max_len or feed shorter sequences"
        )
    return torch.arange(offset, offset + x.size(1), device=x.device)


def sinusoids(max_len: int, d_model: int) -> Tensor:
    """The sinusoidal table, (max_len, d_model): sin on even
    features, cos on odd ones.

    Pair i has angular frequency ω_i = 10000^(-2i/d_model): wavelengths grow
    geometrically from 2π to 10000·2π, so nearby positions differ in the fast pairs,
    distant ones in the slow.
    """
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(
        1
    )  # (max_len, 1)
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

    forward(x (batch, len, d_model), offset=0) -> (batch, len, d_model):
    dropout(x + PE[offset : offset + len]), or dropout(x + PE[offset]) for a
    (batch, len) tensor of positions
    """

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000) -> None:
        super().__init__()
        if d_model <= 0 or d_model % 2 != 0:
            raise ValueError(
                f"d_model={d_model} must be a positive even number (sin/cos pairs)"
            )
        if max_len <= 0:
            raise ValueError(f"max_len must be positive, got {max_len}")
        self.d_model = d_model
        self.max_len = max_len
        self.dropout = nn.Dropout(p=dropout)
        # A buffer follows .to(device) but is not trained; not persistent
        # because it is recomputed exactly from (max_len, d_model), so
        # checkpoints need not carry it.
        self.register_buffer(
            "pe", sinusoids(max_len, d_model).unsqueeze(0), persistent=False
        )

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        positions = _positions(
            x, offset, self.d_model, self.max_len
        )  # (len,) or (batch, len)
        return self.dropout(x + self.pe[0, positions])


class PositionalEmbedding(nn.Module):
    """Add a learned vector per position, then dropout (Bloem's
    ``former``; BERT; GPT-2).

    forward(x (batch, len, d_model), offset=0) -> (batch, len, d_model):
    dropout(x + P[offset : offset + len]) with P a trained (max_len, d_model) table
    (or P[offset] for a (batch, len) tensor of positions).
    Unlike sinusoids it cannot extrapolate past max_len: those
    positions were never trained.
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model <= 0 or max_len <= 0:
            raise ValueError(
                f"d_model={d_model} and max_len={max_len} must be positive"
            )
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        positions = _positions(
            x, offset, self.d_model, self.max_len
        )  # (len,) or (batch, len)
        return self.dropout(x + self.embedding(positions))
