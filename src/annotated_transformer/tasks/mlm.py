"""Masked-language-model pretraining of the IMDb
classifier's encoder (BERT, Part V).

- Data: the classification task's
  (:class:`~annotated_transformer.tasks.classification.ReviewsTask`): the same
  validation carve-out, tokenizer and vocabulary, plus one reserved token
  ``<mask>``. Only the training reviews are read for training; their labels
  are unused. The validation reviews are only scored, and the test reviews are never
  read.
- Batches: the classifier's batches of similar-length reviews, corrupted by
  :func:`~annotated_transformer.data.masking.mask_tokens` (15 % of the ordinary
  tokens selected; 80/10/10 mask/random/keep), with a new seeded draw every epoch
  (RoBERTa's dynamic masking). The reserved tokens (``<pad>``, ``<unk>``, ...) are
  never selected nor drawn.
- Model: :class:`~annotated_transformer.models.encoder_only.MaskedLanguageModel`,
  the classifier's encoder with the tied embedding as its output layer;
  ``classify --set init=RUN`` starts from it (RUN: the run's folder, or its
  record with weights). ``mlm --set init=RUN`` pretrains
  further from all of a finished
  run's weights, under a new schedule; its epochs draw the same batches and maskings
  as that run's.
- Loss: cross-entropy at the selected positions, summed, and their count.
- Validation: loss (nats per selected token) and accuracy at the selected positions
  of the validation reviews under one fixed seeded masking; ``test`` reports the
  same numbers (there is no test set here: the IMDb test reviews are kept for the
  classifier).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.data.masking import mask_tokens
from annotated_transformer.data.vocab import MASK, SPECIALS
from annotated_transformer.evaluation import metrics
from annotated_transformer.models.encoder_only import MaskedLanguageModel
from annotated_transformer.models.eval_mode import evaluating
from annotated_transformer.tasks.base import (
    check_texts,
    epoch_generator,
    flat_settings,
    from_settings,
    setting_types,
)
from annotated_transformer.tasks.classification import PRESETS as CLASSIFY_PRESETS
from annotated_transformer.tasks.classification import (
    Reviews,
    ReviewsConfig,
    ReviewsTask,
    review_batches,
)

MASK_TEXT = "[MASK]"  # how a blank is written in the text given to ``predict``
VALIDATION_SEED = 12_345  # the one masking of the validation reviews


@dataclass(frozen=True)
class MaskedLMConfig(ReviewsConfig):
    """A pretraining run: the reviews and encoder of ``classify`` and the share
    ``mask_p`` of ordinary tokens selected for prediction."""

    mask_p: float = 0.15

    positive = (*ReviewsConfig.positive, "mask_p")
    shares = (*ReviewsConfig.shares, "mask_p")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model.cls:
            raise ValueError(
                "cls=true: the masked language model has no [CLS] vector; use false"
            )


def from_classifier(preset: str, **changes: Any) -> MaskedLMConfig:
    """``classify``'s preset ``preset`` as a pretraining run (the same
    reviews, vocabulary, encoder and optimiser), with ``changes``: so that its
    encoder fits the classifier."""
    own = setting_types(MaskedLMConfig)
    shared = {
        k: v for k, v in flat_settings(CLASSIFY_PRESETS[preset]).items() if k in own
    }
    unread = {"test_subset": None}  # pretraining never reads the test reviews
    return from_settings(MaskedLMConfig, shared | unread | changes)


PRESETS = {
    # The classify tiny preset's reviews, model and optimiser, and cpu's
    # window: a check in seconds.
    "tiny": from_classifier("tiny", window=2),
    # A laptop: ~90 minutes on two threads (~160 on one). Chapter 13's vocabulary
    # and an encoder wider and deeper than its classifier's (N 4, d_model 128,
    # against 2 and 64; chapter 13's shape guessed 26.0 % of hidden words after
    # 4,000 steps, this one 29.2 % after 5,000 and 32.1 % after 10,000, and its
    # fine-tuned classifier scored 88.50 %, 89.24 % and 89.89 %, the longest run
    # first on validation). The first block attends within ±2 tokens (window): with
    # attention over the whole review the model stayed at ~14 % of hidden words for
    # 3,000 steps, its attention uniform. About 16 passes over the training reviews,
    # no dropout (each pass hides other words); half chapter 13's peak learning rate
    # for twice its width.
    "cpu": from_classifier(
        "cpu",
        N=4,
        d_model=128,
        d_ff=512,
        window=2,
        dropout=0.0,
        lr=1e-3,
        steps=10_000,
        weight_decay=0.01,
        warmup=300,
        eval_every=1_000,
        checkpoint_every=200,  # ~6 min apart on one thread: a kill loses little
    ),
}


@dataclass
class MaskedBatch:
    """inputs: (batch, len) corrupted ids; labels: (batch, len) the original id at
    the selected positions, -100 elsewhere (``mlm.IGNORE_INDEX``)."""

    inputs: Tensor
    labels: Tensor

    def to(self, device: torch.device | str) -> MaskedBatch:
        return MaskedBatch(self.inputs.to(device), self.labels.to(device))

    def __len__(self) -> int:
        return self.inputs.shape[0]


class MaskedLM(ReviewsTask):
    """BERT's masked-LM objective on the IMDb training reviews (no labels)."""

    name = "mlm"
    title = "masked-LM pretraining of the IMDb encoder (BERT)"
    Config = MaskedLMConfig
    score = ("val_loss", "min")
    specials = (*SPECIALS, MASK)

    def masked(self, data: Reviews, seed: int, epoch: int) -> Iterator[MaskedBatch]:
        """``data``'s batches (classify's), each corrupted with a draw
        seeded by seed, epoch."""
        c, pad = self.config, self.vocab["<pad>"]
        generator = epoch_generator(seed, epoch)
        reserved = [self.vocab[token] for token in self.specials]
        for batch in review_batches(
            data, c.max_tokens, pad, seed=seed, epoch=epoch
        ):
            inputs, labels = mask_tokens(
                batch.tokens,
                mask_id=self.vocab[MASK],
                vocab_size=len(self.vocab),
                special_ids=reserved,
                p=c.mask_p,
                generator=generator,
            )
            yield MaskedBatch(inputs, labels)

    def batches(self, epoch: int) -> Iterator[MaskedBatch]:
        return self.masked(self.reviews("train"), self.config.seed, epoch)

    def check_data(self) -> None:
        """``mask_p`` must select a token to predict per training batch, on
        average: with n ordinary tokens in a batch (the mean), mask_p >= 1 / n (a
        smaller share trains on nothing)."""
        c, pad = self.config, self.vocab["<pad>"]
        reserved = torch.tensor([self.vocab[token] for token in self.specials])
        counts = [
            int((~torch.isin(batch.tokens, reserved)).sum())
            for batch in review_batches(self.reviews("train"), c.max_tokens, pad)
        ]
        mean = sum(counts) / len(counts)
        if c.mask_p * mean < 1:
            raise ValueError(
                f"mask_p={c.mask_p} selects no token to predict in a training "
                f"batch ({mean:.0f} ordinary tokens): use mask_p in "
                f"[{1 / mean:.2g}, 1)"
            )

    @cached_property
    def validation(self) -> list[MaskedBatch]:
        """The validation reviews under one fixed masking
        (the same for every run)."""
        return list(self.masked(self.reviews("val"), VALIDATION_SEED, 0))

    # --- model and loss
    def build_model(self) -> MaskedLanguageModel:
        """The model; a new run with ``init`` starts from all that run's weights
        (pretraining goes on under a new schedule)."""
        vocab, pad = len(self.vocab), self.vocab["<pad>"]
        model = MaskedLanguageModel(
            replace(self.config.model, vocab=vocab, pad=pad)
        )
        if self.pretrained is not None:
            model.load_state_dict(self.pretrained)
        return model

    def loss(self, model: nn.Module, batch: MaskedBatch) -> tuple[Tensor, Tensor]:
        """Cross-entropy summed over the selected positions, and their count."""
        selected = batch.labels >= 0  # (batch, len)
        logits = model(batch.inputs, selected).float()  # (selected, vocab)
        return F.cross_entropy(
            logits, batch.labels[selected], reduction="sum"
        ), selected.sum()

    # --- metrics
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Loss (nats per selected token) and accuracy at the
        selected validation positions."""
        device = next(model.parameters()).device
        loss, predicted, targets = 0.0, [], []
        with evaluating(model):
            for batch in self.validation:
                batch = batch.to(device)
                selected = batch.labels >= 0
                logits = model(batch.inputs, selected).float()
                target = batch.labels[selected]
                loss += F.cross_entropy(logits, target, reduction="sum").item()
                predicted.append(logits.argmax(dim=-1))
                targets.append(target)
        target = torch.cat(targets)
        return {
            "val_loss": loss / len(target),
            "val_accuracy": metrics.accuracy(torch.cat(predicted), target),
        }

    def test(self, model: nn.Module) -> dict[str, Any]:
        """The validation numbers again: pretraining keeps the
        IMDb test reviews unread."""
        return {"split": "val", **self.evaluate(model)}

    def tokens(self, text: str) -> list[str]:
        """``text``'s tokens with ``<mask>`` for each
        ``[MASK]``, cut to ``max_len``."""
        pieces = text.split(MASK_TEXT)
        tokens = [
            t for piece in pieces[:-1] for t in (*self.tokenizer(piece), MASK)
        ]
        return (tokens + self.tokenizer(pieces[-1]))[: self.config.model.max_len]

    def fill(
        self, model: nn.Module, text: str, top: int = 3
    ) -> list[list[tuple[str, float]]]:
        """The ``top`` likeliest words, with probabilities, for each
        ``[MASK]`` of ``text``."""
        ids = torch.tensor([self.vocab.encode(self.tokens(text))])
        where = ids == self.vocab[MASK]
        if not where.any():
            raise ValueError(
                f"no [MASK] in {text[:40]!r}: write [MASK] where a word is missing"
            )
        device = next(model.parameters()).device
        with evaluating(model):
            # (masks, vocab)
            logits = model(ids.to(device), where.to(device)).float().cpu()
            # words only
            logits[:, [self.vocab[token] for token in self.specials]] = -torch.inf
            probs, best = logits.softmax(dim=-1).topk(top, dim=-1)
        return [
            [(self.vocab.itos[i], p) for i, p in zip(row, prob, strict=True)]
            for row, prob in zip(best.tolist(), probs.tolist(), strict=True)
        ]

    def predict(
        self, model: nn.Module, inputs: Sequence[str], top: int = 3
    ) -> list[str]:
        """Each text's tokens with every ``[MASK]`` shown as
        ``[first|second|third]``."""
        check_texts(inputs, "fill in", "text")
        words = len(self.vocab) - len(self.specials)
        if not 1 <= top <= words:
            raise ValueError(f"--top {top}: show from 1 to {words} candidates")
        out = []
        for text in inputs:
            fills = iter(self.fill(model, text, top))
            shown = [
                "[" + "|".join(word for word, _ in next(fills)) + "]"
                if token == MASK
                else token
                for token in self.tokens(text)
            ]
            out.append(" ".join(shown))
        return out
