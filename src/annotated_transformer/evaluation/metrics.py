"""Scores: BLEU and chrF for translation (via sacreBLEU), and bits per byte.

Two BLEUs, because two conventions are in use and they are not comparable:

- ``bleu``: sacreBLEU's standard corpus BLEU on detokenized, cased text (its own
  ``13a`` tokenization, exponential smoothing). Report it with its ``signature``.
- ``tokenized_bleu``: corpus BLEU on already-tokenized, lower-cased text, n-grams of
  the tokens as given (sacreBLEU with ``tokenize="none"``, ``lowercase=True``, no
  smoothing). This is what many Multi30k tutorials report (torchtext's
  ``bleu_score`` on lower-cased spaCy tokens, with its defaults: up to 4-grams,
  uniform weights, brevity penalty, no smoothing).
  Numbers from it run higher than ``bleu`` and depend on the tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU, CHRF


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


class BitsPerByte:
    """Mean negative log₂-likelihood per byte, accumulated
    over a whole text in batches.

    bpb = −(1/N) Σₜ log₂ p(xₜ | x₍<ₜ₎) = (Σ cross-entropy in nats) / (N · ln 2).
    A model that is uniform over the 256 byte values scores exactly log₂ 256 = 8.
    Summed in float64 so that millions of bytes add up without drift.
    """

    def __init__(self) -> None:
        self.nats = 0.0
        self.count = 0

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """logits: (..., vocab) scores of the next byte; targets:
        (...) the true next bytes."""
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

    def compute(self) -> float:
        if self.count == 0:
            raise ValueError("no bytes were scored: call update() first")
        return self.nats / self.count / math.log(2)
