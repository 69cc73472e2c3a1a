"""The paper's model: the encoder-decoder Transformer (Vaswani et al. 2017).

:class:`EncoderDecoder` and :func:`make_model` are the 2017 model as the Annotated
Transformer wrote it; :class:`Transformer` is the same model, weight for weight,
built from a :class:`TransformerConfig` with a key/value cache and packed rows: the
model a translation run trains.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.blocks.attention import (
    CachedAttention,
    MultiHeadedAttention,
    check_heads,
)
from annotated_transformer.blocks.embeddings import Embeddings, TokenAndPosition
from annotated_transformer.blocks.feed_forward import PositionwiseFeedForward
from annotated_transformer.blocks.kv_cache import DecoderCache
from annotated_transformer.blocks.layers import (
    CachedDecoder,
    CachedDecoderLayer,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
)
from annotated_transformer.blocks.masks import check_mask, check_tokens
from annotated_transformer.blocks.positional import (
    PositionalEncoding,
    check_positions,
)
from annotated_transformer.models.decoder_only import check_sizes


class Generator(nn.Module):
    """Decoder output -> next-token distribution: log_softmax(x W + b).

    x: (batch, len, d_model) -> log-probabilities (batch, len, vocab).
    :meth:`logits` returns the scores before the softmax, for
    ``F.cross_entropy`` (which applies log_softmax itself, fused and faster) and
    for sampling with a temperature.
    """

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def logits(self, x: Tensor) -> Tensor:
        return self.proj(x)

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(self.proj(x), dim=-1)


class EncoderDecoder(nn.Module):
    """A standard encoder-decoder: memory = encode(src);
    decode(memory, tgt) -> hidden states.

    src: integer (batch, src_len); tgt: integer (batch, tgt_len), shifted right
    src_mask: bool (batch, 1, src_len); tgt_mask: bool (batch, tgt_len, tgt_len)
    returns (batch, tgt_len, d_model); ``generator`` maps it to the vocabulary.
    """

    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator

    def forward(
        self, src: Tensor, tgt: Tensor, src_mask: Tensor, tgt_mask: Tensor
    ) -> Tensor:
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        return self.encoder(self.src_embed(src), src_mask)

    def decode(
        self, memory: Tensor, src_mask: Tensor, tgt: Tensor, tgt_mask: Tensor
    ) -> Tensor:
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)


def make_model(
    src_vocab: int,
    tgt_vocab: int,
    N: int = 6,
    d_model: int = 512,
    d_ff: int = 2048,
    h: int = 8,
    dropout: float = 0.1,
) -> EncoderDecoder:
    """The paper's Transformer, the base model by default.

    The sizes are checked once, as a :class:`TransformerConfig`. Matrices get
    Glorot/Xavier-uniform initialisation, as in the Annotated Transformer; biases
    keep PyTorch's defaults and LayerNorms start as the identity.
    """
    s = TransformerConfig(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout)
    c = copy.deepcopy
    attn = MultiHeadedAttention(s.h, s.d_model, s.dropout)
    ff = PositionwiseFeedForward(s.d_model, s.d_ff, s.dropout)
    position = PositionalEncoding(s.d_model, s.dropout)
    model = EncoderDecoder(
        Encoder(EncoderLayer(s.d_model, c(attn), c(ff), s.dropout), s.N),
        Decoder(DecoderLayer(s.d_model, c(attn), c(attn), c(ff), s.dropout), s.N),
        TokenAndPosition(Embeddings(s.d_model, src_vocab), c(position)),
        TokenAndPosition(Embeddings(s.d_model, tgt_vocab), c(position)),
        Generator(s.d_model, tgt_vocab),
    )
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


@dataclass(frozen=True)
class TransformerConfig:
    """The encoder-decoder's sizes, checked once: what :class:`Transformer` is built
    from.

    src_vocab, tgt_vocab: None until the data gives them; max_len: the positional
    table's length; attn_dropout: on the attention weights (None: ``dropout``, as in
    the paper's code; 0 lets PyTorch use its fused kernels in training too).
    """

    src_vocab: int | None = None
    tgt_vocab: int | None = None
    N: int = 6
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    dropout: float = 0.1
    max_len: int = 5000
    attn_dropout: float | None = None

    # The sizes the data gives, not the run's settings.
    from_data: ClassVar[tuple[str, ...]] = ("src_vocab", "tgt_vocab")

    def __post_init__(self) -> None:
        vocabs = tuple(k for k in self.from_data if getattr(self, k) is not None)
        check_sizes(self, (*vocabs, "N", "d_ff", "max_len"))
        if self.d_model % 2 != 0 or self.d_model < 2:
            raise ValueError(
                f"d_model={self.d_model} must be a positive even number (sin/cos "
                "pairs)"
            )
        check_heads(self.h, self.d_model)


class Transformer(EncoderDecoder):
    """:func:`make_model`'s model, weight for weight and with the same state-dict
    keys, built from a :class:`TransformerConfig` with a key/value cache for
    decoding (:class:`CachedAttention`, :class:`CachedDecoder`): the model a
    translation run trains.

    Packed rows (several sentence pairs per row) also pass ``memory_mask`` (batch,
    tgt_len, src_len), which target token may read which source token (src_mask is
    then (batch, src_len, src_len)), and ``src_pos``/``tgt_pos`` (batch, len), each
    token's position within its own sentence.
    """

    def __init__(self, config: TransformerConfig) -> None:
        c, clone = config, copy.deepcopy
        if c.src_vocab is None or c.tgt_vocab is None:
            raise ValueError(
                "the config has no vocabularies: give src_vocab and tgt_vocab "
                "(dataclasses.replace(config, src_vocab=..., tgt_vocab=...))"
            )
        attn_dropout = c.dropout if c.attn_dropout is None else c.attn_dropout
        attn = CachedAttention(c.h, c.d_model, attn_dropout)
        ff = PositionwiseFeedForward(c.d_model, c.d_ff, c.dropout)
        position = PositionalEncoding(c.d_model, c.dropout, c.max_len)
        encoder_layer = EncoderLayer(c.d_model, clone(attn), clone(ff), c.dropout)
        decoder_layer = CachedDecoderLayer(
            c.d_model, clone(attn), clone(attn), clone(ff), c.dropout
        )
        super().__init__(
            Encoder(encoder_layer, c.N),
            CachedDecoder(decoder_layer, c.N),
            TokenAndPosition(Embeddings(c.d_model, c.src_vocab), clone(position)),
            TokenAndPosition(Embeddings(c.d_model, c.tgt_vocab), clone(position)),
            Generator(c.d_model, c.tgt_vocab),
        )
        self.config = config
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor,
        tgt_mask: Tensor,
        memory_mask: Tensor | None = None,
        src_pos: Tensor | None = None,
        tgt_pos: Tensor | None = None,
    ) -> Tensor:
        memory = self.encode(src, src_mask, src_pos)
        memory_mask = src_mask if memory_mask is None else memory_mask
        return self.decode(memory, memory_mask, tgt, tgt_mask, positions=tgt_pos)

    @property
    def max_len(self) -> int:
        """The longest sequence the positional table covers."""
        return self.config.max_len

    def encode(
        self, src: Tensor, src_mask: Tensor | None, positions: Tensor | None = None
    ) -> Tensor:
        """src (batch, src_len) -> memory (batch, src_len, d_model)."""
        check_source(src, src_mask, positions, self.max_len)
        offset = 0 if positions is None else positions
        return self.encoder(self.src_embed(src, offset), src_mask)

    def decode(
        self,
        memory: Tensor,
        src_mask: Tensor | None,
        tgt: Tensor,
        tgt_mask: Tensor | None,
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Hidden states of the target positions, (batch, new, d_model).

        Without a cache, tgt is the whole target prefix (batch, tgt_len) and
        tgt_mask (batch or 1, tgt_len, tgt_len). With a :class:`DecoderCache`, tgt
        holds only the new positions (batch, new); they are numbered from
        ``cache.length`` on, earlier keys and values come from the cache (which this
        call extends), and tgt_mask is (batch or 1, new, cache.length + new) or None
        (a single new token may see everything).
        src_mask: (batch, 1 or new, src_len). positions: (batch, new) for packed
        rows.
        """
        check_target(self, memory, src_mask, tgt, tgt_mask, cache, positions)
        # Read before the layers extend the cache: positions past .. past + new - 1.
        past = 0 if cache is None else cache.length
        offset = past if positions is None else positions
        x = self.tgt_embed(tgt, offset)
        return self.decoder(x, memory, src_mask, tgt_mask, cache)


