"""The Transformer models: encoder-decoder (Vaswani et al. 2017),
decoder-only, encoder-only.

- :class:`EncoderDecoder`: encode the source once, decode the target (all at once in
  training, a few new positions at a time with a cache when generating);
- :class:`Generator`: the final linear layer and softmax over the target vocabulary;
- :func:`make_model`: build the whole model from
  hyper-parameters, Glorot-initialised;
- :func:`tie_weights`: share the target embeddings with the
  generator (and the source);
- :func:`parameter_counts` (measured per block) and
  :func:`parameter_formula` (closed form).
- :class:`DecoderLM`: decoder-only (GPT-style) next-byte model (Part V, generation);
- :class:`EncoderClassifier`: encoder-only classifier with mean
  or [CLS] pooling (Part V).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.attention import MultiHeadedAttention
from annotated_transformer.embeddings import Embeddings, TokenAndPosition
from annotated_transformer.kv_cache import DecoderCache, KVCache
from annotated_transformer.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    PositionwiseFeedForward,
    TransformerBlock,
)
from annotated_transformer.masks import (
    check_mask,
    check_tokens,
    left_padding_mask,
    left_padding_positions,
    window_mask,
)
from annotated_transformer.positional import PositionalEmbedding, PositionalEncoding


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

    src: integer (batch, src_len); tgt: integer (batch,
        tgt_len), the shifted-right target
    src_mask: bool (batch, 1, src_len)
        (:func:`~annotated_transformer.masks.padding_mask`)
    tgt_mask: bool (batch, tgt_len, tgt_len)
        (:func:`~annotated_transformer.masks.make_std_mask`) forward returns (batch,
        tgt_len, d_model); apply ``generator`` for the vocabulary.

    Packed rows (several sentence pairs per row,
    :class:`~annotated_transformer.training.
    PackedBatch`) also pass ``memory_mask`` (batch, tgt_len,
    src_len), which target token may
    read which source token (src_mask then is the encoder's (batch, src_len,
    src_len)), and ``src_pos``/``tgt_pos`` (batch, len), each token's
    position within its own sentence.
    """

    def __init__(
        self,
        encoder: Encoder,
        decoder: Decoder,
        src_embed: nn.Module,
        tgt_embed: nn.Module,
        generator: Generator,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator

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

    def encode(
        self, src: Tensor, src_mask: Tensor | None, positions: Tensor | None = None
    ) -> Tensor:
        """src (batch, src_len) -> memory (batch, src_len, d_model)."""
        check_tokens(src, "src")
        if src_mask is not None:
            check_mask(
                src_mask, src.size(0), src.size(1), src.size(1), name="src_mask"
            )
        return self.encoder(
            self.src_embed(src, 0 if positions is None else positions), src_mask
        )

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
        src_mask: (batch, 1 or new, src_len). positions:
            (batch, new) for packed rows.
        """
        check_tokens(tgt, "tgt")
        batch, src_len = memory.size(0), memory.size(1)
        if tgt.size(0) != batch:
            raise ValueError(
                f"tgt has batch size {tgt.size(0)} but memory has {batch}"
            )
        if src_mask is not None:
            check_mask(src_mask, batch, tgt.size(1), src_len, name="src_mask")
        past = (
            0 if cache is None else cache.length
        )  # read before the layers extend the cache
        if tgt_mask is not None:
            check_mask(
                tgt_mask, batch, tgt.size(1), past + tgt.size(1), name="tgt_mask"
            )
        x = self.tgt_embed(
            tgt, past if positions is None else positions
        )  # past .. past+new-1
        return self.decoder(x, memory, src_mask, tgt_mask, cache)


def make_model(
    src_vocab: int,
    tgt_vocab: int,
    N: int = 6,
    d_model: int = 512,
    d_ff: int = 2048,
    h: int = 8,
    dropout: float = 0.1,
    max_len: int = 5000,
    attn_dropout: float | None = None,
) -> EncoderDecoder:
    """The Transformer of the paper (base model by default: N=6,
    d_model=512, d_ff=2048, h=8).

    ``attn_dropout``: dropout on the attention weights (None: ``dropout``, as in the
    paper's code); 0 lets PyTorch use its fused attention kernels in training too.

    Matrices get Glorot/Xavier-uniform initialisation, as in the Annotated
    Transformer; biases keep PyTorch's defaults and LayerNorms start as the
    identity.
    """
    positive = {
        "src_vocab": src_vocab,
        "tgt_vocab": tgt_vocab,
        "N": N,
        "d_ff": d_ff,
    }
    for name, value in (positive | {"max_len": max_len}).items():
        if value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if d_model % 2 != 0 or d_model < 2:
        raise ValueError(
            f"d_model={d_model} must be a positive even number (sin/cos pairs)"
        )
    c = copy.deepcopy
    attn_p = dropout if attn_dropout is None else attn_dropout
    attn = MultiHeadedAttention(h, d_model, attn_p)  # raises if d_model % h != 0
    ff = PositionwiseFeedForward(d_model, d_ff, dropout)
    position = PositionalEncoding(d_model, dropout, max_len)
    model = EncoderDecoder(
        Encoder(EncoderLayer(d_model, c(attn), c(ff), dropout), N),
        Decoder(DecoderLayer(d_model, c(attn), c(attn), c(ff), dropout), N),
        TokenAndPosition(Embeddings(d_model, src_vocab), c(position)),
        TokenAndPosition(Embeddings(d_model, tgt_vocab), c(position)),
        Generator(d_model, tgt_vocab),
    )
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


def tie_weights(
    model: EncoderDecoder, share_source: bool = False
) -> EncoderDecoder:
    """Share the target embedding matrix with the generator
    (Vaswani et al. 2017, §3.4).

    The generator's logits become x · Eᵀ + b with E the (tgt_vocab, d_model)
    embedding table, saving tgt_vocab × d_model parameters. With ``share_source``
    (one vocabulary for source and target, e.g. a joint BPE) the source embeddings
    use the same table too.
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


def check_lm_input(
    x: Tensor,
    cache: list[KVCache] | None,
    n_blocks: int,
    max_len: int,
    mask: Tensor | None = None,
) -> int:
    """Raise a ValueError unless ``x`` (batch, len) fits a decoder-only LM; return
    the number of cached positions (the position of x's first token).

    The model has ``n_blocks`` blocks and a context of ``max_len`` positions;
    ``cache`` must hold one :class:`KVCache` per block; ``mask``, if given, is bool
    (batch, past + len). Shapes only: the ids' values are checked where they enter
    (``embeddings.check_ids``), not in every forward pass.
    """
    check_tokens(x, "x")
    if cache is not None and len(cache) != n_blocks:
        raise ValueError(
            f"the cache has {len(cache)} layers but the model has {n_blocks} "
            "blocks; build it with model.new_cache()"
        )
    past = 0 if cache is None else cache[0].length
    if x.size(1) < 1:
        raise ValueError(
            "x has no positions: give at least one byte (batch, len >= 1)"
        )
    if past + x.size(1) > max_len:
        raise ValueError(
            f"{past} cached + {x.size(1)} new = {past + x.size(1)} positions "
            f"exceed the model's context of max_len={max_len}; feed at most the "
            f"last {max_len} bytes (sampling.sample crops the context for you)"
        )
    shape = (x.size(0), past + x.size(1))
    if mask is not None and (mask.dtype, tuple(mask.shape)) != (torch.bool, shape):
        raise ValueError(
            f"mask must be bool (batch, cached + new) = {shape}, True at tokens "
            f"and False at left padding; got {mask.dtype} {tuple(mask.shape)}"
        )
    return past


class DecoderLM(nn.Module):
    """A decoder-only (GPT-style) language model over bytes: predict each next byte.

    logits = W · blocks(embed(x) + P[positions]) + b, with ``N`` causal post-norm
    :class:`~annotated_transformer.layers.TransformerBlock` s (Bloem's ``former``;
    GPT without the encoder or the source attention of the paper's decoder).

    x: integer (batch, len), ids in [0, vocab); positions start at
        ``cache[0].length`` (0 without a cache) and must stay below ``max_len``, the
        longest context it was built for.
    cache: from :meth:`new_cache`, one :class:`KVCache` per block; then x holds only
        the new bytes and the cache is extended in place.
    mask: bool (batch, past + len), False at the padding on the left of shorter
    prompts: never attended to, and each row's positions start at its first token.
    returns logits (batch, len, vocab): scores of the byte at
        each position's next position
    """

    def __init__(
        self,
        vocab: int = 256,
        d_model: int = 128,
        h: int = 4,
        N: int = 4,
        max_len: int = 256,
        d_ff: int = 512,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        for name, value in (("vocab", vocab), ("N", N), ("max_len", max_len)):
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        self.vocab, self.max_len = vocab, max_len
        # Learned positions, unscaled token vectors: both start
        # N(0, 1), on the same scale.
        self.embed = TokenAndPosition(
            nn.Embedding(vocab, d_model),
            PositionalEmbedding(d_model, max_len, dropout),
        )
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, h, d_ff, dropout, causal=True)
            for _ in range(N)
        )
        self.to_logits = nn.Linear(d_model, vocab)

    def new_cache(self) -> list[KVCache]:
        """An empty key/value cache: one growing :class:`KVCache` per block."""
        return [KVCache() for _ in self.blocks]

    def forward(
        self,
        x: Tensor,
        cache: list[KVCache] | None = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        past = check_lm_input(x, cache, len(self.blocks), self.max_len, mask)
        if mask is None:
            h, keys = self.embed(x, past), None  # (batch, len, d_model)
        else:  # left padding: each row's own positions, padded keys hidden
            h = self.embed(x, left_padding_positions(mask, x.size(1)))
            keys = left_padding_mask(mask, x.size(1))  # (batch, len, past + len)
        for i, block in enumerate(self.blocks):
            h = block(h, keys, cache=None if cache is None else cache[i])
        return self.to_logits(h)  # (batch, len, vocab)


class EncoderClassifier(nn.Module):
    """An encoder-only classifier (Bloem's ``former``): embed, N
    blocks, pool, one linear layer.

    tokens (batch, len) -> x = Embeddings(tokens) + P[positions]
        (batch, len, d_model)
    -> N × TransformerBlock (post-norm self-attention over the real tokens only)
    -> pool: the mean over the real tokens (padding excluded), or with
       ``cls=True`` the output at a learned [CLS] vector put in front of
       every sequence (BERT's choice)
    -> logits = pooled W + b
        (batch, n_classes); softmax gives the class probabilities.

    pad: the padding id (ignored by attention and pooling); max_len: the longest
        token sequence accepted (the learned position table has max_len, +1 for
        [CLS], rows); attn_dropout: dropout on the attention weights, separate from
        ``dropout`` elsewhere because any value > 0 takes
        ``scaled_dot_product_attention`` off its fast kernel (see the ``classify``
        presets).
    window: if > 0, the first block attends only to tokens at most ``window``
        positions away (``masks.window_mask``, the local pattern of sparse
        attention); the later blocks see every token. Learned positions start
        random, so a model must discover that neighbours matter; the window builds
        that in (chapter 16: without it masked-LM attention stays uniform).
    """

    def __init__(
        self,
        vocab: int,
        n_classes: int = 2,
        *,
        d_model: int = 128,
        h: int = 8,
        N: int = 6,
        max_len: int = 512,
        d_ff: int = 512,
        dropout: float = 0.1,
        attn_dropout: float = 0.0,
        pad: int = 0,
        cls: bool = False,
        window: int = 0,
    ) -> None:
        super().__init__()
        positive = {
            "vocab": vocab,
            "n_classes": n_classes,
            "N": N,
            "max_len": max_len,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if window < 0:
            raise ValueError(f"window={window} must be >= 0 (0: no window)")
        self.window = window
        if not 0 <= pad < vocab:
            raise ValueError(
                f"pad={pad} is not an id of the vocabulary [0, {vocab})"
            )
        self.pad, self.max_len = pad, max_len
        self.embed = Embeddings(d_model, vocab)
        # Embeddings multiplies by √d_model: rows of std 1/√d_model put every
        # token vector on the scale of a learned position vector (std 1,
        # nn.Embedding's default).
        nn.init.normal_(self.embed.lut.weight, std=d_model**-0.5)
        self.cls = (
            nn.Parameter(torch.randn(1, 1, d_model) / d_model**0.5) if cls else None
        )
        self.position = PositionalEmbedding(d_model, max_len + int(cls), dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, h, d_ff, dropout) for _ in range(N)
        )
        for block in self.blocks:
            block.attention.dropout.p = attn_dropout
        self.to_classes = nn.Linear(d_model, n_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: integer (batch, len), padded with
        ``pad`` -> logits (batch, n_classes)."""
        x, real = self.encode(tokens)
        if self.cls is not None:
            pooled = x[
                :, 0
            ]  # (batch, d_model): the [CLS] position gathers the sequence
        else:
            weights = real.unsqueeze(-1).to(
                x.dtype
            )  # (batch, len, 1): 1 real, 0 padding
            pooled = (x * weights).sum(dim=1) / weights.sum(
                dim=1
            )  # masked mean (batch, d)
        return self.to_classes(pooled)

    def encode(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """tokens (batch, len) -> a vector per position (batch, len', d_model)
        and which positions are real tokens (batch, len'); len' = len + 1 with a
        [CLS] vector in front."""
        check_tokens(tokens)
        batch, length = tokens.shape
        if length > self.max_len:
            raise ValueError(
                f"sequences of {length} tokens are longer than "
                f"max_len={self.max_len}: truncate them (imdb.encode does) or "
                "build the model with a larger max_len"
            )
        real = (
            tokens != self.pad
        )  # (batch, len); a row of padding only would give NaN
        x = self.embed(tokens)  # (batch, len, d_model)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(batch, 1, -1).to(x.dtype), x], dim=1)
            real = torch.cat(
                [real.new_ones(batch, 1), real], dim=1
            )  # [CLS] is never padding
        x = self.position(x)
        mask = real.unsqueeze(1)  # (batch, 1, len): every query sees the real keys
        for i, block in enumerate(self.blocks):
            if i == 0 and self.window:  # (batch, len, len): the real keys nearby
                x = block(x, mask & window_mask(x.shape[1], self.window, x.device))
            else:
                x = block(x, mask)
        return x, real


class MaskedLanguageModel(EncoderClassifier):
    """BERT's pretraining model: the classifier's encoder, whose
    "classes" are the vocabulary.

    tokens (batch, len) -> x = encode(tokens)
        (batch, len, d_model), as the classifier's
    -> logits = x W_embᵀ + b
        (batch, len, vocab): one distribution over tokens per position.

    The output matrix is the input embedding's (tied, as in BERT and the paper's
    §3.4), so the model adds only a bias to the encoder. Every other weight has the
    name and shape it has in :class:`EncoderClassifier`: ``embed``, ``position`` and
    ``blocks`` load into a classifier of the same sizes (``load_encoder``).
    ``where`` (batch, len) bool computes the logits at those positions only,
    (selected, vocab): the output layer, vocab × d_model multiply-adds per position,
    costs more than the encoder, and the loss needs it at ~15 % of the tokens.
    """

    def __init__(self, vocab: int, **sizes: Any) -> None:
        if sizes.get("cls"):
            raise ValueError(
                "cls=True: a masked language model predicts every token; use False"
            )
        super().__init__(vocab, vocab, **sizes)
        self.to_classes.weight = self.embed.lut.weight  # (vocab, d_model), shared

    def forward(self, tokens: Tensor, where: Tensor | None = None) -> Tensor:
        """tokens: integer (batch, len) -> logits (batch, len,
        vocab), or (selected, vocab)."""
        x, _ = self.encode(tokens)
        return self.to_classes(x if where is None else x[where])


ENCODER = ("embed.", "position.", "blocks.")
"""The weights a classifier takes from a pretrained masked language
model (not ``to_classes``)."""


def load_encoder(
    classifier: EncoderClassifier, weights: dict[str, Tensor]
) -> list[str]:
    """Copy the encoder's weights (``ENCODER`` prefixes) of a model's
    ``weights`` into ``classifier``; returns the names copied. Shapes must match
    (else a RuntimeError)."""
    encoder = {k: v for k, v in weights.items() if k.startswith(ENCODER)}
    missing, _ = classifier.load_state_dict(encoder, strict=False)
    if [k for k in missing if k.startswith(ENCODER)]:
        raise RuntimeError(f"the weights lack encoder tensors {missing[:3]}")
    return sorted(encoder)
