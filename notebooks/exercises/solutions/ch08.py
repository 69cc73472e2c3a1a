"""Reference solutions of chapter 08's exercises."""

import torch
from torch import Tensor


def adam_step(
    param: Tensor,
    grad: Tensor,
    m: Tensor,
    v: Tensor,
    step: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
) -> tuple[Tensor, Tensor, Tensor]:
    """One Adam update; step counts from 1. Returns the new (param, m, v).

    m ← β₁ m + (1 - β₁) g;  v ← β₂ v + (1 - β₂) g²;
    param ← param - lr · m̂ / (√v̂ + eps), with m̂ = m / (1 - β₁^step),
    v̂ = v / (1 - β₂^step) (the bias corrections)
    """
    beta1, beta2 = betas
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    m_hat = m / (1 - beta1**step)
    v_hat = v / (1 - beta2**step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


def noam_rate(
    step: int,
    d_model: int,
    warmup: int,
    factor: float = 1.0,
) -> float:
    """The paper's schedule (eq. 3) with the original's factor, for step >= 1:
    factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)."""
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def smoothed_targets(
    target: Tensor,
    V: int,
    smoothing: float,
    pad: int,
) -> Tensor:
    """Label-smoothed targets in PyTorch's convention, padding rows all zero.

    target: (n,) ids -> q (n, V): q(c) = (1 - ε)[c = y] + ε / V, except that
    the rows of positions whose target is ``pad`` are 0
    """
    q = torch.full((target.size(0), V), smoothing / V)
    q[torch.arange(target.size(0)), target] += 1 - smoothing
    q[target == pad] = 0.0
    return q


def label_smoothing_loss(
    log_p: Tensor,
    target: Tensor,
    smoothing: float,
    pad: int,
) -> Tensor:
    """Label-smoothed KL(q ‖ p) summed over the positions whose target is not
    padding, with the original's q: 1 - ε on the target, ε / (V - 2) on every
    other class but padding, which gets 0.

    log_p: (n, V) log-probabilities; target: (n,) ids -> a scalar
    """
    V = log_p.size(-1)
    q = torch.full_like(log_p, smoothing / (V - 2))
    q.scatter_(1, target.unsqueeze(1), 1 - smoothing)
    q[:, pad] = 0.0
    q[target == pad] = 0.0
    kept = q > 0  # 0 · log 0 and 0 · log p are 0: leave those entries out
    return (q[kept] * (q[kept].log() - log_p[kept])).sum()
