"""The Transformer today: a Llama-style decoder-only language model.

Seven years of practice changed the 2017 decoder block in four places, each one module here:

- pre-norm with :class:`~annotated_transformer.norms.RMSNorm` instead of post-norm LayerNorm;
- rotary position embeddings (:mod:`~annotated_transformer.rope`) on queries and keys, in
  every layer, instead of position vectors added to the input;
- grouped-query attention (:mod:`~annotated_transformer.gqa`): fewer key/value heads, a
  smaller KV cache;
- the :class:`~annotated_transformer.swiglu.SwiGLU` feed-forward instead of ReLU;

and no biases anywhere. One block:

    x = x + dropout(GQA(RMSNorm(x)))          (causal, RoPE)
    x = x + dropout(SwiGLU(RMSNorm(x)))

:class:`ModernDecoderLM` stacks N blocks between a token embedding and a final RMSNorm and
output projection. It keeps the contract of :class:`~annotated_transformer.model.DecoderLM`
(``forward(x, cache)``, ``new_cache()``, ``max_len``), so
:func:`~annotated_transformer.sampling.sample` generates from either.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from annotated_transformer.gqa import GroupedQueryAttention
from annotated_transformer.kv_cache import KVCache
from annotated_transformer.model import check_lm_input
from annotated_transformer.norms import RMSNorm
from annotated_transformer.rope import rope_tables
from annotated_transformer.swiglu import SwiGLU, swiglu_width


class ModernBlock(nn.Module):
    """Pre-norm block: x + dropout(GQA(RMSNorm(x))), then x + dropout(SwiGLU(RMSNorm(x))).

    d_ff: the SwiGLU hidden width itself (``swiglu_width(4 * d_model)`` matches the
    parameters of the paper's 4·d_model ReLU feed-forward); no biases.
    x: (batch, new, d_model); cache: a :class:`KVCache` of kv_heads heads for generation;
    rope: (cos, sin) tables for the new positions, or None to compute them here.
    returns (batch, new, d_model)
    """

    def __init__(
        self,
        d_model: int,
        h: int,
        kv_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        rope_base: float = 10000.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.norm1 = RMSNorm(d_model, eps)
        self.attention = GroupedQueryAttention(d_model, h, kv_heads, dropout, rope_base=rope_base)
        self.norm2 = RMSNorm(d_model, eps)
        self.feed_forward = SwiGLU(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, cache: KVCache | None = None, rope: tuple[Tensor, Tensor] | None = None
    ) -> Tensor:
        x = x + self.dropout(self.attention(self.norm1(x), cache, rope))
        return x + self.dropout(self.feed_forward(self.norm2(x)))


class ModernDecoderLM(nn.Module):
    """A decoder-only language model with N :class:`ModernBlock` s (Llama's recipe, small).

    logits = RMSNorm(blocks(dropout(E[x]))) Wᵀ, positions entering only through RoPE.

    The output matrix W (vocab, d_model) is *not* tied to the embedding E: Llama's choice;
    over bytes E holds only vocab × d_model = 256 × d_model parameters, so tying would save
    little, and untied the input and output tables can specialise. All layers keep PyTorch's
    default initialisation, as :class:`~annotated_transformer.model.DecoderLM` does.

    d_ff: the SwiGLU hidden width; None takes ``swiglu_width(4 * d_model)``, the parameter
    count of the paper's 4 · d_model feed-forward. kv_heads: key/value heads, dividing h.
    max_len: the longest context (RoPE has no table to outgrow, but the model is trained, and
    :func:`~annotated_transformer.sampling.sample` crops, to this length).

    x: integer (batch, len), ids in [0, vocab); positions start at ``cache[0].length`` (0
    without a cache) and must stay below max_len.
    cache: from :meth:`new_cache`, one :class:`KVCache` per block; then x holds only the new
    bytes and the cache is extended in place.
    returns logits (batch, len, vocab): scores of the byte at each position's next position
    """

    def __init__(
        self,
        vocab: int = 256,
        d_model: int = 128,
        h: int = 4,
        N: int = 4,
        max_len: int = 256,
        d_ff: int | None = None,
        kv_heads: int = 2,
        dropout: float = 0.0,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        for name, value in (("vocab", vocab), ("N", N), ("max_len", max_len)):
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        d_ff = swiglu_width(4 * d_model) if d_ff is None else d_ff
        self.vocab, self.max_len, self.rope_base = vocab, max_len, rope_base
        self.embed = nn.Embedding(vocab, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            ModernBlock(d_model, h, kv_heads, d_ff, dropout, rope_base) for _ in range(N)
        )
        self.norm = RMSNorm(d_model)
        self.to_logits = nn.Linear(d_model, vocab, bias=False)
        self.d_k = d_model // h

    def new_cache(self) -> list[KVCache]:
        """An empty key/value cache: one growing :class:`KVCache` per block."""
        return [KVCache() for _ in self.blocks]

    def forward(self, x: Tensor, cache: list[KVCache] | None = None) -> Tensor:
        past = check_lm_input(x, cache, len(self.blocks), self.max_len)
        h = self.dropout(self.embed(x))  # (batch, len, d_model)
        # One cos/sin table for the new positions, shared by every block.
        positions = torch.arange(past, past + x.size(1), device=x.device)
        dtype = torch.promote_types(h.dtype, torch.float32)
        rope = rope_tables(positions, self.d_k, self.rope_base, dtype)  # (len, d_k / 2) each
        for i, block in enumerate(self.blocks):
            h = block(h, None if cache is None else cache[i], rope)
        return self.to_logits(self.norm(h))  # (batch, len, vocab)


def modern_parameter_formula(
    vocab: int, d_model: int, h: int, kv_heads: int, d_ff: int, N: int
) -> dict[str, int]:
    """Parameters of :class:`ModernDecoderLM` per block, in closed form (no biases).

    attention: W^Q and W^O d², W^K and W^V d · kv_heads · d_k each (d_k = d / h), so
    2d² + 2d²·kv_heads/h: grouping saves 2d²(1 − kv_heads/h) per layer
    SwiGLU: 3 · d · d_ff;  RMSNorm: d (a gain, no bias); two norms per block
    embedding and output projection (untied): vocab · d each; final norm: d
    """
    d, d_k = d_model, d_model // h
    attention = 2 * d * d + 2 * d * kv_heads * d_k
    block = attention + 3 * d * d_ff + 2 * d
    counts = {"embed": vocab * d}
    for i in range(N):
        counts[f"blocks.{i}"] = block
    counts["norm"] = d
    counts["to_logits"] = vocab * d
    return counts
