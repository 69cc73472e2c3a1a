"""Checks of chapter 09's exercises (The copy task)."""

import itertools
import math
from types import ModuleType

import torch

from annotated_transformer.exercises.grading import (
    assert_close,
    assert_equal,
    exercise,
    rng,
    seed,
)

V, START, END = 4, 0, 3


def _toy_model(seed: int):
    """A "model" over V tokens whose next-token distribution depends on the
    position and the last token: a fixed random table."""
    g = torch.Generator().manual_seed(seed)
    table = (2 * torch.randn(8, V, V, generator=g)).log_softmax(-1)

    def next_log_probs(tokens: list[int]) -> torch.Tensor:
        return table[len(tokens) - 1, tokens[-1]]

    return next_log_probs, table


def _exhaustive(next_log_probs, max_len: int) -> list[int]:
    """The most probable complete hypothesis, by trying every one."""
    best, best_logp = None, -math.inf
    for n in range(1, max_len):
        for rest in itertools.product(range(V), repeat=n):
            tokens = [START, *rest]
            ended = [i for i, t in enumerate(tokens) if t == END]
            if ended and ended[0] != len(tokens) - 1:
                continue  # went on after the end symbol
            if not ended and len(tokens) < max_len:
                continue  # unfinished, but not yet at the length limit
            steps = range(1, len(tokens))
            logp = sum(float(next_log_probs(tokens[:i])[tokens[i]]) for i in steps)
            if logp > best_logp:
                best, best_logp = tokens, logp
    return best


@exercise(
    chapter="09",
    name="beam_score",
    title="GNMT's length-normalised score",
    hint="divide by lp = ((5 + length) / 6) ** alpha, element-wise; with alpha = "
    "0 the score is the log-probability itself.",
)
def check_beam_score(m: ModuleType) -> None:
    logp, length = torch.tensor([-2.0, -2.6, -9.0]), torch.tensor([3.0, 8.0, 1.0])
    lp = torch.tensor([(8 / 6) ** 0.6, (13 / 6) ** 0.6, 1.0])
    assert_close(m.beam_score(logp, length, 0.6), logp / lp, "the scores, α = 0.6")
    assert_close(m.beam_score(logp, length, 0.0), logp, "the scores, α = 0")
    short, long = m.beam_score(logp[:2], length[:2], 0.6).tolist()
    assert long > short, "with α = 0.6 the long hypothesis of the example must win"
    logp = -10 * torch.rand(6, generator=rng(5))  # a run's own hypotheses
    length = torch.randint(1, 30, (6,), generator=rng(6)).double()
    alpha = float(torch.rand((), generator=rng(7)))
    lp = ((5 + length) / 6) ** alpha  # GNMT's length penalty
    got = m.beam_score(logp, length, alpha)
    assert_close(got, logp / lp, f"the scores, α = {alpha:.3f}")


@exercise(
    chapter="09",
    name="greedy",
    title="Greedy decoding of any model",
    hint="start from [start]; while the last token is not end and the sequence is "
    "shorter than max_len, append int(next_log_probs(tokens).argmax()).",
)
def check_greedy(m: ModuleType) -> None:
    next_log_probs, table = _toy_model(seed(20))  # a random model each run
    for max_len in (1, 2, 6):
        tokens = [START]
        while len(tokens) < max_len and tokens[-1] != END:
            tokens.append(int(table[len(tokens) - 1, tokens[-1]].argmax()))
        got = m.greedy(next_log_probs, START, END, max_len)
        assert got == tokens, f"max_len={max_len}: {got}, expected {tokens}"

    def sure_of_end(tokens: list[int]) -> torch.Tensor:
        return torch.tensor([0.0, -1.0, -1.0, 5.0]).log_softmax(-1)

    got = m.greedy(sure_of_end, START, END, 9)
    assert got == [START, END], f"a model sure of the end stops at once, not {got}"


@exercise(
    chapter="09",
    name="top_p_filter",
    title="Top-p (nucleus) filtering",
    hint="sort the probabilities in descending order; a token stays if the tokens "
    "before it in that order add up to less than p; put -inf on the others, back "
    "in the original order (scatter with the sort's indices).",
)
def check_top_p_filter(m: ModuleType) -> None:
    g = rng(2)
    logits = 2 * torch.randn(3, 10, generator=g)
    for p in (0.05, 0.5, 0.9, 1.0):
        expected = torch.full_like(logits, -math.inf)
        for row in range(3):
            probs = logits[row].softmax(-1).tolist()
            mass = 0.0
            for token in sorted(range(10), key=lambda t: -probs[t]):
                if mass >= p:
                    break
                expected[row, token] = logits[row, token]
                mass += probs[token]
        got = m.top_p_filter(logits, p)
        kept = expected.isfinite()
        assert_equal(got.isfinite(), kept, f"which tokens p = {p} keeps")
        assert_equal(got[kept], logits[kept], f"the kept logits, p = {p}")


@exercise(
    chapter="09",
    name="beam_search",
    title="Beam search, checked by trying every sequence",
    hint="keep (tokens, summed logp) pairs; at each step a finished hypothesis "
    "(last token end, or max_len tokens) is a candidate as it is, an unfinished "
    "one gives V candidates; sort by logp and keep k; stop when all k are "
    "finished.",
)
def check_beam_search(m: ModuleType) -> None:
    for k in range(3):
        next_log_probs, _ = _toy_model(seed(21 + k))
        best = _exhaustive(next_log_probs, 5)
        got = m.beam_search(next_log_probs, START, END, 5, V**4)
        assert got == best, f"a beam wide enough for all: {got}, best is {best}"
        greedy = [START]
        while len(greedy) < 5 and greedy[-1] != END:
            greedy.append(int(next_log_probs(greedy).argmax()))
        got = m.beam_search(next_log_probs, START, END, 5, 1)
        assert got == greedy, f"k = 1 is greedy decoding: {got}, not {greedy}"
