"""Checks of chapter 08's exercises (Training)."""

import math
from types import ModuleType

import torch
import torch.nn.functional as F

from annotated_transformer.exercises.grading import (
    assert_close,
    backward,
    exercise,
    integers,
    rng,
)


@exercise(
    chapter="08",
    name="adam_step",
    title="One Adam step by hand",
    hint="update m and v first, then divide each by its bias correction 1 - "
    "β^step before the step; eps goes outside the square root.",
)
def check_adam_step(m: ModuleType) -> None:
    g = rng(0)
    # eps = 0.01 with gradients of 0.01: where eps goes (inside the root or out)
    for eps, scale in [(1e-9, 1.0), (1e-2, 1e-2)]:
        start = torch.randn(5, generator=g)
        reference = torch.nn.Parameter(start.clone())
        betas = (0.9, 0.98)
        optimizer = torch.optim.Adam([reference], lr=0.01, betas=betas, eps=eps)
        param, mom, var = start.clone(), torch.zeros(5), torch.zeros(5)
        for step in (1, 2, 3):
            grad = scale * torch.randn(5, generator=g)
            reference.grad = grad.clone()
            optimizer.step()
            param, mom, var = m.adam_step(
                param, grad, mom, var, step, 0.01, betas=betas, eps=eps
            )
            what = f"the parameter after step {step} (eps={eps:g})"
            assert_close(param, reference.detach(), what)


@exercise(
    chapter="08",
    name="noam_rate",
    title="The paper's learning-rate schedule",
    hint="lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5); in "
    "Python, x ** -0.5.",
)
def check_noam_rate(m: ModuleType) -> None:
    drawn = (*integers(0, 16, 1024, 2), 0.5)
    for d_model, warmup, factor in [(512, 4000, 1.0), (128, 400, 2.0), drawn]:
        for step in (1, 10, warmup - 1, warmup, warmup + 1, 10 * warmup):
            shape = min(1 / math.sqrt(step), step / warmup**1.5)
            paper = factor * shape / math.sqrt(d_model)
            got = m.noam_rate(step, d_model, warmup, factor)
            call = f"noam_rate({step}, {d_model}, {warmup}, {factor})"
            wrong = f"{call} = {got}, not {paper}"
            assert math.isclose(got, paper, rel_tol=1e-9), wrong
        peak = m.noam_rate(warmup, d_model, warmup, factor)
        assert peak >= m.noam_rate(warmup + 1, d_model, warmup, factor), "peak"


@exercise(
    chapter="08",
    name="smoothed_targets",
    title="Smoothed target distributions",
    hint="start every entry at ε / V, add 1 - ε at each row's target column "
    "(index with arange(n) and the targets), then zero the rows whose target is "
    "padding.",
)
def check_smoothed_targets(m: ModuleType) -> None:
    g = rng(1)
    scores = torch.randn(6, 7, generator=g)
    target = torch.tensor([3, 1, 0, 6, 2, 0])  # id 0 is padding
    q = m.smoothed_targets(target, 7, 0.1, 0)
    cross_entropy = -(q * scores.log_softmax(-1)).sum()
    smoothing = {"label_smoothing": 0.1, "ignore_index": 0, "reduction": "sum"}
    expected = F.cross_entropy(scores, target, **smoothing)
    assert_close(cross_entropy, expected, "H(q, p) (against F.cross_entropy)")
    assert_close(q.sum(-1), torch.tensor([1.0, 1, 0, 1, 1, 0]), "the rows' sums")


def _kl(log_p: torch.Tensor, target: list[int], eps: float, pad: int) -> float:
    """The original's smoothed KL, entry by entry, skipping zero target mass."""
    V, total = log_p.size(-1), 0.0
    for row, y in zip(log_p.tolist(), target, strict=True):
        for c, log_pc in enumerate(row):
            q = 0.0 if pad in (y, c) else (1 - eps if c == y else eps / (V - 2))
            total += q * (math.log(q) - log_pc) if q > 0 else 0.0
    return total


@exercise(
    chapter="08",
    name="label_smoothing_loss",
    title="Find the bug: label smoothing that returns inf or NaN",
    hint="in floating point, 0 · log 0 = 0 · (-inf) = NaN, and so is 0 · log p "
    "when the model gives a class p = 0; entries with q = 0 contribute nothing to "
    "the KL divergence, so leave them out of the sum.",
    question="which entries of the sum are not finite? Find the values of the "
    "target q and of the model's p that produce them.",
)
def check_label_smoothing_loss(m: ModuleType) -> None:
    g = rng(2)
    base = torch.randn(5, 6, generator=g)
    (first,) = integers(3, 0, 5, 1)  # this run's padding ids: one is not 0
    cases = {  # 0 stands for the padding id
        "no padding": ([3, 1, 4, 1, 5], False),
        "one padding token": ([3, 0, 4, 1, 5], False),
        "all padding": ([0, 0, 0, 0, 0], False),
        "p(padding) = 0": ([3, 0, 4, 1, 5], True),
    }
    for pad in (first, (first + 3) % 6):
        real = [c for c in range(6) if c != pad]
        for case, (written, rules_out_padding) in cases.items():
            target = [real[t - 1] if t else pad for t in written]
            scores = base.clone().requires_grad_(True)
            log_p = scores.log_softmax(-1)
            if rules_out_padding:  # a model that never predicts padding
                log_p = log_p.masked_fill(torch.arange(6) == pad, -math.inf)
            sent = log_p.detach().requires_grad_(True)
            with backward(torch.tensor(1.0)):
                loss = m.label_smoothing_loss(sent, torch.tensor(target), 0.1, pad)
            expected = _kl(log_p.detach(), target, 0.1, pad)
            assert_close(
                loss, torch.tensor(expected), f"the loss ({case}, pad id {pad})"
            )
            log_p.backward(sent.grad)  # on through the model's log_softmax
            finite = scores.grad.isfinite().all()
            assert finite, f"the gradient is not finite ({case}, pad id {pad})"
