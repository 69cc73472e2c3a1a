"""Scores: BLEU and chrF for translation (via sacreBLEU), accuracy for
classifiers, and bits per byte for language models.

Two BLEUs, because two conventions are in use and they are not comparable:

- ``bleu``: sacreBLEU's standard corpus BLEU on detokenized, cased text (its own
  ``13a`` tokenization, exponential smoothing). Report it with its ``signature``.
- ``tokenized_bleu``: corpus BLEU on already-tokenized, lower-cased text, n-grams of
  the tokens as given (sacreBLEU with ``tokenize="none"``, ``lowercase=True``, no
  smoothing). This is what many Multi30k tutorials report (torchtext's
  ``bleu_score`` on lower-cased spaCy tokens, with its defaults: up to 4-grams,
  uniform weights, brevity penalty, no smoothing).
  Numbers from it run higher than ``bleu`` and depend on the tokenizer.

Every accuracy in the package is :func:`accuracy`, every bits-per-byte figure
:func:`bits_per_byte` (usually through the :class:`BitsPerByte` meter).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch.nn.functional as F
from sacrebleu.metrics import BLEU, CHRF
from torch import Tensor


@dataclass(frozen=True)
class Score:
    """A corpus score (0–100) and the sacreBLEU signature that
    says how it was computed."""

    name: str
    score: float
    signature: str

    def __str__(self) -> str:
        return f"{self.name} = {self.score:.2f}  ({self.signature})"


def _check(hypotheses: Sequence, references: Sequence) -> None:
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(
            f"need one reference per hypothesis and at least one pair; got "
            f"{len(hypotheses)} hypotheses and {len(references)} references"
        )


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """Standard sacreBLEU corpus BLEU of detokenized
    sentences (one reference each)."""
    _check(hypotheses, references)
    metric = BLEU()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score("BLEU", result.score, str(metric.get_signature()))


def tokenized_bleu(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]]
) -> Score:
    """Corpus BLEU of token lists, lower-cased, no smoothing (the
    Multi30k tutorials' BLEU)."""
    _check(hypotheses, references)
    metric = BLEU(tokenize="none", smooth_method="none", lowercase=True)
    hyps = [" ".join(tokens) for tokens in hypotheses]
    refs = [" ".join(tokens) for tokens in references]
    result = metric.corpus_score(hyps, [refs])
    return Score(
        "BLEU (tokenized, lower-cased)", result.score, str(metric.get_signature())
    )


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """sacreBLEU's chrF (character 6-gram F-score, β = 2) of
    detokenized sentences."""
    _check(hypotheses, references)
    metric = CHRF()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score("chrF", result.score, str(metric.get_signature()))


def accuracy(predicted: Tensor, labels: Tensor) -> float:
    """The fraction of ``predicted`` classes equal to ``labels`` (two integer
    tensors of one shape, on one device)."""
    if predicted.shape != labels.shape or predicted.numel() == 0:
        raise ValueError(
            f"need as many predictions as labels, at least one; got "
            f"{tuple(predicted.shape)} and {tuple(labels.shape)}"
        )
    return (predicted == labels).double().mean().item()


def bits_per_byte(nats: float, n_bytes: int) -> float:
    """A text's total negative log-likelihood ``nats`` (natural log, summed over
    its predictions) as bits per byte of the text: nats / (n_bytes · ln 2).

    With byte-level tokens ``n_bytes`` is the number of predictions; with
    subword tokens, the bytes the predicted tokens spell, so that models with
    different vocabularies are compared on the same text.
    """
    if n_bytes < 1:
        raise ValueError(f"n_bytes={n_bytes}: bits per byte need at least one byte")
    return nats / n_bytes / math.log(2)


class BitsPerByte:
    """Mean negative log₂-likelihood per byte, accumulated
    over a whole text in batches.

    bpb = −(1/N) Σₜ log₂ p(xₜ | x₍<ₜ₎) = (Σ cross-entropy in nats) / (N · ln 2).
    A model that is uniform over the 256 byte values scores exactly log₂ 256 = 8.
    Summed in float64 so that millions of bytes add up without drift.
    ``count`` is the number of predictions scored, ``bytes`` the bytes they spell
    (the same, unless ``update`` is told otherwise for subword tokens).
    """

    def __init__(self) -> None:
        self.nats = 0.0
        self.count = 0
        self.bytes = 0

    def update(
        self, logits: Tensor, targets: Tensor, n_bytes: int | None = None
    ) -> None:
        """logits: (..., vocab) scores of the next token; targets: (...) the
        true next tokens; n_bytes: the bytes those targets spell (default: one
        per target, byte-level tokens)."""
        if logits.shape[:-1] != targets.shape:
            raise ValueError(
                f"logits {tuple(logits.shape)} must be targets "
                f"{tuple(targets.shape)} + (vocab,)"
            )
        flat = logits.reshape(-1, logits.shape[-1]).double()
        self.nats += F.cross_entropy(
            flat, targets.reshape(-1).long(), reduction="sum"
        ).item()
        self.count += targets.numel()
        self.bytes += targets.numel() if n_bytes is None else n_bytes

    def compute(self) -> float:
        if self.count == 0:
            raise ValueError("no bytes were scored: call update() first")
        return bits_per_byte(self.nats, self.bytes)