def check_source(
    src: Tensor, src_mask: Tensor | None, positions: Tensor | None, max_len: int
) -> None:
    """One line for a source batch that does not fit :meth:`Transformer.encode`."""
    check_tokens(src, "src")
    batch, length = src.shape
    if src_mask is not None:
        check_mask(src_mask, batch, length, length, name="src_mask")
    check_positions(length, 0 if positions is None else positions, max_len)


def check_target(
    model: Transformer,
    memory: Tensor,
    src_mask: Tensor | None,
    tgt: Tensor,
    tgt_mask: Tensor | None,
    cache: DecoderCache | None,
    positions: Tensor | None,
) -> None:
    """One line for target inputs that do not fit :meth:`Transformer.decode`."""
    check_tokens(tgt, "tgt")
    batch, new = tgt.shape
    if memory.size(0) != batch:
        raise ValueError(
            f"tgt has batch size {batch} but memory has {memory.size(0)}"
        )
    if src_mask is not None:
        check_mask(src_mask, batch, new, memory.size(1), name="src_mask")
    layers = len(model.decoder.layers)
    if cache is not None and len(cache.layers) != layers:
        raise ValueError(
            f"the cache has {len(cache.layers)} layers but the decoder has "
            f"{layers}; build it with DecoderCache({layers})"
        )
    past = 0 if cache is None else cache.length
    if tgt_mask is not None:
        check_mask(tgt_mask, batch, new, past + new, name="tgt_mask")
    check_positions(new, past if positions is None else positions, model.max_len)


