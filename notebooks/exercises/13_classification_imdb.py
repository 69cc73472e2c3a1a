"""Chapter 13 exercises (Sentiment classification on IMDb): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=13
or  python -m annotated_transformer.exercises 13
"""

from __future__ import annotations

from torch import Tensor


def masked_mean(x: Tensor, real: Tensor) -> Tensor:
    """The mean of each sequence's real positions.

    x: (b, n, d); real: bool (b, n), False at padding. returns (b, d)
    """
    raise NotImplementedError


def head_and_tail(ids: list[int], max_len: int, tail: int) -> list[int]:
    """A review cut to ``max_len`` tokens: its first max_len − tail tokens and its
    last ``tail`` ones. A review that fits stays whole."""
    raise NotImplementedError


def accuracy_and_standard_error(
    predictions: Tensor,
    labels: Tensor,
) -> tuple[float, float]:
    """Accuracy of class ids (n,) against labels (n,), and its standard error.

    returns (accuracy, standard error), both fractions (0.9, not 90)
    """
    raise NotImplementedError
