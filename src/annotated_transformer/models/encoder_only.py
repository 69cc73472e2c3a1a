"""Encoder-only models: a review classifier and BERT's masked
language model, sharing one encoder whose weights pass from the
second to the first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import torch
from torch import Tensor, nn

from annotated_transformer.blocks.attention import check_heads
from annotated_transformer.blocks.embeddings import Embeddings
from annotated_transformer.blocks.layers import TransformerBlock
from annotated_transformer.blocks.masks import check_tokens, window_mask
from annotated_transformer.blocks.positional import PositionalEmbedding
from annotated_transformer.models.decoder_only import check_sizes


@dataclass(frozen=True)
class EncoderConfig:
    """An encoder-only model's sizes, checked once: the one object the model and
    every block are built from (``EncoderClassifier(config)``).

    pad: the padding id, ignored by attention and pooling; max_len: the longest
        token sequence (the position table has max_len rows, +1 for [CLS]);
        cls: pool at a learned [CLS] vector, not the mean over the real tokens.
    attn_dropout: dropout on the attention weights, apart from ``dropout`` as
        any value > 0 takes ``scaled_dot_product_attention`` off its fast kernel.
    window: if > 0, the first block attends only to tokens at most ``window``
        positions away, the later blocks to every token. Learned positions start
        random, so a model must discover that neighbours matter; the window builds
        that in (without it masked-LM attention stays uniform).
    """

    vocab: int = 256
    n_classes: int = 2
    d_model: int = 128
    h: int = 8
    N: int = 6
    max_len: int = 512
    d_ff: int = 512
    dropout: float = 0.1
    attn_dropout: float = 0.0
    pad: int = 0
    cls: bool = False
    window: int = 0

    causal: ClassVar[bool] = False
    # The sizes the data gives, not the run's settings.
    from_data: ClassVar[tuple[str, ...]] = ("vocab", "n_classes", "pad")

    def __post_init__(self) -> None:
        check_sizes(self, ("vocab", "n_classes", "N", "max_len", "d_ff"))
        check_heads(self.h, self.d_model)
        if self.window < 0:
            raise ValueError(f"window={self.window} must be >= 0 (0: no window)")
        if not 0 <= self.pad < self.vocab:
            raise ValueError(
                f"pad={self.pad} is not an id of the vocabulary [0, {self.vocab})"
            )


class EncoderClassifier(nn.Module):
    """An encoder-only classifier: embed, N blocks, pool, one linear layer.

    tokens (batch, len)
    -> x = Embeddings(tokens) + P[positions]  (batch, len, d_model)
    -> N × TransformerBlock (post-norm self-attention over the real tokens only)
    -> pool: the mean over the real tokens, or with ``cls=True`` the output at a
       learned [CLS] vector put in front of every sequence (BERT's choice)
    -> logits = pooled W + b (batch, n_classes)
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        c = self.config = config
        self.window, self.pad, self.max_len = c.window, c.pad, c.max_len
        self.embed = Embeddings(c.d_model, c.vocab)
        # Embeddings multiplies by √d_model: rows of std 1/√d_model put every
        # token vector on the scale of a learned position vector (std 1,
        # nn.Embedding's default).
        nn.init.normal_(self.embed.lut.weight, std=c.d_model**-0.5)
        self.cls = (
            nn.Parameter(torch.randn(1, 1, c.d_model) / c.d_model**0.5)
            if c.cls
            else None
        )
        self.position = PositionalEmbedding(
            c.d_model, c.max_len + int(c.cls), c.dropout
        )
        self.blocks = nn.ModuleList(TransformerBlock(c) for _ in range(c.N))
        self.to_classes = self.output_layer(c)

    def output_layer(self, c: EncoderConfig) -> nn.Linear:
        """The last layer: pooled vector (batch, d_model) -> logits (batch,
        n_classes)."""
        return nn.Linear(c.d_model, c.n_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: integer (batch, len), padded with
        ``pad`` -> logits (batch, n_classes)."""
        x, real = self.encode(tokens)
        if self.cls is not None:
            # (batch, d_model): the [CLS] position gathers the sequence
            pooled = x[:, 0]
        else:
            # (batch, len, 1): 1 real, 0 padding
            weights = real.unsqueeze(-1).to(x.dtype)
            # the mean over the real tokens, (batch, d_model)
            pooled = (x * weights).sum(dim=1) / weights.sum(dim=1)
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
        # (batch, len); a row of padding only would give NaN
        real = tokens != self.pad
        x = self.embed(tokens)  # (batch, len, d_model)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(batch, 1, -1).to(x.dtype), x], dim=1)
            # [CLS] is never padding
            real = torch.cat([real.new_ones(batch, 1), real], dim=1)
        x = self.position(x)
        mask = real.unsqueeze(1)  # (batch, 1, len): every query sees the real keys
        for i, block in enumerate(self.blocks):
            if i == 0 and self.window:  # (batch, len, len): the real keys nearby
                x = block(x, mask & window_mask(x.shape[1], self.window, x.device))
            else:
                x = block(x, mask)
        return x, real


class MaskedLanguageModel(EncoderClassifier):
    """BERT's pretraining model: the classifier's encoder, whose "classes" are the
    vocabulary.

    tokens (batch, len) -> x = encode(tokens) (batch, len, d_model)
    -> logits = x Eᵀ + b (batch, len, vocab), one distribution per position;
    with ``where`` (batch, len) bool, only at those positions, (selected, vocab):
    the output layer costs more than the encoder, and the loss needs it at ~15 %
    of the tokens.

    E is the input embedding's matrix (tied, as in BERT and the paper's §3.4), so
    the model adds only a bias to the encoder; every other weight has its name and
    shape in :class:`EncoderClassifier`, so ``embed``, ``position`` and ``blocks``
    load into a classifier of the same sizes (:func:`load_encoder`).
    """

    def __init__(self, config: EncoderConfig) -> None:
        if config.cls:
            raise ValueError(
                "cls=True: a masked language model predicts every token; use False"
            )
        super().__init__(replace(config, n_classes=config.vocab))

    def output_layer(self, c: EncoderConfig) -> nn.Linear:
        """x Eᵀ + b: the embedding's matrix E (vocab, d_model) itself, and a
        bias of its own."""
        tied = nn.Linear(c.d_model, c.vocab)
        tied.weight = self.embed.lut.weight
        return tied

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
