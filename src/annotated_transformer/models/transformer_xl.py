"""Transformer-XL (Dai et al. 2019): relative positions and a memory of the
previous segment.

Each layer keeps its input hidden states of the previous segment as a *memory*
and the current segment attends to ``[memory; current]``. The memory is a
constant (no gradient): training back-propagates through one segment only, but
information flows forward across segments, N layers reaching about N · mem_len
positions back.

Absolute positions would clash (position 0 of this segment and of the memory), so
the score of query i and key j sees their *distance* i − j, not their positions
(§3.3):

    A_ij = (q_i + u)ᵀ k_j  +  (q_i + v)ᵀ W_R R_{i−j}
           content            position

q_i = W_q x_i and k_j = W_k h_j over [memory; current]; R_d is the sinusoidal
vector of distance d, W_R its projection; u and v are learned per-head vectors
that replace the query in the terms that do not depend on i's content
(:mod:`~annotated_transformer.blocks.relative_attention`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from annotated_transformer.blocks.attention import check_heads
from annotated_transformer.blocks.feed_forward import PositionwiseFeedForward
from annotated_transformer.blocks.masks import check_tokens

from ..blocks.relative_attention import RelativeMultiHeadAttention


@dataclass(frozen=True)
class XLConfig:
    """Transformer-XL's sizes: checked once, then the one object the model
    and every block are built from (``TransformerXLLM(config)``).

    mem_len: the states each layer keeps from earlier segments, by default (a
    call may keep another number). max_len: the segment it reads in training; the
    relative attention has no table to outgrow, so it may read longer ones.
    """

    vocab: int = 256
    d_model: int = 128
    h: int = 4
    N: int = 4
    d_ff: int = 512
    mem_len: int = 64
    dropout: float = 0.1
    max_len: int = 64

    def __post_init__(self) -> None:
        if min(self.vocab, self.N, self.max_len) < 1 or self.mem_len < 0:
            raise ValueError(
                "need vocab, N and max_len >= 1, mem_len >= 0; got "
                f"{self.vocab}, {self.N}, {self.max_len}, {self.mem_len}"
            )
        check_heads(self.h, self.d_model)
        if self.d_model % 2:
            raise ValueError(
                f"d_model={self.d_model} must be even: the relative positions are "
                "sin/cos pairs"
            )


def check_xl_input(
    x: Tensor, memories: list[Tensor] | None, n_blocks: int, mem_len: int
) -> None:
    """Raise a ValueError unless ``x`` (batch, len) and ``memories`` (one per
    block, or None) fit a Transformer-XL of ``n_blocks`` blocks, keeping
    ``mem_len`` >= 0 states. Shapes only: the ids' values are checked where the
    batch is built."""
    if mem_len < 0:
        raise ValueError(f"mem_len={mem_len} must be >= 0 states per layer")
    check_tokens(x, "x")
    if x.size(1) < 1:
        raise ValueError("x has no positions: give at least one token")
    if memories is not None and len(memories) != n_blocks:
        raise ValueError(
            f"got {len(memories)} memories for {n_blocks} blocks; pass "
            "the new_memories returned by the previous call, or None"
        )


class TransformerXLBlock(nn.Module):
    """Relative self-attention over [memory; x], then feed-forward, post-norm (as
    Transformer-XL):

    x = LayerNorm(x + dropout(RelAttn(x, memory)))
    x = LayerNorm(x + dropout(FFN(x)))
    x: (batch, len, d_model); memory: (batch, mem_len, d_model) or None; mask as in
    :class:`RelativeMultiHeadAttention`. returns (batch, len, d_model)
    """

    def __init__(self, config: XLConfig) -> None:
        super().__init__()
        c = config
        self.attention = RelativeMultiHeadAttention(c.d_model, c.h, c.dropout)
        self.feed_forward = PositionwiseFeedForward(c.d_model, c.d_ff, c.dropout)
        self.norm1, self.norm2 = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.dropout = nn.Dropout(c.dropout)

    def forward(
        self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None
    ) -> Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, memory, mask)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class TransformerXLLM(nn.Module):
    """A byte-level Transformer-XL language model: segments read one after another,
    with memory. No position table: the relative attention supplies all positional
    information, so a segment may follow any amount of history.

    forward(x, memories=None, mem_len=None) -> (logits, new_memories)
    x: integer (batch, len), ids in [0, vocab)
    memories: None (the first segment) or the previous call's ``new_memories``, one
        (batch, m, d_model) tensor per block
    mem_len: the states to keep for the next segment (default: the config's);
        evaluation may keep more than training did, the relative scores extend to
        any distance
    returns logits (batch, len, vocab) for each next byte, and new_memories: per
        block the last mem_len of [memory; this segment's inputs to it], detached
    """

    def __init__(self, config: XLConfig) -> None:
        super().__init__()
        c = self.config = config
        self.vocab, self.mem_len = c.vocab, c.mem_len
        self.embed = nn.Embedding(c.vocab, c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(TransformerXLBlock(c) for _ in range(c.N))
        self.to_logits = nn.Linear(c.d_model, c.vocab)

    @staticmethod
    def _remember(memory: Tensor | None, h: Tensor, mem_len: int) -> Tensor:
        """The next segment's memory: the last mem_len states of
        [memory; h], no gradient."""
        states = h if memory is None else torch.cat([memory, h], dim=1)
        return states[:, max(0, states.size(1) - mem_len) :].detach()

    def forward(
        self,
        x: Tensor,
        memories: list[Tensor] | None = None,
        mem_len: int | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        mem_len = self.mem_len if mem_len is None else mem_len
        check_xl_input(x, memories, len(self.blocks), mem_len)
        h = self.dropout(self.embed(x))  # (batch, len, d_model)
        new_memories = []
        for i, block in enumerate(self.blocks):
            memory = None if memories is None else memories[i]
            new_memories.append(self._remember(memory, h, mem_len))
            h = block(h, memory)
        return self.to_logits(h), new_memories