def tie_weights(
    model: EncoderDecoder, share_source: bool = False
) -> EncoderDecoder:
    """Share the target embedding table E (tgt_vocab, d_model) with the generator:
    logits = x Eᵀ + b (Vaswani et al. 2017, §3.4), tgt_vocab · d_model parameters
    fewer. ``share_source`` (one vocabulary, e.g. a joint BPE) shares it with the
    source embeddings too.
    """
    table = model.tgt_embed.embed.lut.weight  # (vocab, d_model)
    if model.generator.proj.weight.shape != table.shape:
        raise ValueError(
            f"the generator {tuple(model.generator.proj.weight.shape)} and the "
            f"target embeddings {tuple(table.shape)} must have the same shape to "
            "share weights"
        )
    model.generator.proj.weight = table
    if share_source:
        if model.src_embed.embed.lut.weight.shape != table.shape:
            raise ValueError(
                "source embeddings "
                f"{tuple(model.src_embed.embed.lut.weight.shape)} differ from the "
                f"target's {tuple(table.shape)}: share_source needs one vocabulary"
            )
        model.src_embed.embed.lut.weight = table
    return model


def count_parameters(module: nn.Module) -> int:
    """The number of numbers in ``module``'s parameters."""
    return sum(p.numel() for p in module.parameters())


def parameter_counts(model: EncoderDecoder) -> dict[str, int]:
    """Trainable parameters of each block, counted from the
    tensors, in model order."""
    counts = {
        name: count_parameters(getattr(model, name))
        for name in ("src_embed", "tgt_embed")
    }
    for name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        for i, layer in enumerate(stack.layers):
            counts[f"{name}.layers.{i}"] = count_parameters(layer)
        counts[f"{name}.norm"] = count_parameters(stack.norm)
    counts["generator"] = count_parameters(model.generator)
    return counts


def parameter_formula(
    src_vocab: int, tgt_vocab: int, N: int = 6, d_model: int = 512, d_ff: int = 2048
) -> dict[str, int]:
    """The same counts in closed form (h does not appear: heads
    split d_model, they add none).

    attention: 4 (d² + d)  (W^Q, W^K, W^V, W^O with biases)
    feed-forward: d·d_ff + d_ff + d_ff·d + d;  LayerNorm: 2d (gain and bias) encoder
    layer: attention + FFN + 2 norms; decoder layer: 2 attentions + FFN + 3 norms
    embeddings: vocab·d (sinusoids are fixed); generator: d·tgt_vocab + tgt_vocab
    """
    d = d_model
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    counts = {"src_embed": src_vocab * d, "tgt_embed": tgt_vocab * d}
    for i in range(N):
        counts[f"encoder.layers.{i}"] = attention + ffn + 2 * norm
    counts["encoder.norm"] = norm
    for i in range(N):
        counts[f"decoder.layers.{i}"] = 2 * attention + ffn + 3 * norm
    counts["decoder.norm"] = norm
    counts["generator"] = d * tgt_vocab + tgt_vocab
    return counts
