"""The Transformer today: a Llama-style decoder-only language model.

Practice since 2017 changed the decoder block in four places, each a part the
config names by its class:

- pre-norm :class:`~annotated_transformer.blocks.norms.RMSNorm` instead of
  post-norm LayerNorm (``norm``);
- rotary position embeddings (:mod:`~annotated_transformer.blocks.rope`) on
  queries and keys in every layer, instead of position vectors added to the input
  (``positions``, with the ``attention`` that applies them);
- grouped-query attention
  (:mod:`~annotated_transformer.blocks.grouped_query_attention`): fewer key/value
  heads, a smaller KV cache (``kv_heads``);
- the :class:`~annotated_transformer.blocks.feed_forward.SwiGLU` feed-forward
  instead of ReLU (``feed_forward``);

and no biases (``bias``). One block:

    x = x + dropout(GQA(RMSNorm(x)))          (causal, RoPE)
    x = x + dropout(SwiGLU(RMSNorm(x)))

The parts can be added to a pre-norm block one at a time and measured: with
``layer_norm``, learned positions, ReLU, biases and ``kv_heads=h`` the model is
the 2017 decoder-only one, made pre-norm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from annotated_transformer.blocks.attention import check_heads
from annotated_transformer.blocks.feed_forward import SwiGLU
from annotated_transformer.blocks.grouped_query_attention import (
    GroupedQueryAttention,
    RotaryAttention,
)
from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.blocks.masks import (
    left_padding_mask,
    left_padding_positions,
)
from annotated_transformer.blocks.norms import rms_norm
from annotated_transformer.blocks.positional import (
    ALiBiPositions,
    NoPositions,
    PositionTerms,
    RotaryPositions,
)
from annotated_transformer.blocks.sparse_attention import (
    SparsePattern,
    SparseSelfAttention,
)
from annotated_transformer.models.decoder_only import check_lm_input, check_sizes
from annotated_transformer.models.encoder_decoder import count_parameters


@dataclass(frozen=True)
class ModernConfig:
    """The Llama-style model's sizes and parts (classes), checked once: the one
    object the model and every block are built from (``ModernBlock(config)``).

    d_ff: the feed-forward's hidden width; None: the width with the parameters of a
        ReLU feed-forward ``relu_d_ff`` wide (None: 4 · d_model), so relu_d_ff for
        ReLU, 2/3 of it for SwiGLU. kv_heads: key/value heads, dividing h (None: h).
    norm: built from (d_model, bias, eps), eps None for each norm's usual one;
        feed_forward: built from (d_model, d_ff, dropout, bias); positions with the
        attention that applies them: ``RotaryPositions`` with ``RotaryAttention``,
        ``ALiBiPositions`` with ``ALiBiAttention``, the others with
        ``GroupedQueryAttention``; pattern: the block-sparse pattern of
        ``attention=SparseSelfAttention`` (None otherwise).
    tie_embeddings: the output layer is the token embedding itself, no output bias
        (GPT-2; the 2017 paper's §3.4).
    """

    vocab: int = 256
    d_model: int = 128
    h: int = 4
    N: int = 4
    max_len: int = 256
    d_ff: int | None = None
    kv_heads: int | None = 2
    dropout: float = 0.0
    rope_base: float = 10000.0
    norm: Callable[[int, bool, float | None], nn.Module] = rms_norm
    positions: type[NoPositions] = RotaryPositions
    attention: type[GroupedQueryAttention | SparseSelfAttention] = RotaryAttention
    feed_forward: type[nn.Module] = SwiGLU
    bias: bool = False
    eps: float | None = None
    tie_embeddings: bool = False
    pattern: SparsePattern | None = None
    relu_d_ff: int | None = None

    def __post_init__(self) -> None:
        check_sizes(self, ("vocab", "N", "max_len"))
        check_heads(self.h, self.d_model)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.h)
        if self.kv_heads < 1 or self.h % self.kv_heads:
            raise ValueError(
                f"h={self.h} query heads cannot be split into groups for "
                f"kv_heads={self.kv_heads}; kv_heads must divide h (1: "
                "multi-query, h: multi-head)"
            )
        width = self.feed_forward.width(self.relu_d_ff or 4 * self.d_model)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", width)
        elif self.relu_d_ff is not None and self.d_ff != width:
            raise ValueError(
                f"d_ff={self.d_ff} is not the width of relu_d_ff={self.relu_d_ff} "
                f"({width}): give one of them"
            )
        sparse = self.attention is SparseSelfAttention
        if sparse != (self.pattern is not None):
            raise ValueError(
                "a sparse pattern goes with attention=SparseSelfAttention: give "
                "both or neither"
            )
        if sparse and (self.kv_heads != self.h or self.positions is ALiBiPositions):
            raise ValueError(
                "sparse attention needs one key/value head per head (kv_heads=h) "
                "and no ALiBi"
            )


class ModernBlock(nn.Module):
    """Pre-norm block: x + dropout(GQA(RMSNorm(x))), then
    x + dropout(SwiGLU(RMSNorm(x))), built from a :class:`ModernConfig`.

    x: (batch, new, d_model); cache: a :class:`KVCache` of kv_heads heads;
    terms: what the positions give the attention (RoPE's tables, ALiBi's bias), or
        None to compute them there: rotary and ALiBi positions act here, the others
        at the model's input;
    mask: bool (batch, new, past + new), for left-padded rows.
    returns (batch, new, d_model)
    """

    def __init__(self, config: ModernConfig) -> None:
        super().__init__()
        c = config
        self.norm1 = c.norm(c.d_model, c.bias, c.eps)
        # The attention that applies the positions' terms (or none).
        self.attention = c.attention(c)
        self.norm2 = c.norm(c.d_model, c.bias, c.eps)
        self.feed_forward = c.feed_forward(c.d_model, c.d_ff, c.dropout, c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(
        self,
        x: Tensor,
        cache: KVCache | None = None,
        terms: PositionTerms = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        attended = self.attention(self.norm1(x), cache, terms, mask)
        x = x + self.dropout(attended)
        return x + self.dropout(self.feed_forward(self.norm2(x)))


class ModernDecoderLM(nn.Module):
    """A decoder-only language model of N :class:`ModernBlock` blocks (Llama's
    recipe, small): logits = norm(blocks(dropout(E[x]))) Wᵀ.

    W is E itself only with ``tie_embeddings`` (Llama unties them; over bytes,
    tying would save only 256 · d_model parameters, and untied tables can
    specialise); every layer keeps PyTorch's default initialisation. Learned and
    sinusoidal positions are added to E[x], rotary and ALiBi ones act in the
    attention. It keeps the contract of
    :class:`~annotated_transformer.models.decoder_only.DecoderLM` (x, cache and
    mask as there, the mask covering cached places too; ``new_cache()``,
    ``max_len``), so :func:`~annotated_transformer.evaluation.sampling.sample`
    generates from either; max_len: the context it trains on and sample crops to.
    returns logits (batch, len, vocab)
    """

    def __init__(self, config: ModernConfig) -> None:
        super().__init__()
        c = self.config = config
        self.vocab, self.max_len, self.rope_base = c.vocab, c.max_len, c.rope_base
        self.embed = nn.Embedding(c.vocab, c.d_model)
        # What positions add to the input (maybe nothing) and give every layer.
        self.position = c.positions(c)
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(ModernBlock(c) for _ in range(c.N))
        self.norm = c.norm(c.d_model, c.bias, c.eps)
        if c.tie_embeddings:
            self.to_logits = nn.Linear(c.d_model, c.vocab, bias=False)
            self.to_logits.weight = self.embed.weight  # one (vocab, d_model) table
        else:
            self.to_logits = nn.Linear(c.d_model, c.vocab, bias=c.bias)

    def new_cache(self) -> list[KVCache]:
        """An empty key/value cache: one growing :class:`KVCache` per block."""
        return [KVCache() for _ in self.blocks]

    def extend_context(self, max_len: int) -> None:
        """Accept contexts up to ``max_len``, longer than trained on
        (same weights, in place).

        RoPE, ALiBi and no positions have nothing to outgrow; sinusoids are
        computed for the new length; a learned table has no vectors past the
        length it was trained for.
        """
        self.position.extend(max_len)
        self.max_len = max_len

    def forward(
        self,
        x: Tensor,
        cache: list[KVCache] | None = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        padding = all(block.attention.takes_padding for block in self.blocks)
        past = check_lm_input(
            x, cache, len(self.blocks), self.max_len, mask, padding
        )
        if mask is None:
            keys = None
            positions = torch.arange(past, past + x.size(1), device=x.device)
        else:
            # Left padding: each row's own positions, padded keys hidden.
            keys = left_padding_mask(mask, x.size(1))
            positions = left_padding_positions(mask, x.size(1))
        h = self.position(self.embed(x), past if mask is None else positions)
        h = self.dropout(h)
        # Positions inside the attention, computed once for every block.
        terms = self.position.terms(positions, past, h)
        for i, block in enumerate(self.blocks):
            h = block(h, None if cache is None else cache[i], terms, keys)
        return self.to_logits(self.norm(h))  # (batch, len, vocab)


def modern_parameter_formula(config: ModernConfig) -> dict[str, int]:
    """Parameters of :class:`ModernDecoderLM`, per part, in closed form.

    attention: W^Q and W^O d², W^K and W^V d · kv_heads · d_k each (d_k = d / h), so
    2d² + 2d²·kv_heads/h: grouping saves 2d²(1 − kv_heads/h) per layer
    feed-forward: m · d · d_ff with m its matrices (SwiGLU 3, ReLU 2);  a norm: d
    (a gain), + d with LayerNorm's bias;  embedding and output projection (untied):
    vocab · d each;  bias=True adds each linear layer's output width;  learned
    positions max_len · d
    """
    c = config
    # kv: the width of W^K and W^V
    d, kv, bias = c.d_model, c.kv_heads * (c.d_model // c.h), c.bias
    attention = 2 * d * d + 2 * d * kv + (2 * d + 2 * kv if bias else 0)
    # m weight matrices; biases: (m - 1) hidden layers of d_ff, one output of d
    m = c.feed_forward.matrices
    ff = m * d * c.d_ff + ((m - 1) * c.d_ff + d if bias else 0)
    # A norm and the positions are counted from the part itself, built without
    # memory: a gain (+ a bias), a table of max_len · d or nothing.
    with torch.device("meta"):
        norm_size = count_parameters(c.norm(d, bias, None))
        position = count_parameters(c.positions(c))
    counts = {"embed": c.vocab * d}
    if position:
        counts["position"] = position
    for i in range(c.N):
        counts[f"blocks.{i}"] = attention + ff + 2 * norm_size
    counts["norm"] = norm_size
    counts["to_logits"] = c.vocab * d + (c.vocab if bias else 0)
    return counts
