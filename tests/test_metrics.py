"""BLEU, chrF, bits per byte and accuracy against sacreBLEU, hand
computation and brute force."""

from __future__ import annotations

import math

import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from annotated_transformer.evaluation import metrics

HYPS = [
    "A man in a blue shirt is standing on a ladder.",
    "Two dogs play in the snow!",
]
REFS = [
    "A man in a blue shirt stands on a ladder cleaning a window.",
    "Two dogs play in snow.",
]


def test_bleu_and_chrf_agree_with_sacrebleu():
    score = metrics.bleu(HYPS, REFS)
    assert score.score == pytest.approx(
        sacrebleu.corpus_bleu(HYPS, [REFS]).score, abs=1e-9
    )
    assert score.signature.startswith(
        "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp"
    )
    assert score.signature in str(score)
    chrf = metrics.chrf(HYPS, REFS)
    assert chrf.score == pytest.approx(
        sacrebleu.corpus_chrf(HYPS, [REFS]).score, abs=1e-9
    )


def test_tokenized_bleu_by_hand():
    hyp = ["The", "cat", "sat", "on", "the", "mat"]
    ref = ["the", "cat", "sat", "on", "a", "mat"]
    # clipped n-gram precisions 5/6, 3/5, 2/4, 1/3; equal
    # lengths, so no brevity penalty
    expected = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    score = metrics.tokenized_bleu([hyp], [ref])
    assert score.score == pytest.approx(expected, abs=1e-9)
    assert "case:lc" in score.signature and "tok:none" in score.signature
    # 4 of 6 reference tokens, all n-grams right: only the
    # brevity penalty exp(1 - 6/4)
    short = metrics.tokenized_bleu([hyp[:4]], [ref])
    assert short.score == pytest.approx(100 * math.exp(1 - 6 / 4), abs=1e-9)
    # no matching 4-gram and no smoothing: 0, as torchtext's bleu_score gives
    assert (
        metrics.tokenized_bleu([["the", "mat", "cat", "sat"]], [ref]).score == 0.0
    )


def test_mismatched_corpus_sizes():
    with pytest.raises(ValueError, match="2 hypotheses and 1 references"):
        metrics.bleu(HYPS, REFS[:1])
    with pytest.raises(ValueError, match="at least one"):
        metrics.chrf([], [])


def one_batch_bits_per_byte(logits: torch.Tensor, targets: torch.Tensor) -> float:
    meter = metrics.BitsPerByte()
    meter.update(logits, targets)
    return meter.compute()


def test_uniform_model_scores_eight_bits_per_byte():
    targets = torch.randint(
        256, (4, 33), generator=torch.Generator().manual_seed(0)
    )
    assert one_batch_bits_per_byte(
        torch.zeros(4, 33, 256), targets
    ) == pytest.approx(8.0, abs=1e-12)
    # shifting all logits by a constant changes nothing
    assert one_batch_bits_per_byte(
        torch.full((4, 33, 256), 3.5), targets
    ) == pytest.approx(8.0)


def test_bits_per_byte_equals_brute_force_over_batches():
    text = b"to be or not to be"
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(len(text) - 1, 256, generator=generator)
    targets = torch.tensor(list(text[1:]))
    brute = 0.0
    for row, target in zip(logits.tolist(), text[1:], strict=True):
        total = sum(math.exp(v) for v in row)
        brute -= math.log2(math.exp(row[target]) / total)
    brute /= len(text) - 1
    meter = metrics.BitsPerByte()
    meter.update(
        logits[:5], targets[:5]
    )  # batches of unequal size: a mean of means is wrong
    meter.update(logits[5:], targets[5:])
    assert meter.compute() == pytest.approx(brute, rel=1e-6)
    assert one_batch_bits_per_byte(logits, targets) == pytest.approx(
        brute, rel=1e-6
    )
    with pytest.raises(ValueError, match="targets"):
        meter.update(logits, targets[:-1])
    with pytest.raises(ValueError, match="update"):
        metrics.BitsPerByte().compute()


def test_subword_tokens_are_scored_per_byte_they_spell():
    generator = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 5, 40, generator=generator)
    targets = torch.randint(40, (2, 5), generator=generator)
    meter = metrics.BitsPerByte()
    meter.update(logits, targets, n_bytes=23)  # 10 tokens spelling 23 bytes
    nats = F.cross_entropy(logits.reshape(-1, 40).double(), targets.reshape(-1))
    assert (meter.count, meter.bytes) == (10, 23)
    assert meter.compute() == pytest.approx(10 * nats.item() / 23 / math.log(2))
    assert metrics.bits_per_byte(23 * math.log(2), 23) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least one byte"):
        metrics.bits_per_byte(1.0, 0)


def test_accuracy_counts_equal_predictions():
    predicted = torch.tensor([[1, 0, 2], [2, 2, 0]])
    labels = torch.tensor([[1, 1, 2], [0, 2, 0]])
    assert metrics.accuracy(predicted, labels) == pytest.approx(4 / 6)
    assert metrics.accuracy(labels, labels) == 1.0
    with pytest.raises(ValueError, match="as many predictions as labels"):
        metrics.accuracy(predicted[0], labels)
    with pytest.raises(ValueError, match="at least one"):
        metrics.accuracy(predicted[:0], labels[:0])
