"""Chapter 09 exercises (The copy task): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=09
or  python -m annotated_transformer.exercises 09
"""

from collections.abc import Callable

from torch import Tensor


def beam_score(logp: Tensor, length: Tensor, alpha: float) -> Tensor:
    """GNMT's length-normalised score: log P(Y | X) / ((5 + |Y|) / 6)^α.

    logp: the hypotheses' summed log-probabilities; length: their lengths |Y|
    (same shape) -> the scores, same shape
    """
    raise NotImplementedError


def greedy(
    next_log_probs: Callable[[list[int]], Tensor],
    start: int,
    end: int,
    max_len: int,
) -> list[int]:
    """Greedy decoding: append the most probable token until ``end``, or until
    the sequence holds ``max_len`` tokens (the start symbol included).

    next_log_probs: the model, tokens so far -> log-probabilities (V,)
    returns the tokens, start symbol first, ``end`` included if produced
    """
    raise NotImplementedError


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus (top-p) filtering: keep the fewest most probable tokens whose
    probabilities add up to at least p; the others get -inf.

    logits: (..., V) -> (..., V); the most probable token is always kept
    """
    raise NotImplementedError


def beam_search(
    next_log_probs: Callable[[list[int]], Tensor],
    start: int,
    end: int,
    max_len: int,
    k: int,
) -> list[int]:
    """Beam search ranked by the summed log-probability (no length penalty).

    next_log_probs: the model, tokens so far -> log-probabilities (V,).
    Every step extends each unfinished hypothesis by every token; a finished
    one (its last token is ``end``) is carried over unchanged; the k best of
    all of them survive. Stops when all k are finished or hold ``max_len``
    tokens, and returns the best: tokens, start symbol first.
    """
    raise NotImplementedError
