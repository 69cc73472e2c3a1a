"""Reference solutions of chapter 09's exercises."""

from collections.abc import Callable

from torch import Tensor


def beam_score(logp: Tensor, length: Tensor, alpha: float) -> Tensor:
    """GNMT's length-normalised score: log P(Y | X) / ((5 + |Y|) / 6)^α.

    logp: the hypotheses' summed log-probabilities; length: their lengths |Y|
    (same shape) -> the scores, same shape
    """
    return logp / ((5 + length) / 6) ** alpha


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
    tokens = [start]
    while len(tokens) < max_len and tokens[-1] != end:
        tokens.append(int(next_log_probs(tokens).argmax()))
    return tokens


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus (top-p) filtering: keep the fewest most probable tokens whose
    probabilities add up to at least p; the others get -inf.

    logits: (..., V) -> (..., V); the most probable token is always kept
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass of the more probable tokens
    drop_sorted = before >= p  # the nucleus is already complete without them
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


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
    beam = [([start], 0.0)]
    while not all(h[-1] == end or len(h) == max_len for h, _ in beam):
        candidates = []
        for tokens, score in beam:
            if tokens[-1] == end or len(tokens) == max_len:
                candidates.append((tokens, score))
                continue
            logp = next_log_probs(tokens).tolist()
            for t, lp in enumerate(logp):
                candidates.append(([*tokens, t], score + lp))
        beam = sorted(candidates, key=lambda c: c[1], reverse=True)[:k]
    return beam[0][0]
