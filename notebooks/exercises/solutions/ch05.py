"""Reference solutions of chapter 05's exercises."""

from collections.abc import Callable

import torch
from torch import Tensor, nn


def running_statistics(
    x: Tensor, mean: Tensor, var: Tensor, momentum: float
) -> tuple[Tensor, Tensor]:
    """Batch norm's running averages after one training batch.

    x: (batch, channels, positions); mean, var: (channels,), running averages
    returns the new (mean, var): (1 - momentum)·old + momentum·statistic, the
    batch's statistic, its variance unbiased (divided by n - 1, n = batch ·
    positions)
    """
    batch_mean = x.mean(dim=(0, 2))
    batch_var = x.var(dim=(0, 2), unbiased=True)
    new_mean = (1 - momentum) * mean + momentum * batch_mean
    return new_mean, (1 - momentum) * var + momentum * batch_var


def token_group_norm(x: Tensor, groups: int, eps: float = 1e-5) -> Tensor:
    """Group norm of each token on its own: its features split into ``groups``
    groups, each standardised with its own mean and (biased) variance.

    x: (batch, len, d_model), d_model divisible by groups -> the same shape
    """
    batch, length, d_model = x.shape
    g = x.reshape(batch, length, groups, d_model // groups)
    mu = g.mean(-1, keepdim=True)
    var = g.var(-1, unbiased=False, keepdim=True)
    return ((g - mu) / torch.sqrt(var + eps)).reshape(x.shape)


def layer_norm(
    x: Tensor,
    gamma: Tensor,
    beta: Tensor,
    eps: float = 1e-5,
) -> Tensor:
    """Layer norm over the last axis: gamma (x - μ) / √(σ² + eps) + beta.

    x: (..., d); gamma, beta: (d,); σ² the biased variance (divided by d)
    """
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return gamma * (x - mu) / torch.sqrt(var + eps) + beta


def residual_block(
    x: Tensor,
    sublayer: Callable[[Tensor], Tensor],
    norm: nn.Module,
    pre_norm: bool,
) -> Tensor:
    """One residual sub-layer: pre-norm x + f(LN(x)), post-norm LN(x + f(x)).

    x: (batch, len, d_model); sublayer f and norm LN keep that shape
    """
    if pre_norm:
        return x + sublayer(norm(x))
    return norm(x + sublayer(x))
