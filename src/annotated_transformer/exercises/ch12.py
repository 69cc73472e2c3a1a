"""Checks of chapter 12's exercises: averaging, the length penalty, tied weights."""

from __future__ import annotations

import math
import random
from types import ModuleType

import torch

from annotated_transformer.exercises.grading import assert_close, exercise
from annotated_transformer.model import count_parameters, make_model, tie_weights

CHAPTER = "12"


@exercise(
    chapter=CHAPTER,
    name="average_state_dicts",
    title="Averaging checkpoints",
    hint="Average name by name; add up in a wider dtype than float16 (its largest "
    "number is 65504), give each tensor back its own dtype, and do not add into "
    "the first checkpoint's tensors in place.",
)
def check_average_state_dicts(m: ModuleType) -> None:
    gen = torch.Generator().manual_seed(0)
    states = [
        {"w": torch.randn(3, 4, generator=gen), "b": torch.randn(4, generator=gen)}
        for _ in range(5)
    ]
    copies = [{k: v.clone() for k, v in s.items()} for s in states]
    average = m.average_state_dicts(states)
    names = sorted(average)
    assert names == ["b", "w"], f"expected the names w and b, got {names}"
    for name in ("w", "b"):
        expected = torch.stack([s[name] for s in copies]).mean(0)
        assert_close(average[name], expected, f"the mean of {name!r}")
    for state, copy in zip(states, copies, strict=True):
        for name in state:
            assert torch.equal(state[name], copy[name]), "a checkpoint was modified"
    half = [{"w": torch.full((2,), 60000.0, dtype=torch.float16)} for _ in range(3)]
    mean = m.average_state_dicts(half)["w"]
    assert mean.dtype == torch.float16, f"float16 in, float16 out; got {mean.dtype}"
    assert torch.isfinite(mean).all() and (mean == 60000).all(), (
        f"three float16 tensors of 60000 average to 60000, yours {mean.tolist()}"
    )


@exercise(
    chapter=CHAPTER,
    name="best_hypothesis",
    title="Length penalty: which finished translation wins?",
    hint="Divide each summed log-probability by lp = ((5 + length) / 6)^α and take "
    "the largest; with α = 0 this is the raw log-probability.",
)
def check_best_hypothesis(m: ModuleType) -> None:
    short, long = ([4, 2], -2.0), ([4, 7, 7, 9, 2], -2.6)
    assert m.best_hypothesis([short, long], 0.0) == short, (
        "with α = 0 the more probable (here shorter) hypothesis wins"
    )
    assert m.best_hypothesis([short, long], 1.0) == long, (
        "with α = 1 the longer one wins: -2.6 / (10/6) > -2.0 / (7/6)"
    )
    rng = random.Random(0)
    for _ in range(50):
        hyps = [([1] * rng.randint(1, 30), -rng.uniform(0.1, 40)) for _ in range(6)]
        alpha = rng.choice([0.0, 0.6, 1.0, 1.5])
        scores = [lp / math.pow((5 + len(t)) / 6, alpha) for t, lp in hyps]
        expected = hyps[scores.index(max(scores))]
        got = m.best_hypothesis(hyps, alpha)
        assert got == expected, (
            f"α={alpha}: expected the hypothesis of length {len(expected[0])} and "
            f"log p {expected[1]:.3f}, got {got[1] if got else got}"
        )


@exercise(
    chapter=CHAPTER,
    name="parameters_saved_by_tying",
    title="What tied embeddings save",
    hint="With one vocabulary, how many (vocab × d_model) matrices does the model "
    "have before tying, and how many after? The output layer's bias is not shared.",
)
def check_parameters_saved_by_tying(m: ModuleType) -> None:
    for vocab, d_model in ((50, 16), (37, 8), (200, 32)):
        sizes = {"N": 1, "d_model": d_model, "d_ff": 2 * d_model, "h": 2}
        model = make_model(vocab, vocab, **sizes)
        before = count_parameters(model)
        saved = before - count_parameters(tie_weights(model, share_source=True))
        got = m.parameters_saved_by_tying(vocab, d_model)
        assert got == saved, (
            f"vocab {vocab}, d_model {d_model}: tying saves {saved:,} parameters "
            "in "
            f"make_model, you say {got:,}"
        )
