"""The bag-of-words baseline against hand computations: tf-idf by its
formula on a toy corpus, and logistic regression against Newton's method
written out in float64."""

from __future__ import annotations

import math

import pytest
import torch

from annotated_transformer.tasks.bag_of_words import (
    LogisticRegression,
    TfIdf,
    baseline,
    ngrams,
)


def test_ngrams_lists_words_then_word_pairs():
    assert ngrams(["not", "good", "film"], 2) == [
        "not",
        "good",
        "film",
        "not good",
        "good film",
    ]
    assert ngrams(["one"], 3) == ["one"]


def test_tfidf_matches_the_formula_by_hand():
    docs = [["a", "b", "a"], ["b", "c"], ["a", "d"]]
    tfidf = TfIdf.fit(docs, n=1, min_df=1)
    assert sorted(tfidf.index) == ["a", "b", "c", "d"]
    idf = {"a": math.log(4 / 3) + 1, "b": math.log(4 / 3) + 1}
    idf |= {"c": math.log(4 / 2) + 1, "d": math.log(4 / 2) + 1}
    raw = [
        {"a": 2 * idf["a"], "b": idf["b"]},
        {"b": idf["b"], "c": idf["c"]},
        {"a": idf["a"]},
    ]
    raw[2]["d"] = idf["d"]
    unseen = [["zzz", "a", "a"]]  # an unknown word counts for nothing
    raw.append({"a": 2 * idf["a"]})
    got = tfidf.transform(docs + unseen).to_dense()
    for d, row in enumerate(raw):
        norm = math.sqrt(sum(v * v for v in row.values()))
        for word, j in tfidf.index.items():
            assert got[d, j].item() == pytest.approx(
                row.get(word, 0.0) / norm, rel=1e-6
            )


def test_min_df_keeps_the_ngrams_of_enough_documents():
    docs = [["not", "good"], ["not", "good", "at", "all"], ["good"]]
    tfidf = TfIdf.fit(docs, n=2, min_df=2)
    assert sorted(tfidf.index) == ["good", "not", "not good"]
    with pytest.raises(ValueError, match="lower min_df"):
        TfIdf.fit(docs, n=1, min_df=4)


def newton(x: torch.Tensor, y: torch.Tensor, l2: float) -> torch.Tensor:
    """[w, b] minimising mean BCE + l2/2 ‖w‖², by Newton's method in
    float64 (b unpenalised)."""
    n, f = x.shape
    z = torch.cat([x, torch.ones(n, 1)], dim=1).double()
    penalty = torch.diag(torch.tensor([l2] * f + [0.0], dtype=torch.float64))
    theta = torch.zeros(f + 1, dtype=torch.float64)
    for _ in range(50):
        p = torch.sigmoid(z @ theta)
        grad = z.T @ (p - y.double()) / n + penalty @ theta
        hessian = z.T @ (z * (p * (1 - p)).unsqueeze(1)) / n + penalty
        theta = theta - torch.linalg.solve(hessian, grad)
    return theta


def test_logistic_regression_reaches_newtons_optimum_dense_and_sparse():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=generator)
    y = (
        x[:, 0] - 0.5 * x[:, 1] + 0.8 * torch.randn(200, generator=generator) > 0.3
    ).long()
    want = newton(x, y, l2=0.05)
    for features in (x, x.to_sparse()):
        fit = LogisticRegression.fit(features, y, l2=0.05)
        assert torch.cat([fit.w, fit.b.reshape(1)]).double() == pytest.approx(
            want, abs=1e-4
        )
    p = torch.sigmoid(x.double() @ want[:5] + want[5])
    assert fit.probabilities(x).double() == pytest.approx(p, abs=1e-4)
    assert torch.equal(fit.predict(x), (p > 0.5).long())


def test_the_baseline_picks_l2_on_validation_and_scores_test_once():
    pos, neg = ["a", "great", "film"], ["a", "dull", "film"]
    splits = {
        "train": ([pos, neg] * 5, [1, 0] * 5),
        "val": ([neg, pos], [0, 1]),
        "test": ([pos, neg, neg], [1, 0, 1]),
    }
    result = baseline(splits, n=1, min_df=1, l2s=(1e-3, 1.0))
    assert result["features"] == 4 and result["val_accuracy"] == {
        1e-3: 1.0,
        1.0: 1.0,
    }
    assert result["l2"] == 1e-3 and result["test_accuracy"] == pytest.approx(2 / 3)
