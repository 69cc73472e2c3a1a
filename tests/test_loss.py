import math

import pytest
import torch
import torch.nn.functional as F

from annotated_transformer.training.loss import (
    LabelSmoothing,
    OriginalLabelSmoothing,
    smoothed_cross_entropy,
)


def smoothing(exclude_pad: bool) -> type[LabelSmoothing]:
    """The original's smoothing when it excludes the padding class, else ours."""
    return OriginalLabelSmoothing if exclude_pad else LabelSmoothing


def brute_force_target(
    V: int, pad: int | None, eps: float, y: int, exclude_pad: bool
) -> list:
    """q for one position, written out class by class."""
    if pad is not None and y == pad:
        return [0.0] * V
    q = []
    for c in range(V):
        if exclude_pad:
            q.append(0.0 if c == pad else (1 - eps) if c == y else eps / (V - 2))
        else:
            q.append((1 - eps) * (c == y) + eps / V)
    return q


def brute_force_kl(x, target, V, pad, eps, exclude_pad) -> float:
    total = 0.0
    for i, y in enumerate(target.tolist()):
        for c, qc in enumerate(brute_force_target(V, pad, eps, y, exclude_pad)):
            if qc > 0:
                total += qc * (math.log(qc) - x[i, c].item())
    return total


CASES = {
    "no padding in batch": [1, 2, 3, 4, 1],
    "one padding token": [1, 0, 3, 4, 2],
    "all padding": [0, 0, 0, 0, 0],
    "empty batch": [],
}


@pytest.mark.parametrize("exclude_pad", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_label_smoothing_matches_brute_force(case: str, exclude_pad: bool) -> None:
    V, pad, eps = 5, 0, 0.3
    target = torch.tensor(CASES[case], dtype=torch.long)
    x = torch.randn(
        len(target), V, generator=torch.Generator().manual_seed(0)
    ).log_softmax(-1)
    loss = smoothing(exclude_pad)(V, pad, eps)(x, target)
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(
        brute_force_kl(x, target, V, pad, eps, exclude_pad), abs=1e-5
    )


def test_label_smoothing_without_padding_and_with_pad_as_last_class() -> None:
    V, eps = 6, 0.1
    target = torch.tensor([5, 0, 2, 5])
    x = torch.randn(4, V).log_softmax(-1)
    for pad in [None, V - 1]:
        loss = LabelSmoothing(V, pad, eps)(x, target)
        assert loss.item() == pytest.approx(
            brute_force_kl(x, target, V, pad, eps, False), abs=1e-5
        )


def test_label_smoothing_is_finite_where_the_model_gives_zero_probability() -> None:
    # The original computed 0 * log(0)-style products and returned NaN when a
    # log-probability was -inf on a class with zero target mass (here: the padding
    # class).
    V, pad = 5, 0
    x = torch.randn(3, V).log_softmax(-1)
    x[:, pad] = -math.inf
    target = torch.tensor([1, 2, 0])
    x.requires_grad_(True)
    loss = OriginalLabelSmoothing(V, pad, 0.2)(x, target)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(x.grad).all()
    assert loss.item() == pytest.approx(
        brute_force_kl(x.detach(), target, V, pad, 0.2, True), abs=1e-5
    )


def test_true_dist_rows_sum_to_one_except_padding() -> None:
    crit = LabelSmoothing(7, 2, 0.4)
    crit(torch.randn(4, 7).log_softmax(-1), torch.tensor([1, 2, 6, 0]))
    sums = crit.true_dist.sum(-1)
    torch.testing.assert_close(sums, torch.tensor([1.0, 0.0, 1.0, 1.0]))


def uniform_smoothing_entropy(V: int, eps: float) -> float:
    """H(q) for q = (1 - ε) one-hot + ε / V, in closed form."""
    hi, lo = 1 - eps + eps / V, eps / V
    return -(hi * math.log(hi) + (V - 1) * lo * math.log(lo))


def test_kl_form_is_cross_entropy_minus_target_entropy_with_equal_gradients() -> (
    None
):
    V, pad, eps = 11, 0, 0.1
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 9, V, generator=gen)
    target = torch.randint(1, V, (2, 9), generator=gen)
    target[0, 6:] = pad
    n = int((target != pad).sum())

    z1 = logits.clone().requires_grad_(True)
    kl = LabelSmoothing(V, pad, eps)(
        z1.log_softmax(-1).view(-1, V), target.view(-1)
    )
    kl.backward()

    z2 = logits.clone().requires_grad_(True)
    ce = F.cross_entropy(
        z2.view(-1, V),
        target.view(-1),
        ignore_index=pad,
        label_smoothing=eps,
        reduction="sum",
    )
    ce.backward()

    assert kl.item() == pytest.approx(
        ce.item() - n * uniform_smoothing_entropy(V, eps), rel=1e-5
    )
    torch.testing.assert_close(z1.grad, z2.grad, rtol=1e-5, atol=1e-6)

    # The package's fast path is that same PyTorch cross-entropy.
    loss_sum, n_tokens = smoothed_cross_entropy(logits, target, pad, eps)
    assert int(n_tokens) == n
    assert loss_sum.item() == pytest.approx(ce.item(), rel=1e-6)


