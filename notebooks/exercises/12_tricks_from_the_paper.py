"""Chapter 12 exercises (Tricks from the paper): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=12
or  python -m annotated_transformer.exercises 12
"""

from __future__ import annotations

from torch import Tensor


def average_state_dicts(states: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Element-wise mean of the state dicts of one model (same names and shapes).

    returns a new dict, each tensor in its input dtype; the inputs stay unchanged
    """
    raise NotImplementedError


def best_hypothesis(
    hypotheses: list[tuple[list[int], float]], alpha: float
) -> tuple[list[int], float]:
    """The winner among finished beam hypotheses.

    hypotheses: (tokens, summed log-probability) pairs; alpha: the length penalty's
    α in lp = ((5 + length) / 6)^α. returns the pair with the best log p / lp
    """
    raise NotImplementedError


def parameters_saved_by_tying(vocab: int, d_model: int) -> int:
    """Parameters saved when one shared vocabulary's source embeddings, target
    embeddings and output layer use one (vocab, d_model) matrix."""
    raise NotImplementedError
