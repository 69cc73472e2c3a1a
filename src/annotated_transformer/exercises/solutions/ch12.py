"""Reference solutions to chapter 12's exercises (tricks from the paper)."""

from __future__ import annotations

from torch import Tensor


def average_state_dicts(states: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Element-wise mean of state dicts of one model, each tensor in its own dtype.

    Summed in float64, so that half-precision weights cannot overflow on the way;
    the inputs are left untouched.
    """
    if not states or any(s.keys() != states[0].keys() for s in states):
        raise ValueError("give at least one state dict, all with the same names")
    average = {}
    for name, first in states[0].items():
        total = sum(state[name].double() for state in states)
        average[name] = (total / len(states)).to(first.dtype)
    return average


def best_hypothesis(
    hypotheses: list[tuple[list[int], float]], alpha: float
) -> tuple[list[int], float]:
    """The finished hypothesis (tokens, summed log-probability) with the best score
    log p / lp, lp = ((5 + length) / 6)^α (GNMT)."""

    def score(hypothesis: tuple[list[int], float]) -> float:
        tokens, log_p = hypothesis
        return log_p / ((5 + len(tokens)) / 6) ** alpha

    return max(hypotheses, key=score)


def parameters_saved_by_tying(vocab: int, d_model: int) -> int:
    """Weights saved when source embeddings, target embeddings and the output layer
    share one (vocab, d_model) matrix: two of the three matrices disappear."""
    return 2 * vocab * d_model