def test_original_convention_matches_cross_entropy_with_the_same_soft_target() -> (
    None
):
    # Like for like: the original's q (ε / (V - 2), nothing on padding) against
    # PyTorch's cross-entropy with that q given explicitly as probabilities.
    V, pad, eps = 8, 1, 0.2
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(12, V, generator=gen)
    target = torch.randint(0, V, (12,), generator=gen)
    target[3] = pad
    q = torch.tensor(
        [brute_force_target(V, pad, eps, y, True) for y in target.tolist()]
    )
    entropy = float(torch.special.entr(q).sum())

    z1 = logits.clone().requires_grad_(True)
    kl = OriginalLabelSmoothing(V, pad, eps)(z1.log_softmax(-1), target)
    kl.backward()
    z2 = logits.clone().requires_grad_(True)
    ce = F.cross_entropy(z2, q, reduction="sum")
    ce.backward()

    assert kl.item() == pytest.approx(ce.item() - entropy, rel=1e-5)
    torch.testing.assert_close(z1.grad, z2.grad, rtol=1e-5, atol=1e-6)


def test_smoothed_cross_entropy_all_padding_is_zero_not_nan() -> None:
    logits = torch.randn(3, 4, 6, requires_grad=True)
    target = torch.zeros(3, 4, dtype=torch.long)
    loss_sum, n_tokens = smoothed_cross_entropy(logits, target, 0, 0.1)
    loss_sum.backward()
    assert loss_sum.item() == 0.0 and int(n_tokens) == 0
    assert torch.isfinite(logits.grad).all()


def test_smoothed_cross_entropy_accepts_log_probabilities_and_bf16() -> None:
    logits = torch.randn(5, 7)
    target = torch.tensor([1, 2, 3, 4, 5])
    a, _ = smoothed_cross_entropy(logits, target, None, 0.1)
    b, _ = smoothed_cross_entropy(logits.log_softmax(-1), target, None, 0.1)
    c, _ = smoothed_cross_entropy(logits.bfloat16(), target, None, 0.1)
    assert c.dtype == torch.float32
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c, rtol=2e-2, atol=2e-2)


def test_bad_arguments_give_value_errors() -> None:
    with pytest.raises(ValueError, match="smoothing"):
        LabelSmoothing(5, 0, 1.0)
    with pytest.raises(ValueError, match="padding_idx"):
        LabelSmoothing(5, 5, 0.1)
    with pytest.raises(ValueError, match="size >= 3"):
        OriginalLabelSmoothing(2, 0, 0.1)
    with pytest.raises(ValueError, match="flatten"):
        LabelSmoothing(5, 0, 0.1)(
            torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)
        )
    with pytest.raises(ValueError, match="target ids"):
        LabelSmoothing(5, 0, 0.1)(torch.zeros(2, 5), torch.tensor([1, 7]))
    with pytest.raises(ValueError, match="disagree"):
        smoothed_cross_entropy(
            torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long), 0
        )
