"""The bag-of-words baseline: logistic regression on the tf-idf of a review's words
and word pairs (chapter 16's yardstick for the Transformer classifiers).

Word order is thrown away except inside an n-gram: a review becomes a vector with
one entry per n-gram (``"not"``, ``"not good"``) of the training vocabulary.

- tf-idf: entry j of document d is tf(j, d) · idf(j), with tf the count of n-gram j
  in d and idf(j) = ln((1 + n) / (1 + df(j))) + 1, n training documents of which
  df(j) contain j (the "smooth" idf: an n-gram in every document keeps weight 1, a
  rare one weighs up to ln n + 1). Each row is then divided by its Euclidean norm,
  so long and short reviews are comparable.
- Logistic regression: p(positive | x) = σ(x·w + b), fitted by full-batch L-BFGS on
  the mean binary cross-entropy + (l2 / 2)·‖w‖². l2 is chosen on the validation
  reviews.

The n-grams come from the training reviews only (those with ``min_df`` or more
documents), so a validation or test review is described with the training
vocabulary, like the Transformer's.

A whole experiment (features, a model, its fit, the choice of l2 on validation,
one test, scored by :func:`~annotated_transformer.evaluation.metrics.accuracy`
like the Transformer classifiers), so it stands with the tasks, although the
runner does not train it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from annotated_transformer.evaluation.metrics import accuracy


def ngrams(tokens: Sequence[str], n: int) -> list[str]:
    """Every run of 1 to ``n`` consecutive tokens, joined by
    spaces, in order of length."""
    return [
        " ".join(tokens[i : i + k])
        for k in range(1, n + 1)
        for i in range(len(tokens) - k + 1)
    ]


@dataclass
class TfIdf:
    """n-gram -> column (``index``) and its idf weight
    (``idf``, (features,) float64)."""

    index: dict[str, int]
    idf: Tensor
    n: int

    @classmethod
    def fit(
        cls, docs: Sequence[Sequence[str]], n: int = 2, min_df: int = 2
    ) -> TfIdf:
        """The n-grams (1..n) in at least ``min_df`` of the tokenized
        ``docs``, and their idf."""
        if n < 1 or min_df < 1:
            raise ValueError(f"n={n} and min_df={min_df} must be at least 1")
        df = Counter(gram for doc in docs for gram in set(ngrams(doc, n)))
        kept = sorted(gram for gram, count in df.items() if count >= min_df)
        if not kept:
            raise ValueError(
                f"no n-gram is in {min_df} or more documents: lower min_df"
            )
        counts = torch.tensor([df[gram] for gram in kept], dtype=torch.float64)
        idf = torch.log((1 + len(docs)) / (1 + counts)) + 1
        return cls({gram: j for j, gram in enumerate(kept)}, idf, n)

    def __len__(self) -> int:
        return len(self.index)

    def transform(self, docs: Sequence[Sequence[str]]) -> Tensor:
        """Sparse (documents, features) float32 tf-idf rows of unit norm (a zero row
        for a document without a known n-gram)."""
        rows, cols, values = [], [], []
        for d, doc in enumerate(docs):
            tf = Counter(
                self.index[g] for g in ngrams(doc, self.n) if g in self.index
            )
            rows += [d] * len(tf)
            cols += list(tf)
            values += list(tf.values())
        cols_t = torch.tensor(cols, dtype=torch.long)
        values_t = torch.tensor(values, dtype=torch.float64) * self.idf[cols_t]
        rows_t = torch.tensor(rows, dtype=torch.long)
        norms = torch.zeros(len(docs), dtype=torch.float64).index_add_(
            0, rows_t, values_t**2
        )
        values_t = values_t / norms.sqrt()[rows_t]
        indices = torch.stack([rows_t, cols_t])
        shape = (len(docs), len(self))
        x = torch.sparse_coo_tensor(
            indices, values_t.float(), shape, check_invariants=False
        )
        return x.coalesce()


@dataclass
class LogisticRegression:
    """p(positive | x) = σ(x·w + b). w: (features,), b: a scalar."""

    w: Tensor
    b: Tensor

    @classmethod
    def fit(
        cls, x: Tensor, y: Tensor, l2: float, max_iter: int = 200
    ) -> LogisticRegression:
        """Minimise mean BCE(σ(x·w + b), y) + (l2 / 2)·‖w‖² by L-BFGS (x: (n,
        features), sparse or dense; y: (n,) 0 or 1)."""
        if l2 < 0:
            raise ValueError(f"l2={l2} must be >= 0")
        w = torch.zeros(x.shape[1], 1, requires_grad=True)
        b = torch.zeros(1, requires_grad=True)
        target = y.float().unsqueeze(1)
        optimizer = torch.optim.LBFGS(
            [w, b],
            max_iter=max_iter,
            tolerance_grad=1e-9,
            line_search_fn="strong_wolfe",
        )

        def objective() -> Tensor:
            optimizer.zero_grad()
            logits = torch.sparse.mm(x, w) + b if x.is_sparse else x @ w + b
            loss = (
                F.binary_cross_entropy_with_logits(logits, target)
                + l2 / 2 * (w**2).sum()
            )
            loss.backward()
            return loss

        optimizer.step(objective)
        return cls(w.detach().squeeze(1), b.detach().squeeze())

    def probabilities(self, x: Tensor) -> Tensor:
        """(n,) p(positive) of each row of ``x``."""
        w = self.w.unsqueeze(1)
        logits = torch.sparse.mm(x, w) if x.is_sparse else x @ w
        return torch.sigmoid(logits.squeeze(1) + self.b)

    def predict(self, x: Tensor) -> Tensor:
        """(n,) the likelier label of each row of ``x``: 1 where p > 0.5."""
        return (self.probabilities(x) > 0.5).long()


def baseline(
    splits: dict[str, tuple[list[list[str]], list[int]]],
    *,
    n: int = 2,
    min_df: int = 2,
    l2s: Sequence[float] = (1e-6, 3e-6, 1e-5, 3e-5),
) -> dict[str, object]:
    """Fit tf-idf on ``splits["train"]`` (tokens, labels), a logistic
    regression for each l2, keep the best on ``splits["val"]`` and score it
    once on ``splits["test"]``."""
    tfidf = TfIdf.fit(splits["train"][0], n, min_df)
    x = {name: tfidf.transform(tokens) for name, (tokens, _) in splits.items()}
    y = {name: torch.tensor(labels) for name, (_, labels) in splits.items()}
    fits = {l2: LogisticRegression.fit(x["train"], y["train"], l2) for l2 in l2s}
    val = {
        l2: accuracy(fit.predict(x["val"]), y["val"]) for l2, fit in fits.items()
    }
    best = max(val, key=val.get)  # the first of equals
    return {
        "features": len(tfidf),
        "val_accuracy": val,
        "l2": best,
        "test_accuracy": accuracy(fits[best].predict(x["test"]), y["test"]),
    }
